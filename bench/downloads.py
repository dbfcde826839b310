"""``make bench BENCH_ARGS=--downloads``: importing a GBIF download as a user does, next to its limits.

At each size a GBIF-shaped DwC-A (bench/shared/gbif_download.py; cached under bench/out/) is

- taken to a table by the shortest road the machine offers, the *limit* (bench/shared/import_limit.py): a
  streamed unzip of occurrence.txt, DuckDB reading the columns a load needs and writing them as the derived
  CSV, and psql's ``\\copy`` of that CSV into a table shaped and indexed like an occurrences partition: three
  processes, one after the other;
- imported through Dagster's CLI, as a user would: ``dagster asset materialize -m
  surveillance_pipeline.definitions --select gbif_raw,gbif_derived,occurrences --partition-range
  <first>...<last>`` with ``GBIF_SOURCE=download``, in a scratch warehouse, a scratch Dagster storage and a
  fresh data folder whose downloads/ holds the zip; then the same command again, with nothing changed;
- and, for the no-change run's reference, a streamed sha256 of the zip plus one trivial
  ``dagster asset materialize``; finally one tick of ``downloads_sensor`` on a fresh cursor.

Every process is timed from start to exit, and its peak RSS read from ``os.wait4`` (``ru_maxrss``) by a
small launcher (bench/shared/processes.py's LAUNCHER says why the bench cannot spawn it itself). A process
whose RSS passes ``--download-rss-cap-gb`` is killed (the machine is shared) and recorded as failed. A
failure never stops the bench: it is recorded, with its last stderr line, in the table. The section's
figures: bench/results/downloads.md and .json.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from bench.shared.gbif_download import GENERATOR_VERSION, GeneratedDownload, cached_dwca, place_download
from bench.shared.import_limit import measure_limit
from bench.shared.inputs import trivial_cli_command
from bench.shared.processes import GB, ProcessRun, failed, median_run, run_measured
from bench.shared.report import log, write_section
from bench.shared.scratch import download_environment
from surveillance_pipeline.core.keys import sha256_file
from surveillance_pipeline.gbif.registry import load_registry
from surveillance_pipeline_tests.support.scratch_databases import scratch_database

DEFAULT_SIZES = (1_000_000, 5_000_000)
DEFAULT_SEED = 1
DEFAULT_RSS_CAP_GB = 8.0
SELECTION = "gbif_raw,gbif_derived,occurrences"
SECTION_HEADING = "### GBIF download import"
TARGETS = {
    "import_vs_limit": ("first import / limit", "<=", 2.0),
    "peak_rss_gb": ("peak RSS of any process, GB", "<=", 2.0),
    "rss_growth": ("peak RSS growth, worst project process", "<=", 1.5),
    "no_change_vs_reference": ("no-change import / (sha256 + trivial CLI)", "<=", 1.5),
    "import_growth": ("first import growth", "<=", 5.5),
    "sensor_tick_s": ("sensor tick, s", "<", 15.0),
    # With --with-20m: four times the records in at most 4.4 times the time, memory bounded.
    "import_growth_20m": ("first import growth", "<=", 4.4),
    "peak_rss_gb_20m": ("peak RSS of any project process, GB", "<=", 2.0),
}
PROJECT_PROCESSES = ("import", "no_change", "sensor")

# One tick of the project's downloads sensor, as the daemon would evaluate it, on a fresh cursor.
SENSOR_SCRIPT = """
import json, time
import dagster as dg
from surveillance_pipeline.definitions import defs
sensor = defs.resolve_sensor_def("downloads_sensor")
with dg.DagsterInstance.get() as instance:
    # The resources the sensor asks for, as the daemon builds them (not the publishing account's, say).
    needed = {key: defs.resources[key] for key in sensor.required_resource_keys}
    context = dg.build_sensor_context(instance=instance, resources=needed)
    started = time.perf_counter()
    result = sensor.evaluate_tick(context)
    seconds = time.perf_counter() - started
print(json.dumps({
    "tick_seconds": seconds,
    "run_requests": len(result.run_requests or []),
    "skip_message": result.skip_message,
    "observations": len(result.asset_events or []),
}))
"""


# ---------------------------------------------------------------------------------------------------------
# The import through Dagster's CLI, its no-change rerun, the reference and a sensor tick


def warehouse_facts(url: str) -> dict[str, Any]:
    """What the last import left: occurrences rows, and the last run's provenance actions (when readable)."""
    facts: dict[str, Any] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        with contextlib.suppress(psycopg.Error):
            row = conn.execute("SELECT count(*) FROM occurrences").fetchone()
            facts["occurrences"] = row[0] if row else None
        with contextlib.suppress(psycopg.Error):
            actions = conn.execute(
                "SELECT asset, action, count(*) FROM provenance WHERE run_id = "
                "(SELECT run_id FROM provenance ORDER BY id DESC LIMIT 1) GROUP BY asset, action "
                "ORDER BY asset, action"
            ).fetchall()
            facts["last_run"] = {f"{asset} {action}": count for asset, action, count in actions}
    return facts


def reset_import(url: str, data: Path) -> None:
    """Back to a first import: no project tables, and nothing in the data folder but downloads/."""
    with psycopg.connect(url, autocommit=True) as conn:
        tables = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'spatial_ref_sys'"
        ).fetchall()
        for (table,) in tables:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {} CASCADE").format(sql.Identifier(table)))
    for entry in data.iterdir():
        if entry.name != "downloads":
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink()


def measure_import(
    server_url: str,
    generated: GeneratedDownload,
    work: Path,
    logs: Path,
    reps: int,
    rss_cap_kb: int,
    result: dict[str, Any],
) -> None:
    """Fills ``result`` step by step, so whatever was measured survives a later failure."""
    python = sys.executable
    dagster = str(Path(python).parent / "dagster")
    keys = [s.slug for s in load_registry()]
    data = work / "import-data"
    shutil.rmtree(data, ignore_errors=True)
    zip_path = place_download(generated, data / "downloads")
    pid = os.getpid()
    with (
        scratch_database(server_url, f"surveillance_bench_dl_{pid}") as warehouse_url,
        scratch_database(server_url, f"dagster_bench_dl_{pid}", postgis=False) as storage_url,
    ):
        log(f"download {generated.records:,}: the limit (unzip, DuckDB, psql \\copy)")
        try:
            result["limit"] = measure_limit(warehouse_url, generated, work, logs, reps, rss_cap_kb)
        except Exception as error:  # noqa: BLE001 - recorded in the table, the bench goes on
            result["limit"] = failed(error)
        environment = download_environment(work / "import-home", storage_url, warehouse_url, data)
        materialize = [dagster, "asset", "materialize", "-m", "surveillance_pipeline.definitions"]
        materialize += ["--select", SELECTION, "--partition-range", f"{keys[0]}...{keys[-1]}"]

        firsts: list[ProcessRun] = []
        for rep in range(reps):
            if rep:
                reset_import(warehouse_url, data)
            log(f"download {generated.records:,}: first import through the CLI ({rep + 1}/{reps})")
            firsts.append(run_measured(f"import-{rep}", materialize, environment, logs, rss_cap_kb))
            if not firsts[-1].ok:
                break
        result["import"] = median_run(firsts)
        result["import"]["warehouse"] = warehouse_facts(warehouse_url)

        if firsts[-1].ok:
            log(f"download {generated.records:,}: the same command again, nothing changed")
            again = [
                run_measured(f"no-change-{rep}", materialize, environment, logs, rss_cap_kb)
                for rep in range(max(reps, 1))
            ]
            result["no_change"] = median_run(again)
            result["no_change"]["warehouse"] = warehouse_facts(warehouse_url)
        else:
            result["no_change"] = {
                "seconds": None,
                "max_rss_mb": None,
                "error": None,
                "not_run": "import failed",
            }

        log(f"download {generated.records:,}: reference (sha256 of the zip + one trivial CLI run)")
        hashes: list[float] = []
        for _ in range(max(reps, 3)):
            started = time.perf_counter()
            sha256_file(zip_path)
            hashes.append(time.perf_counter() - started)
        trivial = trivial_cli_command(dagster)
        trivials = [
            run_measured(f"trivial-{rep}", trivial, environment, logs, rss_cap_kb) for rep in range(reps)
        ]
        result["sha256"] = {
            "seconds": round(statistics.median(hashes), 3),
            "runs": [round(s, 3) for s in hashes],
        }
        result["trivial_cli"] = median_run(trivials)

        log(f"download {generated.records:,}: one downloads_sensor tick on a fresh cursor")
        ticks = [
            run_measured(f"sensor-{rep}", [python, "-c", SENSOR_SCRIPT], environment, logs, rss_cap_kb)
            for rep in range(reps)
        ]
        result["sensor"] = median_run(ticks)
        reports = [json.loads(t.stdout.strip().splitlines()[-1]) for t in ticks if t.ok and t.stdout.strip()]
        if reports:
            result["sensor"]["tick_seconds"] = round(statistics.median(r["tick_seconds"] for r in reports), 3)
            result["sensor"]["run_requests"] = reports[-1]["run_requests"]
            result["sensor"]["skip_message"] = reports[-1]["skip_message"]
    shutil.rmtree(data, ignore_errors=True)


def measure_download_size(
    server_url: str, work: Path, cache: Path, records: int, seed: int, reps: int, rss_cap_kb: int
) -> dict[str, Any]:
    result: dict[str, Any] = {"records": records, "seed": seed, "generator_version": GENERATOR_VERSION}
    folder = work / f"download-{records}"
    logs = folder / "logs"
    kept = cache / "logs" / f"r{records}-s{seed}"
    shutil.rmtree(kept, ignore_errors=True)
    try:
        log(f"download {records:,}: GBIF-shaped DwC-A (cached under {cache})")
        generated, was_cached = cached_dwca(cache, records, seed)
        result.update(
            key=generated.key,
            zip_bytes=generated.zip_bytes,
            occurrence_bytes=generated.occurrence_bytes,
            generation_seconds=round(generated.seconds, 2),
            cached=was_cached,
            largest_species=max(generated.records_per_species.values()),
        )
        measure_import(server_url, generated, folder, logs, reps, rss_cap_kb, result)
    except Exception as error:  # noqa: BLE001 - recorded in the table, the bench goes on
        log(f"download {records:,}: failed: {error}")
        result["error"] = failed(error)["error"]
    finally:
        # Keep the logs of a failed process next to the results; drop everything else.
        if any(isinstance(v, dict) and v.get("error") for v in result.values()) or "error" in result:
            if logs.exists():
                shutil.copytree(logs, kept)
                result["logs"] = str(kept)
        shutil.rmtree(folder, ignore_errors=True)
    return result


# ---------------------------------------------------------------------------------------------------------
# The section: sizes, ratios, the table


def measure_downloads(
    server_url: str,
    work: Path,
    cache: Path,
    sizes: list[int],
    seed: int = DEFAULT_SEED,
    reps: int = 1,
    rss_cap_gb: float = DEFAULT_RSS_CAP_GB,
) -> dict[str, Any]:
    """The download section at every size; never raises for a failed step (see the module docstring)."""
    # The zips are generated from the packaged registry: every process reads that one.
    if os.environ.pop("SURVEILLANCE_SPECIES_FILE", None):
        log("downloads: SURVEILLANCE_SPECIES_FILE ignored; the bench uses the packaged species registry")
    section: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "seed": seed,
        "reps": reps,
        "rss_cap_gb": rss_cap_gb,
        "load_before": [round(x, 2) for x in os.getloadavg()],
    }
    rss_cap_kb = int(rss_cap_gb * GB)
    section["sizes"] = [
        measure_download_size(server_url, work, cache, records, seed, reps, rss_cap_kb)
        for records in sorted(set(sizes))
    ]
    section["load_after"] = [round(x, 2) for x in os.getloadavg()]
    section["ratios"] = download_ratios(section["sizes"])
    section["verdicts"] = {
        key: verdict(key, value["value"])
        for key, value in section["ratios"].items()
        if key in TARGETS and value.get("value") is not None
    }
    return section


def _seconds(size: dict[str, Any], step: str) -> float | None:
    value = size.get(step, {})
    return value.get("seconds") if isinstance(value, dict) and not value.get("error") else None


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return round(numerator / denominator, 3)


def process_rss(size: dict[str, Any]) -> dict[str, float]:
    """Peak RSS (MB) of every process measured at one size, by name."""
    rss: dict[str, float] = {}
    for name, process in size.get("limit", {}).get("processes", {}).items():
        if process.get("max_rss_mb") is not None:
            rss[f"limit {name}"] = process["max_rss_mb"]
    for name in (*PROJECT_PROCESSES, "trivial_cli"):
        value = size.get(name, {})
        if isinstance(value, dict) and value.get("max_rss_mb") is not None:
            rss[name] = value["max_rss_mb"]
    return rss


def download_ratios(sizes: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The targets' ratios. They are stated for 1M and 5M; at other sizes the two largest stand in."""
    by_records = {s["records"]: s for s in sizes}
    measured = sorted(by_records)
    if not measured:
        return {}
    if 5_000_000 in by_records and 1_000_000 in by_records:
        big, small = by_records[5_000_000], by_records.get(1_000_000)
    else:
        big = by_records[measured[-1]]
        small = by_records[measured[-2]] if len(measured) > 1 else None
    at = f"at {big['records']:,}"
    growth = f"{big['records']:,} / {small['records']:,}" if small else ""
    ratios: dict[str, dict[str, Any]] = {}
    ratios["import_vs_limit"] = {
        "value": _ratio(_seconds(big, "import"), _seconds(big, "limit")),
        "at": at,
    }
    big_rss = process_rss(big)
    if big_rss:
        name = max(big_rss, key=lambda n: big_rss[n])
        ratios["peak_rss_gb"] = {"value": round(big_rss[name] / 1024, 3), "at": f"{at} ({name})"}
    if small is not None:
        small_rss = process_rss(small)
        growths = {
            name: big_rss[name] / small_rss[name]
            for name in PROJECT_PROCESSES
            if big_rss.get(name) and small_rss.get(name)
        }
        if growths:
            name = max(growths, key=lambda n: growths[n])
            ratios["rss_growth"] = {"value": round(growths[name], 3), "at": f"{growth} ({name})"}
        ratios["import_growth"] = {
            "value": _ratio(_seconds(big, "import"), _seconds(small, "import")),
            "at": growth,
        }
    reference = None
    if _seconds(big, "sha256") is not None and _seconds(big, "trivial_cli") is not None:
        reference = (_seconds(big, "sha256") or 0.0) + (_seconds(big, "trivial_cli") or 0.0)
    ratios["no_change_vs_reference"] = {"value": _ratio(_seconds(big, "no_change"), reference), "at": at}
    sensor = big.get("sensor", {})
    ratios["sensor_tick_s"] = {"value": sensor.get("tick_seconds"), "at": at}
    if 20_000_000 in by_records and 5_000_000 in by_records:
        huge, five = by_records[20_000_000], by_records[5_000_000]
        ratios["import_growth_20m"] = {
            "value": _ratio(_seconds(huge, "import"), _seconds(five, "import")),
            "at": "20,000,000 / 5,000,000",
        }
        huge_rss = {name: mb for name, mb in process_rss(huge).items() if name in PROJECT_PROCESSES}
        if huge_rss:
            name = max(huge_rss, key=lambda n: huge_rss[n])
            ratios["peak_rss_gb_20m"] = {
                "value": round(huge_rss[name] / 1024, 3),
                "at": f"at 20,000,000 ({name})",
            }
    return ratios


def verdict(key: str, value: float) -> str:
    _, relation, target = TARGETS[key]
    met = {"<=": value <= target, "<": value < target, ">=": value >= target}[relation]
    return "met" if met else "MISSED"


def _cell(value: float | None, error: str | None = None, digits: int = 1, not_run: str | None = None) -> str:
    if error:
        return "failed: " + error.replace("|", "\\|")[:160]
    if not_run:
        return f"not run ({not_run})"
    return "–" if value is None else f"{value:.{digits}f}"


def markdown(section: dict[str, Any]) -> str:
    """The download section's table: times, peak RSS per process, ratios against targets."""
    lines = [
        SECTION_HEADING,
        "",
        f"Measured {section['date']} (`--downloads`, seed {section['seed']}, {section['reps']} "
        "repetition(s), medians; every process timed start to exit, peak RSS from `wait4`). The limit is "
        "three processes in a row: a streamed unzip of occurrence.txt, DuckDB `read_csv` of the needed "
        "columns `COPY`'d out as the derived CSV, and `psql \\copy` into a table shaped and indexed like "
        "an occurrences partition. The import is `dagster asset materialize -m "
        f"surveillance_pipeline.definitions --select '{SELECTION}' --partition-range "
        "'<first>...<last>'` with `GBIF_SOURCE=download`, in a scratch warehouse and a fresh data folder.",
        "",
        "| records | zip MB | occurrence.txt MB | limit s | import s | import / limit | no-change s | "
        "sha256 + trivial s | sensor tick s | rows loaded |",
        "| ---: | ---: | ---: | ---: | --- | ---: | --- | ---: | --- | ---: |",
    ]
    for size in section["sizes"]:
        if "error" in size:
            lines.append(f"| {size['records']:,} | | | | {_cell(None, size['error'])} | | | | | |")
            continue
        limit, first, again = size.get("limit", {}), size.get("import", {}), size.get("no_change", {})
        sha256, trivial, sensor = size.get("sha256", {}), size.get("trivial_cli", {}), size.get("sensor", {})
        reference = None
        if sha256.get("seconds") is not None and trivial.get("seconds") is not None:
            reference = sha256["seconds"] + trivial["seconds"]
        loaded = first.get("warehouse", {}).get("occurrences")
        shown_loaded = "–" if loaded is None else f"{loaded:,}"
        if loaded is not None and loaded != size["records"]:
            shown_loaded += f" (≠ {size['records']:,})"
        reloaded = sum(
            count
            for action, count in again.get("warehouse", {}).get("last_run", {}).items()
            if action.endswith(" loaded")
        )
        shown_again = _cell(again.get("seconds"), again.get("error"), not_run=again.get("not_run"))
        if reloaded:
            shown_again += f" ({reloaded} partition steps loaded)"
        lines.append(
            f"| {size['records']:,} | {size['zip_bytes'] / 1e6:.1f} | {size['occurrence_bytes'] / 1e6:.1f} | "
            f"{_cell(limit.get('seconds'), limit.get('error'))} | "
            f"{_cell(first.get('seconds'), first.get('error'))} | "
            f"{_cell(_ratio(first.get('seconds'), limit.get('seconds')), digits=2)} | "
            f"{shown_again} | {_cell(reference)} | "
            f"{_cell(sensor.get('tick_seconds'), sensor.get('error'), digits=2)} | {shown_loaded} |"
        )
    names: list[str] = []
    for size in section["sizes"]:
        names += [name for name in process_rss(size) if name not in names]
    if names:
        lines += [
            "",
            "Peak RSS per process, MB:",
            "",
            "| records | " + " | ".join(names) + " |",
            "| ---: | " + " | ".join("---:" for _ in names) + " |",
        ]
        for size in section["sizes"]:
            rss = process_rss(size)
            lines.append(
                f"| {size['records']:,} | "
                + " | ".join(_cell(rss.get(name), digits=0) for name in names)
                + " |"
            )
    generated = [s for s in section["sizes"] if "generation_seconds" in s]
    if generated:
        lines += [
            "",
            "Generated DwC-A (bench/shared/gbif_download.py, 277 GBIF columns, cached in bench/out/): "
            + "; ".join(
                f"{s['records']:,} records {s['generation_seconds']:.1f} s"
                f"{' (cached)' if s.get('cached') else ''}, largest species {s['largest_species']:,}"
                for s in generated
            )
            + ".",
        ]
    lines += ["", "| ratio | measured | target | |", "| --- | ---: | ---: | --- |"]
    for key, (label, relation, target) in TARGETS.items():
        ratio = section["ratios"].get(key)
        if ratio is None:
            continue
        value = ratio.get("value")
        shown = "–" if value is None else f"{value:.2f}"
        judged = verdict(key, value) if value is not None else "not measured"
        lines.append(f"| {label} {ratio.get('at', '')} | {shown} | {relation} {target:g} | {judged} |")
    lines += [
        "",
        f"Noise: load average {section['load_before']} before, {section['load_after']} after. Targets are "
        "stated for 1M and 5M records; below that the two largest sizes measured stand in.",
    ]
    return "\n".join(lines) + "\n"


def write(out: Path, section: dict[str, Any]) -> str:
    """bench/results/downloads.md and .json: this section's last run."""
    return write_section(out, "downloads", section, markdown(section))
