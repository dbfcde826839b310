"""``make bench BENCH_ARGS=--only-whole-run``: the whole ``make run`` over a download, next to its floors.

At each size (default 1M records) the cached GBIF-shaped DwC-A (``cached_dwca``,
bench/shared/gbif_download.py) is placed in a fresh data folder's downloads/, and make run's own entry point
(``python -m surveillance_pipeline.commands.make_run``, with ``GBIF_SOURCE=download``) runs in a scratch
warehouse and a scratch Dagster storage twice: the first run, then the same run with nothing changed. Each
run's peak RSS is sampled over its whole process group (every ~0.2 s, the sum of the group's RSS, and the
largest single process), and make run's own table gives each asset's seconds; in the no-change run every
partition skips, so an asset's seconds there are what deciding to skip cost it. A last no-change run, with
the zip's stamp removed (data/memos/gbif_downloads/zips.stamps.json), says apart what the stamp saves:
without it the zip's sha256 is read again, as in a user's first run after the memo is lost.

The floors, measured in the same invocation: the import's limit (bench/shared/import_limit.py: unzip,
DuckDB derive, psql ``\\copy`` into an indexed table), and for the no-change run a streamed sha256 of the zip
plus one trivial ``dagster asset materialize`` (bench/shared/inputs.py ``trivial_cli_command``). The
section's figures: bench/results/whole_run.md and .json.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess  # noqa: S404  # make run and dagster are run as the user runs them
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.shared.gbif_download import cached_dwca, place_download
from bench.shared.group_runs import RSS_CAP_GB, GroupRun, run_group
from bench.shared.import_limit import measure_limit
from bench.shared.inputs import trivial_cli_command
from bench.shared.processes import GB
from bench.shared.report import log, write_section
from bench.shared.scratch import download_environment
from surveillance_pipeline.core.keys import sha256_file
from surveillance_pipeline.core.settings import PROJECT_ROOT
from surveillance_pipeline.orchestration.resources import DataPaths
from surveillance_pipeline_tests.support.scratch_databases import scratch_database

DEFAULT_SIZES = (1_000_000,)
DEFAULT_SEED = 1
IMPORT_ASSETS = ("gbif_raw", "gbif_derived", "occurrences")
TARGETS = {
    "first_vs_limit": ("first make run / import limit", 3.0),
    "import_assets_vs_limit": ("three import assets in make run / import limit", 2.0),
    "no_change_vs_floor": ("no-change make run / (sha256 + trivial CLI)", 1.5),
    "slowest_skip_s": ("slowest asset's skip decision, s", 0.2),
}
SECTION_HEADING = "### Whole make run over a GBIF download"


def peak_rss_by_step(run: GroupRun, environment: dict[str, str]) -> dict[str, float]:
    """The largest process's peak RSS (MB) while each step of ``run`` ran, its steps' windows read from the
    run's Dagster instance (bench/step_windows.py). Steps share a process: a step's figure includes what
    the steps before it in that process kept."""
    import json

    found = subprocess.run(  # noqa: S603  # fixed argv, no shell
        [sys.executable, "-m", "bench.step_windows", repr(run.started_at)],
        env={**os.environ, **environment},
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    peaks: dict[str, float] = {}
    for start, end, step in json.loads(found.stdout):
        during = [kb for at, kb in run.rss_samples if start <= at <= end]
        if during:
            peaks[step] = max(peaks.get(step, 0.0), round(max(during) / 1024, 1))
    return peaks


def measure_size(
    server_url: str, work: Path, cache: Path, records: int, seed: int, reps: int
) -> dict[str, Any]:
    rss_cap_kb = int(RSS_CAP_GB * GB)
    generated, _ = cached_dwca(cache, records, seed)
    result: dict[str, Any] = {"records": records, "seed": seed, "zip_bytes": generated.zip_bytes}
    data = work / f"whole-data-{records}"
    logs = work / f"whole-logs-{records}"
    shutil.rmtree(data, ignore_errors=True)
    zip_path = place_download(generated, data / "downloads")
    python = sys.executable
    dagster = str(Path(python).parent / "dagster")
    pid = os.getpid()
    with (
        scratch_database(server_url, f"surveillance_bench_whole_{pid}") as warehouse_url,
        scratch_database(server_url, f"dagster_bench_whole_{pid}", postgis=False) as storage_url,
    ):
        environment = download_environment(work / "whole-home", storage_url, warehouse_url, data)
        make_run = [python, "-m", "surveillance_pipeline.commands.make_run"]
        log(f"whole run {records:,}: the import's limit (unzip, DuckDB, psql \\copy)")
        result["limit"] = measure_limit(warehouse_url, generated, work, logs, reps, rss_cap_kb)
        log(f"whole run {records:,}: first make run")
        first = run_group(make_run, environment, rss_cap_kb)
        if first.returncode == 0:
            first.peak_single_mb_by_step = peak_rss_by_step(first, environment)
        result["first"] = first.as_dict()
        if first.returncode == 0:
            log(f"whole run {records:,}: make run again, nothing changed")
            again = [run_group(make_run, environment, rss_cap_kb) for _ in range(reps)]
            # The lower median: its own table goes with it.
            kept = sorted(again, key=lambda run: run.seconds)[(len(again) - 1) // 2]
            result["no_change"] = kept.as_dict()
            result["no_change"]["runs"] = [round(run.seconds, 3) for run in again]
            # What the zip's stamp saves, said apart: the same run once its stamp is gone (the zip's
            # sha256 read again, as in the first run after the memo is lost or the zip touched).
            log(f"whole run {records:,}: make run again, nothing changed, the zip's stamp removed")
            DataPaths(root=str(data)).download_stamps().unlink(missing_ok=True)
            rehashed = run_group(make_run, environment, rss_cap_kb)
            result["no_change_rehashed"] = {
                "seconds": round(rehashed.seconds, 3),
                "returncode": rehashed.returncode,
            }
        log(f"whole run {records:,}: floor (sha256 of the zip + one trivial CLI run)")
        hashes, trivials = [], []
        for _ in range(max(reps, 3)):
            started = time.perf_counter()
            sha256_file(zip_path)
            hashes.append(time.perf_counter() - started)
        for _ in range(reps):
            trivials.append(run_group(trivial_cli_command(dagster), environment, rss_cap_kb).seconds)
        result["sha256"] = round(statistics.median(hashes), 3)
        result["trivial_cli"] = round(statistics.median(trivials), 3)
    shutil.rmtree(data, ignore_errors=True)
    shutil.rmtree(logs, ignore_errors=True)
    return result


def no_change_floor(size: dict[str, Any]) -> float:
    """The no-change run's floor at one size: the zip's streamed sha256 plus one trivial CLI run."""
    return (size.get("sha256") or 0.0) + (size.get("trivial_cli") or 0.0)


def ratios(size: dict[str, Any]) -> dict[str, float | None]:
    limit = size.get("limit", {}).get("seconds")
    first = size.get("first", {})
    no_change = size.get("no_change", {})
    import_seconds = [first.get("assets", {}).get(a, {}).get("seconds") for a in IMPORT_ASSETS]
    floor = no_change_floor(size)
    skips = [a["seconds"] for a in no_change.get("assets", {}).values() if a.get("seconds") is not None]

    def over(value: float | None, by: float | None) -> float | None:
        return round(value / by, 2) if value is not None and by else None

    good = first.get("returncode") == 0
    return {
        "first_vs_limit": over(first.get("seconds") if good else None, limit),
        "import_assets_vs_limit": over(sum(import_seconds) if None not in import_seconds else None, limit),
        "no_change_vs_floor": over(no_change.get("seconds"), floor),
        "slowest_skip_s": max(skips) if skips else None,
    }


def measure_whole_run(
    server_url: str, work: Path, cache: Path, sizes: list[int], seed: int = DEFAULT_SEED, reps: int = 1
) -> dict[str, Any]:
    section: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "load_before": [round(x, 2) for x in os.getloadavg()],
        "sizes": [
            measure_size(server_url, work, cache, records, seed, reps) for records in sorted(set(sizes))
        ],
    }
    section["load_after"] = [round(x, 2) for x in os.getloadavg()]
    return section


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _s2(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def markdown(section: dict[str, Any]) -> str:
    lines = [
        SECTION_HEADING,
        "",
        f"{section['date']}; load average before {section['load_before']}, after {section['load_after']}.",
        "",
        "| records | first run s | import limit s | first / limit | import assets / limit "
        "| no-change s | floor s (sha256 + trivial CLI) | no-change / floor | slowest skip s "
        "| peak RSS group / single MB (first; no-change) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for size in section["sizes"]:
        first, again = size.get("first", {}), size.get("no_change", {})
        r = ratios(size)
        floor = no_change_floor(size)
        lines.append(
            f"| {size['records']:,} | {_s(first.get('seconds'))} | {_s(size['limit'].get('seconds'))} "
            f"| {r['first_vs_limit']} (target ≤ 3) | {r['import_assets_vs_limit']} (target ≤ 2) "
            f"| {_s(again.get('seconds'))} | {floor:.1f} ({size.get('sha256')} + {size.get('trivial_cli')}) "
            f"| {r['no_change_vs_floor']} (target ≤ 1.5) | {r['slowest_skip_s']} (target ≤ 0.2) "
            f"| {first.get('peak_group_mb')} / {first.get('peak_single_mb')}; "
            f"{again.get('peak_group_mb')} / {again.get('peak_single_mb')} |"
        )
        for label, run in (("first", first), ("no-change", again)):
            if run.get("error"):
                lines.append(f"\n{size['records']:,} {label} run failed: {run['error']}")
    for size in section["sizes"]:
        rehashed_run = size.get("no_change_rehashed", {})
        rehashed, floor = rehashed_run.get("seconds"), no_change_floor(size)
        if rehashed_run.get("returncode"):
            lines.append(
                f"\nAt {size['records']:,}, the no-change run with the zip's stamp removed failed "
                f"(exit {rehashed_run['returncode']})."
            )
        elif rehashed is not None and floor:
            saved = rehashed - (size.get("no_change", {}).get("seconds") or 0.0)
            lines.append(
                f"\nAt {size['records']:,}, the no-change run once more with the zip's stamp removed (its "
                f"sha256 read again): {rehashed:.1f} s, {rehashed / floor:.2f}x the floor; the stamp saved "
                f"{saved:.1f} s."
            )
    for size in section["sizes"]:
        first, again = size.get("first", {}), size.get("no_change", {})
        names = list(dict.fromkeys([*first.get("assets", {}), *again.get("assets", {})]))
        lines += [
            "",
            f"Per asset at {size['records']:,} (make run's own table; in the no-change run every partition "
            "skips, so its seconds are the cost of deciding to skip):",
            "",
            "| asset | first run s | loaded / skipped | first run peak RSS MB | no-change (skip decision) s "
            "| loaded / skipped |",
            "|---|---|---|---|---|---|",
        ]
        by_step = first.get("peak_single_mb_by_step", {})
        for name in names:
            a, b = first.get("assets", {}).get(name, {}), again.get("assets", {}).get(name, {})
            lines.append(
                f"| {name} | {_s(a.get('seconds'))} | {a.get('loaded', '-')} / {a.get('skipped', '-')} "
                f"| {by_step.get(name, '-')} | {_s2(b.get('seconds'))} "
                f"| {b.get('loaded', '-')} / {b.get('skipped', '-')} |"
            )
        for step in sorted(set(by_step) - set(names)):
            lines.append(f"| {step} (step) | - | - | {by_step[step]} | - | - |")
        lines.append(
            f"| (make run's own total) | {_s(first.get('reported_seconds'))} | "
            f"| {first.get('peak_single_mb')} | {_s(again.get('reported_seconds'))} | |"
        )
        if by_step:
            lines += [
                "",
                "Peak RSS per asset: the largest process of the group while the asset's step ran (make run's "
                "steps share a process, so a step's figure includes what earlier steps in it kept).",
            ]
    return "\n".join(lines) + "\n"


def run_only(server_url: str, out: Path, cache: Path, sizes: list[int], seed: int, reps: int) -> int:
    """``--only-whole-run``: the section alone; bench/results/whole_run.md and .json."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="surveillance-bench-whole-") as folder:
        section = measure_whole_run(server_url, Path(folder), cache, sizes, seed, reps)
    print(write_section(out, "whole_run", section, markdown(section)))
    return 0
