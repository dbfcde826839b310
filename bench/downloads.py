"""``make bench BENCH_ARGS=--downloads``: importing a GBIF download as a user does, next to its limits.

At each size a GBIF-shaped DwC-A (bench/gbif_download.py; cached under bench/out/) is

- taken to a table by the shortest road the machine offers, the *limit*: a streamed unzip of
  occurrence.txt, DuckDB reading the columns a load needs and writing them as the derived CSV, and psql's
  ``\\copy`` of that CSV (bench/sql/load_limit_occurrences.sql, as the ``\\copy`` path of run.py) into a
  table shaped and indexed like an occurrences partition: three processes, one after the other;
- imported through Dagster's CLI, as a user would: ``dagster asset materialize -m
  surveillance_pipeline.definitions --select gbif_raw,gbif_derived,occurrences --partition-range
  <first>...<last>`` with ``GBIF_SOURCE=download``, in a scratch warehouse, a scratch Dagster storage and a
  fresh data folder whose downloads/ holds the zip; then the same command again, with nothing changed;
- and, for the no-change run's reference, a streamed sha256 of the zip plus one trivial
  ``dagster asset materialize``; finally one tick of ``downloads_sensor`` on a fresh cursor.

Every process is timed from start to exit, and its peak RSS read from ``os.wait4`` (``ru_maxrss``) by a
small launcher (LAUNCHER says why the bench cannot spawn it itself). A process whose RSS passes
``--download-rss-cap-gb`` is killed (the machine is shared) and recorded as failed. A failure never stops
the bench: it is recorded, with its last stderr line, in the table.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess  # noqa: S404  # dagster, psql and python are run as the user runs them
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
from psycopg import sql

from bench.gbif_download import GENERATOR_VERSION, GeneratedDownload, cached_dwca
from bench.inputs import trivial_cli_command
from bench.run import (
    BENCH_SPECIES,
    create_like_occurrences,
    dagster_home,
    libpq_environment,
    log,
)
from surveillance_pipeline.core.keys import sha256_file
from surveillance_pipeline.core.settings import DATABASE_URL_VARIABLE, PROJECT_ROOT
from surveillance_pipeline.gbif.registry import load_registry
from surveillance_pipeline_tests.support.scratch_databases import scratch_database

DEFAULT_SIZES = (1_000_000, 5_000_000)
DEFAULT_SEED = 1
DEFAULT_RSS_CAP_GB = 8.0
SELECTION = "gbif_raw,gbif_derived,occurrences"
SECTION_HEADING = "### GBIF download import"
GB = 1024 * 1024  # ru_maxrss is in kB
TARGETS = {
    "import_vs_limit": ("first import / limit", "<=", 2.0),
    "peak_rss_gb": ("peak RSS of any process, GB", "<=", 2.0),
    "rss_growth": ("peak RSS growth, worst project process", "<=", 1.5),
    "no_change_vs_reference": ("no-change import / (sha256 + trivial CLI)", "<=", 1.5),
    "import_growth": ("first import growth", "<=", 5.5),
    "sensor_tick_s": ("sensor tick, s", "<", 15.0),
    # Issue #27 item 5, with --with-20m: four times the records in at most 4.4 times the time, memory bounded.
    "import_growth_20m": ("first import growth", "<=", 4.4),
    "peak_rss_gb_20m": ("peak RSS of any project process, GB", "<=", 2.0),
}
PROJECT_PROCESSES = ("import", "no_change", "sensor")

# The limit's processes import nothing of the project, so their time and RSS are the tools' own.
UNZIP_SCRIPT = """
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as archive, archive.open("occurrence.txt") as source:
    with open(sys.argv[2], "wb") as target:
        shutil.copyfileobj(source, target, 4 << 20)
"""
DUCKDB_SCRIPT = """
import json, sys, duckdb
source, target = sys.argv[1], sys.argv[2]
keys, names = json.loads(sys.argv[3]), json.loads(sys.argv[4])
def text(value):
    return "'" + value.replace("'", "''") + "'"
key_list = ", ".join(str(int(k)) for k in keys) or "NULL"
name_list = ", ".join(text(n) for n in names) or "NULL"
query = f'''
COPY (
    WITH kept AS (
        SELECT CAST(gbifID AS BIGINT) AS id,
               CAST(year AS INTEGER) AS year,
               CAST(decimalLongitude AS DOUBLE) AS lon,
               CAST(decimalLatitude AS DOUBLE) AS lat,
               license,
               coalesce(issue, '') AS issue
        FROM read_csv({text(source)}, delim = '\\t', quote = '', escape = '', header = true,
                      all_varchar = true)
        WHERE CAST(taxonKey AS BIGINT) IN ({key_list})
           OR CAST(speciesKey AS BIGINT) IN ({key_list})
           OR CAST(acceptedTaxonKey AS BIGINT) IN ({key_list})
           OR species IN ({name_list})
    )
    SELECT id,
           year,
           CASE WHEN (lat = 0 AND lon = 0) OR contains(issue, 'ZERO_COORDINATE') THEN NULL ELSE lon END
               AS longitude,
           CASE WHEN (lat = 0 AND lon = 0) OR contains(issue, 'ZERO_COORDINATE') THEN NULL ELSE lat END
               AS latitude,
           CASE regexp_replace(lower(trim(license)), '^https?://|/legalcode$|/$', '', 'g')
               WHEN 'creativecommons.org/publicdomain/zero/1.0' THEN 'CC0 1.0'
               WHEN 'creativecommons.org/licenses/by/4.0' THEN 'CC BY 4.0'
               WHEN 'creativecommons.org/licenses/by-nc/4.0' THEN 'CC BY-NC 4.0'
           END AS license
    FROM kept
) TO {text(target)} (FORMAT csv, HEADER true)
'''
with duckdb.connect() as con:
    # Rows go out as they are read: nothing asks for their order, so nothing holds them.
    con.execute("SET preserve_insertion_order = false")
    con.execute(query)
"""
# Starts the measured process and reports its wall time, exit status and peak RSS (``os.wait4``). Linux
# charges a child the RSS its parent had when it forked (exec keeps the larger of the two), so the bench,
# with Dagster imported, cannot spawn the measured process itself: this launcher (python -I -S, a few MB)
# does, and the child's ``ru_maxrss`` is its own.
LAUNCHER = """
import json, os, sys, time
report, argv = sys.argv[1], sys.argv[2:]
started = time.perf_counter()
pid = os.posix_spawnp(argv[0], argv, os.environ)
_, status, usage = os.wait4(pid, 0)
seconds = time.perf_counter() - started
code = os.waitstatus_to_exitcode(status)
with open(report, "w", encoding="utf-8") as handle:
    json.dump({"seconds": seconds, "returncode": code, "max_rss_kb": usage.ru_maxrss}, handle)
sys.exit(code if code >= 0 else 128 - code)
"""
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
# One measured process


@dataclass
class ProcessRun:
    """A child process from start to exit: wall seconds, peak RSS (kB), and why it failed, if it did."""

    name: str
    seconds: float
    max_rss_kb: int
    returncode: int
    error: str | None
    stdout: str

    @property
    def ok(self) -> bool:
        return self.error is None


def current_rss_kb(pid: int) -> int:
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/status").read_text(encoding="ascii").splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def child_pid(pid: int) -> int | None:
    """The (one) child of ``pid``: the measured process under its launcher."""
    with contextlib.suppress(OSError, ValueError):
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text(encoding="ascii").split()
        return int(children[0]) if children else None
    return None


ERROR_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Failure|Failed)\b.*")


def last_error_line(path: Path) -> str:
    """The last line of a log that names an error (``SomeError: message``), else its last non-empty line.

    Read from the file's tail only: a failed run's stderr can be long.
    """
    with path.open("rb") as handle:
        handle.seek(max(0, path.stat().st_size - 262_144))
        lines = [line.strip() for line in handle.read().decode("utf-8", "replace").splitlines()]
    lines = [line for line in lines if line]
    return next((line for line in reversed(lines) if ERROR_LINE.match(line)), lines[-1] if lines else "")


def run_measured(
    name: str,
    argv: list[str],
    environment: dict[str, str],
    logs: Path,
    rss_cap_kb: int,
    stdin: Path | None = None,
) -> ProcessRun:
    """Run ``argv`` to its end under LAUNCHER; its stdout and stderr go to ``logs/<name>.out|.err``.

    The launcher times the process from spawn to exit and reads its peak RSS from ``os.wait4``; this
    process watches the RSS meanwhile and kills the process past ``rss_cap_kb``.
    """
    logs.mkdir(parents=True, exist_ok=True)
    out_path, err_path = logs / f"{name}.out", logs / f"{name}.err"
    report = logs / f"{name}.rusage.json"
    report.unlink(missing_ok=True)
    killed: str | None = None
    with (
        out_path.open("wb") as out,
        err_path.open("wb") as err,
        stdin.open("rb") if stdin is not None else open(os.devnull, "rb") as source,  # noqa: SIM115
    ):
        started = time.perf_counter()
        launcher = subprocess.Popen(  # noqa: S603  # fixed argv, no shell
            [sys.executable, "-I", "-S", "-c", LAUNCHER, str(report), *argv],
            env={**os.environ, **environment},
            cwd=PROJECT_ROOT,
            stdin=source,
            stdout=out,
            stderr=err,
        )
        while True:
            try:
                launcher.wait(timeout=0.25)
                break
            except subprocess.TimeoutExpired:
                measured = child_pid(launcher.pid)
                if killed is None and measured is not None and current_rss_kb(measured) > rss_cap_kb:
                    killed = f"killed by the bench: RSS passed the {rss_cap_kb / GB:g} GB cap"
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(measured, signal.SIGKILL)
        wall = time.perf_counter() - started
    try:
        usage = json.loads(report.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        usage = {"seconds": wall, "max_rss_kb": 0, "returncode": launcher.returncode}
    returncode = int(usage["returncode"])
    error = None
    if killed is not None:
        error = killed
    elif returncode < 0:
        error = f"killed by signal {signal.Signals(-returncode).name} ({last_error_line(err_path)})"
    elif returncode != 0:
        error = last_error_line(err_path) or f"exit status {returncode}"
    return ProcessRun(
        name=name,
        seconds=float(usage["seconds"]),
        max_rss_kb=int(usage["max_rss_kb"]),
        returncode=returncode,
        error=error,
        stdout=out_path.read_text(encoding="utf-8", errors="replace"),
    )


def median_run(runs: list[ProcessRun]) -> dict[str, Any]:
    """Several runs of one process: median seconds of the good ones, the largest RSS of all, any error."""
    good = [run.seconds for run in runs if run.ok]
    errors = [run.error for run in runs if run.error]
    return {
        "seconds": round(statistics.median(good), 3) if good else None,
        "runs": [round(run.seconds, 3) for run in runs],
        "max_rss_mb": round(max(run.max_rss_kb for run in runs) / 1024, 1),
        "error": errors[-1] if errors else None,
    }


def failed(error: BaseException) -> dict[str, Any]:
    text = f"{type(error).__name__}: {error}".strip().splitlines()
    return {"seconds": None, "runs": [], "max_rss_mb": None, "error": text[-1] if text else "failed"}


# ---------------------------------------------------------------------------------------------------------
# The limit: unzip -> DuckDB -> psql \copy


def measure_limit(
    url: str, generated: GeneratedDownload, work: Path, logs: Path, reps: int, rss_cap_kb: int
) -> dict[str, Any]:
    python = sys.executable
    occurrence = work / "limit-occurrence.txt"
    derived = work / "limit-derived.csv"
    registry = load_registry()
    keys = [s.taxon_key for s in registry if s.taxon_key is not None]
    names = [s.scientific_name for s in registry if s.taxon_key is None]
    script = Path(__file__).with_name("sql") / "load_limit_occurrences.sql"
    steps: dict[str, list[ProcessRun]] = {"unzip": [], "duckdb": [], "psql": []}
    totals: list[float] = []
    loaded = None
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            for rep in range(reps):
                unzip = run_measured(
                    f"limit-unzip-{rep}",
                    [python, "-c", UNZIP_SCRIPT, str(generated.path), str(occurrence)],
                    {},
                    logs,
                    rss_cap_kb,
                )
                steps["unzip"].append(unzip)
                if not unzip.ok:
                    break
                duck = run_measured(
                    f"limit-duckdb-{rep}",
                    [
                        python,
                        "-c",
                        DUCKDB_SCRIPT,
                        str(occurrence),
                        str(derived),
                        json.dumps(keys),
                        json.dumps(names),
                    ],
                    {},
                    logs,
                    rss_cap_kb,
                )
                steps["duckdb"].append(duck)
                occurrence.unlink(missing_ok=True)
                if not duck.ok:
                    break
                # The table with its indexes in place before the load, as the \copy limit of run.py.
                create_like_occurrences(conn, "limit_occurrences")
                psql = run_measured(
                    f"limit-psql-{rep}",
                    [
                        "psql",
                        "-X",
                        "-q",
                        "-v",
                        "ON_ERROR_STOP=1",
                        "-v",
                        f"species_id={BENCH_SPECIES.species_id}",
                    ]
                    + ["-f", str(script)],
                    libpq_environment(url),
                    logs,
                    rss_cap_kb,
                    stdin=derived,
                )
                steps["psql"].append(psql)
                derived.unlink(missing_ok=True)
                if not psql.ok:
                    break
                totals.append(unzip.seconds + duck.seconds + psql.seconds)
                row = conn.execute("SELECT count(*) FROM limit_occurrences").fetchone()
                loaded = row[0] if row else None
            conn.execute("DROP TABLE IF EXISTS limit_occurrences")
    finally:
        occurrence.unlink(missing_ok=True)
        derived.unlink(missing_ok=True)
    processes = {name: median_run(runs) for name, runs in steps.items() if runs}
    errors = [f"{name}: {p['error']}" for name, p in processes.items() if p["error"]]
    return {
        "seconds": round(statistics.median(totals), 3) if totals else None,
        "rows_loaded": loaded,
        "processes": processes,
        "error": errors[-1] if errors else None,
    }


# ---------------------------------------------------------------------------------------------------------
# The import through Dagster's CLI, its no-change rerun, the reference and a sensor tick


def download_environment(home: Path, storage_url: str, warehouse_url: str, data: Path) -> dict[str, str]:
    """The environment of a run that reads ``data``'s downloads/, on scratch databases: one slot per pool,
    the events batched as the Makefile batches them (dagster_home)."""
    return {
        **dagster_home(home, urlsplit(storage_url).path.lstrip("/"), pool_limit=1),
        DATABASE_URL_VARIABLE: warehouse_url,
        "SURVEILLANCE_DATA_DIR": str(data),
        "GBIF_SOURCE": "download",
        # A species no download holds is searched through the offline lab data, never GBIF's API.
        "GBIF_FALLBACK_SOURCE": "lab",
    }


def place_download(generated: GeneratedDownload, folder: Path) -> Path:
    """The zip in ``folder`` (a hard link to the cached file where the filesystem allows, else a copy)."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / generated.path.name
    try:
        os.link(generated.path, target)
    except OSError:
        shutil.copyfile(generated.path, target)
    return target


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
    """The download section of bench/results.md: times, peak RSS per process, ratios against targets."""
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
            "Generated DwC-A (bench/gbif_download.py, 277 GBIF columns, cached in bench/out/): "
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


def merge_into(out: Path, section: dict[str, Any]) -> str:
    """Put the section into existing bench/results.md and results.json, replacing an earlier one."""
    table = markdown(section)
    results_md = out / "results.md"
    existing = results_md.read_text(encoding="utf-8") if results_md.exists() else ""
    if SECTION_HEADING in existing:
        existing = existing[: existing.index(SECTION_HEADING)]
    results_md.write_text(
        (existing.rstrip("\n") + "\n\n" if existing.strip() else "") + table, encoding="utf-8"
    )
    results_json = out / "results.json"
    data: dict[str, Any] = {}
    if results_json.exists():
        with contextlib.suppress(ValueError):
            data = json.loads(results_json.read_text(encoding="utf-8"))
    data["downloads"] = section
    results_json.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return table
