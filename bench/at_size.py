"""The whole pipeline at size, in plain ``make bench``: every asset that does real work next to its own
limit, and the whole ``make run`` next to its floors, at 1M and 5M records, in one invocation.

Part of the runner: each part is one of the sections that ``--only-*`` runs alone; here they run one after
the other on the same machine, with one repetition each unless ``--at-size-reps`` says more, and their
targets are gathered into one scorecard, at the top of bench/results.md after plain ``make bench`` and of
bench/results/at_size.md (``--only-at-size`` writes only the latter, with the parts' tables after it):

- ``gbif_derived`` against a DuckDB derive of the same records files (bench/derive.py);
- ``masked_release`` against pyproj's ``Geod`` over numpy arrays plus the same CSV, GeoParquet and manifest
  (bench/masking.py);
- ``region_assignment`` against one PostGIS statement, for the lab districts and Natural Earth's admin-1
  (bench/regions.py);
- the whole ``make run`` over a generated GBIF download, first and unchanged, against the import's limit
  and the no-change floor, with every asset's skip decision and the peak RSS of the process group
  (bench/whole_run.py); ``--with-20m`` adds a 20M-record download to it.

``occurrences``' own limit (a reload against ``psql \\copy``) and the lab's no-change run are plain
``make bench``'s first sections; the scorecard quotes them too.
"""

from __future__ import annotations

import os
import statistics
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import derive, lab_run, load_paths, masking, regions, whole_run
from bench.shared.report import log, machine, write_section

# Each asset's target is its section's own (derive.TARGET, masking.TARGET: 2x); regions states none apart.
ASSET_LIMIT = derive.TARGET
# The plain sections' targets the scorecard quotes when plain make bench measured them in the same run.
PLAIN_TARGETS = {**load_paths.TARGETS, **lab_run.TARGETS}


def measure_at_size(
    server_url: str,
    work: Path,
    cache: Path,
    sizes: list[int],
    whole_run_sizes: list[int],
    reps: int,
    seed: int,
    rss_cap_gb: float,
) -> dict[str, Any]:
    """Every part at each size; a part that raises is recorded as failed and the others still run."""
    section: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "sizes": sizes,
        "whole_run_sizes": whole_run_sizes,
        "reps": reps,
        "seed": seed,
        "load_before": [round(x, 2) for x in os.getloadavg()],
    }
    parts = {
        "derive": lambda folder: derive.measure_derive(folder, cache, sizes, seed, reps, rss_cap_gb),
        "masking": lambda folder: masking.measure_masking_section(server_url, folder, sizes, reps),
        "regions": lambda folder: regions.measure_regions(
            server_url, folder, sizes, reps, seed, naive_max_rows=200_000, warmup=0, chosen=[]
        ),
        "whole_run": lambda folder: whole_run.measure_whole_run(
            server_url, folder, cache, whole_run_sizes, seed, reps
        ),
    }
    for name, measure in parts.items():
        log(f"at size: {name}")
        with tempfile.TemporaryDirectory(prefix=f"surveillance-bench-{name}-", dir=work) as folder:
            try:
                section[name] = measure(Path(folder))
            except Exception as error:  # noqa: BLE001  # one part's failure is a figure, not the end
                section[name] = {"error": f"{type(error).__name__}: {error}"}
    section["load_after"] = [round(x, 2) for x in os.getloadavg()]
    return section


def _row(what: str, figure: float | None, target: str, limit: float, fmt: str = "{:.2f}x") -> list[str]:
    if figure is None:
        return [what, "not measured", target, "-"]
    return [what, fmt.format(figure), target, "met" if figure <= limit else "MISSED"]


def scorecard(section: dict[str, Any], plain: dict[str, Any]) -> list[list[str]]:
    """The issue's targets, one row each: what, figure, target, verdict."""
    rows: list[list[str]] = []
    for size in section.get("derive", {}).get("sizes", []):
        if "error" in size:
            rows.append(
                [
                    f"gbif_derived / DuckDB derive, {size['records']:,}",
                    "failed",
                    f"≤ {ASSET_LIMIT:g}x",
                    "MISSED",
                ]
            )
            continue
        rows.append(
            _row(
                f"gbif_derived / DuckDB derive, {size['records']:,}",
                size["ratio"],
                f"≤ {ASSET_LIMIT:g}x",
                ASSET_LIMIT,
            )
        )
    if plain.get("refresh_vs_copy") is not None:
        _, _, limit = PLAIN_TARGETS["refresh_vs_copy"]
        rows.append(
            _row(
                f"occurrences reload / psql \\copy, {plain.get('refresh_rows', 0):,} (the load paths)",
                plain["refresh_vs_copy"],
                f"≤ {limit:g}x",
                limit,
            )
        )
    for size in section.get("masking", {}).get("sizes", []):
        rows.append(
            _row(
                f"masked_release / Geod + the same files, {size['rows']:,}",
                size["ratio"],
                f"≤ {masking.TARGET:g}x",
                masking.TARGET,
            )
        )
    for size in section.get("regions", {}).get("sizes", []):
        ratio = statistics.median(size["project"]) / statistics.median(size["limit"])
        rows.append(
            _row(
                f"region_assignment / one PostGIS statement, {size['layer']}, {size['records']:,}",
                ratio,
                f"≤ {ASSET_LIMIT:g}x",
                ASSET_LIMIT,
            )
        )
    for size in section.get("whole_run", {}).get("sizes", []):
        measured = whole_run.ratios(size)
        for key, (label, limit) in whole_run.TARGETS.items():
            seconds = key.endswith("_s")
            target = f"~{limit:g} s" if seconds else f"≤ {limit:g}x"
            fmt = "{:.1f} s" if seconds else "{:.2f}x"
            what = f"{label.removesuffix(', s')}, {size['records']:,}"
            rows.append(_row(what, measured[key], target, limit, fmt))
    whole = [
        s for s in section.get("whole_run", {}).get("sizes", []) if s.get("first", {}).get("peak_group_mb")
    ]
    if len(whole) >= 2:
        small, large = whole[0], whole[-1]
        growth = large["first"]["peak_group_mb"] / small["first"]["peak_group_mb"]
        rows.append(
            [
                f"first make run's peak RSS (process group), {large['records']:,} / {small['records']:,}",
                f"{growth:.2f}x ({small['first']['peak_group_mb']} → {large['first']['peak_group_mb']} MB)",
                f"flat ({large['records'] // small['records']}x the records)",
                "-",
            ]
        )
    if plain.get("lab_run_vs_trivial_cli") is not None:
        _, _, limit = PLAIN_TARGETS["lab_run_vs_trivial_cli"]
        rows.append(
            _row(
                "no-change lab make run / trivial CLI run",
                plain["lab_run_vs_trivial_cli"],
                f"≤ {limit:g}x",
                limit,
            )
        )
    return rows


def markdown(section: dict[str, Any], plain: dict[str, Any], command: str) -> str:
    lines = [
        "## The whole pipeline at size: every target in one table",
        "",
        f"`{command}`; {section['date']}; {section['reps']} repetition(s) per part, seed {section['seed']}; "
        f"load average before {section['load_before']}, after {section['load_after']}. Each row's section "
        "follows, with what its limit is.",
        "",
        "| what | figure | target | verdict |",
        "|---|---|---|---|",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in scorecard(section, plain)]
    for name in ("derive", "masking", "regions", "whole_run"):
        part = section.get(name, {})
        if "error" in part:
            lines += ["", f"The {name} part failed: {part['error']}"]
    lines.append("")
    if "sizes" in section.get("derive", {}):
        lines += ["#" + derive.markdown(section["derive"], command), ""]
    if "sizes" in section.get("masking", {}):
        lines += ["#" + masking.markdown(section["masking"]), ""]
    if "sizes" in section.get("regions", {}):
        lines += ["#" + regions.markdown({**section["regions"], "command": command}), ""]
    if "sizes" in section.get("whole_run", {}):
        lines += [whole_run.markdown(section["whole_run"]), ""]
    return "\n".join(lines)


def write(out: Path, section: dict[str, Any], command: str) -> str:
    """bench/results/at_size.md and .json: the at-size scorecard of this run's parts, and their tables."""
    return write_section(out, "at_size", {**section, "command": command}, markdown(section, {}, command))
