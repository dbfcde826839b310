"""``make bench``: the project's code paths next to the machine's limits, measured in one run.

Not a test: it asserts nothing about time and never fails CI. It times each path several times and keeps
the median, and reports ratios of paths measured side by side, because this machine is shared and noisy.
Everything runs in scratch databases (created here, dropped at the end) and a temporary folder, so the
lab warehouse, its Dagster storage and ``data/`` are never touched.

Sections: (1) a full refresh of one species through ``load_occurrences`` vs ``psql \\copy`` + ``INSERT ...
SELECT`` into an identical table, and vs row-by-row ``executemany`` on a 20k slice (extrapolated);
(2) a skip vs sha256 of the file plus one state-row read; (3) the md5 cap over 1M occurrences through
``refresh_species_sample`` vs the bare statement; (4) a no-change ``lab_run`` vs one trivial
``dagster asset materialize``; (5) time per row at each size; (6) a backfill of species partitions by
two processes at once vs one; (7) with ``--downloads`` (or ``--only-downloads``), importing a generated GBIF
download through Dagster's CLI vs unzip + DuckDB + ``psql \\copy`` (bench/downloads.py).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import platform
import re
import shutil
import statistics
import subprocess  # noqa: S404  # psql and dagster are run as the user runs them
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import psycopg2
import yaml
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from bench import verification
from bench.inputs import raw_snapshot, trivial_cli_command, write_derived_csv
from surveillance_pipeline.core.keys import forget_hashed_files, sha256_file
from surveillance_pipeline.core.partition_files import replace_file
from surveillance_pipeline.core.refresh import LOADED, SKIPPED, ensure_state_tables
from surveillance_pipeline.core.settings import DATABASE_URL_VARIABLE, PROJECT_ROOT
from surveillance_pipeline.core.sql_files import load_sql
from surveillance_pipeline.gbif.registry import Species, load_registry
from surveillance_pipeline.occurrences.load import PACKAGE as OCCURRENCES_PACKAGE
from surveillance_pipeline.occurrences.load import OccurrenceRules, load_occurrences
from surveillance_pipeline.samples.load import PACKAGE as SAMPLES_PACKAGE
from surveillance_pipeline.samples.load import refresh_species_sample
from surveillance_pipeline_tests.support.scratch_databases import scratch_database
from surveillance_pipeline_tests.support.species import synthetic_species

PACKAGE = "bench"
RUN_ID = "bench"
NAIVE_ROWS = 20_000
# The distributed profile's parts that --only-distributed (and --distributed) run by default: the issue's
# figures (#26): the download's import with 1 and 2 workers, the lab run, a dead worker's cost.
DISTRIBUTED_PARTS = "download,lab,kills"
# The whole pipeline at size (#27): every asset vs its limit and the whole run, at these records.
AT_SIZE_SIZES = (1_000_000, 5_000_000)
SAMPLE_CAP = 100
SAMPLE_ROWS = 1_000_000
# Not a registry species: the bench's rows can never be mistaken for the lab's.
BENCH_SPECIES = synthetic_species(900_001, "bench-species", "Benchmarkia synthetica", "bench")


def makefile_event_batch_size() -> str:
    """What `make` exports besides .local/env.sh: the Makefile's EVENT_BATCH_SIZE, read from it."""
    found = re.search(r"^EVENT_BATCH_SIZE := (\d+)$", (PROJECT_ROOT / "Makefile").read_text(), re.MULTILINE)
    if found is None:
        raise RuntimeError("the Makefile sets no EVENT_BATCH_SIZE")
    return found[1]


EVENT_BATCH_SIZE = makefile_event_batch_size()
TARGETS = {
    "refresh_vs_copy": ("refresh / \\copy path", "<=", 1.3),
    "executemany_vs_refresh": ("executemany / refresh", ">=", 15.0),
    "skip_vs_sha256_read": ("skip / (sha256 + state read)", "<=", 1.2),
    "verify_vs_psql_floor": ("verification / (count + hash scan in psql), largest size", "<=", 1.5),
    "sample_vs_bare": ("md5 cap / bare statement", "<=", 1.2),
    "lab_run_vs_trivial_cli": ("no-change lab run / trivial CLI run", "<=", 1.5),
    "growth_1m_to_10m": ("refresh 10M / 1M", "<=", 11.0),
}


# ---------------------------------------------------------------------------------------------------------
# Timing


@dataclass
class Measure:
    """Seconds of each repetition of one path; the median is what the tables quote."""

    seconds: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    def as_dict(self) -> dict[str, Any]:
        return {"median": round(self.median, 4), "runs": [round(s, 4) for s in self.seconds]}


def repeat(reps: int, action: Callable[[], Any], setup: Callable[[], Any] | None = None) -> Measure:
    """Time ``action`` ``reps`` times, running the untimed ``setup`` before each."""
    measure = Measure()
    for _ in range(reps):
        if setup is not None:
            setup()
        started = time.perf_counter()
        action()
        measure.seconds.append(time.perf_counter() - started)
    return measure


def log(message: str) -> None:
    print(f"[bench {datetime.now(UTC):%H:%M:%S}] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------------------
# Scratch databases (as surveillance_pipeline_tests/conftest.py makes them)


def libpq_environment(url: str) -> dict[str, str]:
    """PG* variables for a URL, so psql never carries the password on its command line."""
    parts = conninfo_to_dict(url)
    names = {"host": "PGHOST", "port": "PGPORT", "user": "PGUSER", "password": "PGPASSWORD"}
    environment = {names[k]: str(v) for k, v in parts.items() if k in names and v is not None}
    environment["PGDATABASE"] = str(parts["dbname"])
    return environment


def drop_project_tables(conn: psycopg.Connection) -> None:
    tables = conn.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'spatial_ref_sys'"
    ).fetchall()
    for (table,) in tables:
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {} CASCADE").format(sql.Identifier(table)))


# ---------------------------------------------------------------------------------------------------------
# (1), (2), (5): refresh, skip and growth at one size


def create_like_occurrences(conn: psycopg.Connection, table: str) -> None:
    """An empty table shaped and indexed like a species' partition of occurrences, under another name.

    The limit loads into it with its indexes already in place, as a plain ``\\copy`` user would.
    """
    names = {"fresh": sql.Identifier(table), "species_id": sql.Literal(BENCH_SPECIES.species_id)}
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(names["fresh"]))
    conn.execute(load_sql(OCCURRENCES_PACKAGE, "create_occurrences_partition").format(**names))
    conn.execute(load_sql(OCCURRENCES_PACKAGE, "index_occurrences_partition").format(**names))


def forget_occurrences(conn: psycopg.Connection) -> None:
    """The project's occurrences as on a first load: no table, no state row, no schema record."""
    conn.execute("DROP TABLE IF EXISTS occurrences CASCADE")
    conn.execute("DELETE FROM target_state WHERE target = 'occurrences'")
    conn.execute("DELETE FROM target_schema WHERE target = 'occurrences'")


def load_project(conn: psycopg.Connection, path: Path, expect: str | None) -> int:
    """``load_occurrences`` of one file; ``expect`` (loaded, skipped or None for either) guards the bench."""
    outcome = load_occurrences(
        conn, species=BENCH_SPECIES, derived=path, rules=OccurrenceRules(), run_id=RUN_ID
    )
    if expect is not None and outcome.action != expect:
        raise RuntimeError(f"expected {expect}, got {outcome.action} ({outcome.reason})")
    return outcome.rows


def load_limit(url: str, path: Path) -> None:
    """psql runs the script in a file, because its stdin carries the CSV for ``\\copy ... FROM pstdin``."""
    script = Path(__file__).with_name("sql") / "load_limit_occurrences.sql"
    with path.open("rb") as stdin:
        subprocess.run(  # noqa: S603  # fixed argv, no shell
            ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-v", f"species_id={BENCH_SPECIES.species_id}"]
            + ["-f", str(script)],
            stdin=stdin,
            env={**os.environ, **libpq_environment(url)},
            check=True,
        )


def read_rows(path: Path, limit: int) -> list[dict[str, Any]]:
    """The first ``limit`` CSV rows as the course's loader held them: dicts of Python values."""
    rows: list[dict[str, Any]] = []
    with path.open(encoding="utf-8", newline="") as handle:
        for record in csv.DictReader(handle):
            rows.append(
                {
                    "id": int(record["id"]),
                    "species_id": BENCH_SPECIES.species_id,
                    "year": int(record["year"]) if record["year"] else None,
                    "longitude": float(record["longitude"]) if record["longitude"] else None,
                    "latitude": float(record["latitude"]) if record["latitude"] else None,
                    "license": record["license"] or None,
                }
            )
            if len(rows) >= limit:
                break
    return rows


def measure_executemany(url: str, path: Path, reps: int) -> dict[str, Measure]:
    """Row-by-row INSERTs of a 20k slice: psycopg2's executemany (one round trip per row, the course's
    loader) and psycopg 3's (pipelined)."""
    rows = read_rows(path, NAIVE_ROWS)
    with psycopg.connect(url, autocommit=True) as conn:
        statement = (
            load_sql(PACKAGE, "insert_occurrence_row")
            .format(table=sql.Identifier("naive_occurrences"))
            .as_string(conn)
        )

        def reset() -> None:
            create_like_occurrences(conn, "naive_occurrences")

        def with_psycopg3() -> None:
            with conn.transaction(), conn.cursor() as cursor:
                cursor.executemany(statement, rows)

        results = {"psycopg3": repeat(reps, with_psycopg3, reset)}
        legacy = psycopg2.connect(url)
        try:

            def with_psycopg2() -> None:
                with legacy.cursor() as cursor:
                    cursor.executemany(statement, rows)
                legacy.commit()

            results["psycopg2"] = repeat(reps, with_psycopg2, reset)
        finally:
            legacy.close()
        conn.execute("DROP TABLE IF EXISTS naive_occurrences")
    return results


def measure_size(url: str, work: Path, rows: int, reps: int, with_limit: bool = True) -> dict[str, Any]:
    """First load, reload, skip and the \\copy limit for one species of ``rows`` records."""
    log(f"inputs of {rows:,} rows")
    first = write_derived_csv(work / f"derived-{rows}-a.csv", rows, variant=0)
    second = write_derived_csv(work / f"derived-{rows}-b.csv", rows, variant=1)
    result: dict[str, Any] = {"rows": rows, "csv_bytes": first.stat().st_size}
    with psycopg.connect(url, autocommit=True) as conn:
        ensure_state_tables(conn)

        log(f"{rows:,}: project first load")
        result["first_load"] = repeat(
            reps, lambda: load_project(conn, first, LOADED), lambda: forget_occurrences(conn)
        )
        # A reload replaces rows the table already holds: alternate the two inputs so every one loads.
        inputs = iter([second, first] * reps)
        log(f"{rows:,}: project reload (replace all rows of the species)")
        result["reload"] = repeat(reps, lambda: load_project(conn, next(inputs), LOADED))
        current = second if reps % 2 else first

        log(f"{rows:,}: skip vs sha256 + one state-row read")
        fast_reps = max(reps, 7)
        # As a user meets it: a new process, which has not hashed the file yet (the memo forgotten).
        result["skip"] = repeat(
            fast_reps, lambda: load_project(conn, current, SKIPPED), setup=forget_hashed_files
        )
        # What the memo saves when one process asks for the same file's sha256 again.
        result["skip_cached"] = repeat(fast_reps, lambda: load_project(conn, current, SKIPPED))

        def sha256_and_read() -> None:
            sha256_file(current)
            conn.execute(
                "SELECT job_key FROM target_state WHERE target = %s AND partition_key = %s",
                ["occurrences", BENCH_SPECIES.slug],
            ).fetchone()

        result["sha256_read"] = repeat(fast_reps, sha256_and_read)

        if not with_limit:
            return result
        log(f"{rows:,}: psql \\copy + INSERT ... SELECT into an identical table")
        result["copy_limit"] = repeat(
            reps, lambda: load_limit(url, first), lambda: create_like_occurrences(conn, "limit_occurrences")
        )
        conn.execute("DROP TABLE IF EXISTS limit_occurrences")
    return result


# ---------------------------------------------------------------------------------------------------------
# (3) the md5 cap over the occurrences a 1M refresh left


def measure_sample(url: str, reps: int) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        held = conn.execute(
            "SELECT count(*) FROM occurrences WHERE species_id = %s", [BENCH_SPECIES.species_id]
        ).fetchone()
        occurrences = held[0] if held else 0

        def forget_sample() -> None:
            conn.execute("DELETE FROM target_state WHERE target = 'occurrence_sample'")

        def through_project() -> None:
            outcome, _ = refresh_species_sample(conn, species=BENCH_SPECIES, cap=SAMPLE_CAP, run_id=RUN_ID)
            if outcome.action != LOADED or outcome.rows != SAMPLE_CAP:
                raise RuntimeError(f"sample: {outcome}")

        # Autovacuum would otherwise visit the freshly loaded rows during whichever path runs first.
        conn.execute("VACUUM ANALYZE occurrences")
        bare_table = sql.Identifier("bare_sample")
        statement = load_sql(SAMPLES_PACKAGE, "insert_species_sample").format(occurrence_sample=bare_table)

        def fresh_bare_table() -> None:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(bare_table))
            conn.execute(load_sql(SAMPLES_PACKAGE, "create_occurrence_sample").format(table=bare_table))

        def bare() -> None:
            with conn.transaction():
                conn.execute(statement, {"species_id": BENCH_SPECIES.species_id, "cap": SAMPLE_CAP})

        log(f"md5 cap over {occurrences:,} occurrences: project and bare statement, alternating")
        # One untimed run of each first: the first statement over the fresh rows reads them cold, and
        # whichever path ran first paid for it.
        repeat(1, through_project, forget_sample)
        repeat(1, bare, fresh_bare_table)
        project, bare_measure = Measure(), Measure()
        for _ in range(reps):
            project.seconds += repeat(1, through_project, forget_sample).seconds
            bare_measure.seconds += repeat(1, bare, fresh_bare_table).seconds
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(bare_table))
    return {"occurrences": occurrences, "project": project, "bare": bare_measure}


# ---------------------------------------------------------------------------------------------------------
# (4) a no-change lab run vs one trivial CLI run; (6) a parallel backfill


def dagster_home(directory: Path, storage_db: str, pool_limit: int) -> dict[str, str]:
    """A DAGSTER_HOME like the project's (Postgres storage, queued coordinator), on a scratch database,
    with the events batched as the Makefile batches them (also when the bench is run without make)."""
    directory.mkdir(parents=True, exist_ok=True)
    config = yaml.safe_load((PROJECT_ROOT / "dagster.yaml").read_text(encoding="utf-8"))
    config["concurrency"]["pools"]["default_limit"] = pool_limit
    (directory / "dagster.yaml").write_text(yaml.safe_dump(config, sort_keys=True), encoding="utf-8")
    return {
        "DAGSTER_HOME": str(directory),
        "DAGSTER_PG_DB": storage_db,
        "DAGSTER_ARTIFACTS_DIR": str(directory / "artifacts"),
        "DAGSTER_COMPUTE_LOGS_DIR": str(directory / "compute_logs"),
        "DAGSTER_EVENT_BATCH_SIZE": os.environ.get("DAGSTER_EVENT_BATCH_SIZE", EVENT_BATCH_SIZE),
    }


def run_process(argv: list[str], environment: dict[str, str], cwd: Path = PROJECT_ROOT) -> str:
    completed = subprocess.run(  # noqa: S603  # fixed argv, no shell
        argv, env={**os.environ, **environment}, cwd=cwd, check=True, capture_output=True, text=True
    )
    return completed.stdout


def event_count(storage_url: str) -> int:
    with psycopg.connect(storage_url) as conn:
        row = conn.execute("SELECT count(*) FROM event_logs").fetchone()
    return row[0] if row else 0


def measure_lab_run(server_url: str, work: Path, reps: int) -> dict[str, Any]:
    python = sys.executable
    dagster = str(Path(python).parent / "dagster")
    with (
        scratch_database(server_url, f"surveillance_bench_lab_{os.getpid()}") as warehouse_url,
        scratch_database(server_url, f"dagster_bench_lab_{os.getpid()}", postgis=False) as storage_url,
    ):
        environment = {
            **dagster_home(work / "lab-home", urlsplit(storage_url).path.lstrip("/"), pool_limit=1),
            DATABASE_URL_VARIABLE: warehouse_url,
            "SURVEILLANCE_DATA_DIR": str(work / "lab-data"),
        }
        lab_run = [python, "-m", "surveillance_pipeline.commands.make_run"]
        log("lab run: first run on empty scratch databases")
        first = repeat(1, lambda: run_process(lab_run, environment))
        outputs: list[str] = []
        events: list[int] = []

        def no_change_run() -> None:
            before = event_count(storage_url)
            outputs.append(run_process(lab_run, environment))
            events.append(event_count(storage_url) - before)

        log("lab run: no-change runs")
        no_change = repeat(reps, no_change_run)
        trivial = trivial_cli_command(dagster)
        trivial_events: list[int] = []

        def trivial_run() -> None:
            before = event_count(storage_url)
            run_process(trivial, environment)
            trivial_events.append(event_count(storage_url) - before)

        log("trivial dagster asset materialize")
        trivial_measure = repeat(reps, trivial_run)
        log("process start + import of the definitions")
        imports = repeat(
            reps, lambda: run_process([python, "-c", "import surveillance_pipeline.definitions"], environment)
        )
    return {
        "first_run": first,
        "no_change_run": no_change,
        "trivial_cli": trivial_measure,
        "import_definitions": imports,
        "events_per_no_change_run": events,
        "events_per_trivial_run": trivial_events,
        "no_change_summary": outputs[-1].splitlines() if outputs else [],
    }


def measure_parallel(
    server_url: str, work: Path, species_count: int, rows: int, processes: int, reps: int
) -> dict[str, Any]:
    """``gbif_derived`` + ``occurrences`` over ``species_count`` partitions: one process vs several."""
    python = sys.executable
    chosen = list(load_registry()[:species_count])
    slugs = [s.slug for s in chosen]
    data = work / "parallel-data"
    log(f"parallel: raw snapshots of {species_count} species x {rows:,} records")
    for index, species in enumerate(chosen):
        replace_file(
            data / "raw" / f"{species.slug}.json", raw_snapshot(species, rows, index * rows).to_bytes()
        )
    groups = [
        slugs[i * len(slugs) // processes : (i + 1) * len(slugs) // processes] for i in range(processes)
    ]
    runs: dict[str, Any] = {"species": species_count, "rows_per_species": rows, "processes": processes}
    with (
        scratch_database(server_url, f"surveillance_bench_par_{os.getpid()}") as warehouse_url,
        scratch_database(server_url, f"dagster_bench_par_{os.getpid()}", postgis=False) as storage_url,
    ):
        environment = {
            # The pool of each target admits as many steps as there are processes: the partitions are
            # disjoint and the database's per-partition locks keep writers apart.
            **dagster_home(work / "parallel-home", urlsplit(storage_url).path.lstrip("/"), processes),
            DATABASE_URL_VARIABLE: warehouse_url,
            "SURVEILLANCE_DATA_DIR": str(data),
        }

        def reset() -> None:
            shutil.rmtree(data / "derived", ignore_errors=True)
            with psycopg.connect(warehouse_url, autocommit=True) as conn:
                drop_project_tables(conn)
                ensure_state_tables(conn)

        def start(group: list[str]) -> subprocess.Popen[str]:
            return subprocess.Popen(  # noqa: S603  # fixed argv, no shell
                [python, "-m", "bench.materialize_range", group[0], group[-1]],
                env={**os.environ, **environment},
                cwd=PROJECT_ROOT,
                stdout=subprocess.PIPE,
                text=True,
            )

        checks: dict[str, Any] = {}

        def backfill(mode: str, ranges: list[list[str]]) -> Measure:
            """Time the processes from start to finish; verify each repetition outside the clock."""
            measure = Measure()
            for _ in range(reps):
                reset()
                started = time.perf_counter()
                workers = [start(group) for group in ranges]
                reports = [json.loads(worker.communicate()[0].strip().splitlines()[-1]) for worker in workers]
                measure.seconds.append(time.perf_counter() - started)
                if any(w.returncode != 0 or not r["success"] for w, r in zip(workers, reports, strict=True)):
                    raise RuntimeError(f"parallel bench: a {mode} run failed ({reports})")
                checks[mode] = verify_backfill(
                    warehouse_url, storage_url, chosen, rows, [r["run_id"] for r in reports]
                )
            return measure

        log("parallel: one process over every partition")
        serial = backfill("serial", [slugs])
        log(f"parallel: {processes} processes over disjoint ranges")
        parallel = backfill("parallel", groups)
    runs.update(groups=[[g[0], g[-1]] for g in groups], serial=serial, parallel=parallel, checks=checks)
    return runs


def verify_backfill(
    warehouse_url: str, storage_url: str, chosen: list[Species], rows: int, run_ids: list[str]
) -> dict[str, Any]:
    """Every partition loaded exactly once, with its own rows and state row; raises otherwise."""
    with psycopg.connect(warehouse_url) as conn:
        counts: dict[int, int] = dict(
            conn.execute("SELECT species_id, count(*) FROM occurrences GROUP BY species_id").fetchall()
        )
        states: dict[str, int] = dict(
            conn.execute(
                "SELECT partition_key, rows FROM target_state WHERE target = 'occurrences'"
            ).fetchall()
        )
        loads = conn.execute(
            "SELECT partition_key, count(*) FROM provenance WHERE asset = 'occurrences' AND action = 'loaded'"
            " AND run_id = ANY(%s) GROUP BY partition_key",
            [run_ids],
        ).fetchall()
    with psycopg.connect(storage_url) as conn:
        events = conn.execute(
            load_sql(PACKAGE, "count_materializations_by_partition"),
            {"asset_key": json.dumps(["occurrences"]), "run_ids": run_ids},
        ).fetchall()
    problems = []
    for species in chosen:
        if counts.get(species.species_id) != rows:
            problems.append(f"{species.slug}: {counts.get(species.species_id)} rows, expected {rows}")
        if states.get(species.slug) != rows:
            problems.append(f"{species.slug}: state row says {states.get(species.slug)}")
    if sorted(loads) != sorted((s.slug, 1) for s in chosen):
        problems.append(f"provenance loads per partition: {loads}")
    if sorted(events) != sorted((s.slug, 1) for s in chosen):
        problems.append(f"Dagster materializations per partition: {events}")
    if problems:
        raise RuntimeError("parallel backfill overlapped or missed: " + "; ".join(problems))
    return {
        "partitions": len(chosen),
        "rows_each": rows,
        "loads_per_partition": 1,
        "materializations_per_partition": 1,
        "state_rows": len(states),
    }


# ---------------------------------------------------------------------------------------------------------
# Report


def ratio(numerator: float, denominator: float) -> float:
    return round(numerator / denominator, 3) if denominator else float("nan")


def verdict(key: str, value: float) -> str:
    _, relation, target = TARGETS[key]
    met = value <= target if relation == "<=" else value >= target
    return "met" if met else "MISSED"


def summarize(results: dict[str, Any]) -> dict[str, Any]:
    """The ratios the targets are stated in, at the largest size measured up to 1M for the load paths."""
    sizes = results["sizes"]
    at_1m = next((s for s in sizes if s["rows"] == 1_000_000), sizes[-1])
    ratios: dict[str, Any] = {}
    refresh = at_1m["reload"].median
    naive = results["executemany"]["psycopg2"].median * at_1m["rows"] / NAIVE_ROWS
    ratios["refresh_vs_copy"] = ratio(refresh, at_1m["copy_limit"].median)
    ratios["refresh_rows"] = at_1m["rows"]
    ratios["first_load_vs_copy"] = ratio(at_1m["first_load"].median, at_1m["copy_limit"].median)
    ratios["executemany_vs_refresh"] = ratio(naive, refresh)
    ratios["executemany_psycopg3_vs_refresh"] = ratio(
        results["executemany"]["psycopg3"].median * at_1m["rows"] / NAIVE_ROWS, refresh
    )
    ratios["skip_vs_sha256_read"] = ratio(at_1m["skip"].median, at_1m["sha256_read"].median)
    if "sample" in results:
        ratios["sample_vs_bare"] = ratio(
            results["sample"]["project"].median, results["sample"]["bare"].median
        )
    if "lab_run" in results:
        lab = results["lab_run"]
        ratios["lab_run_vs_trivial_cli"] = ratio(lab["no_change_run"].median, lab["trivial_cli"].median)
    by_rows = {s["rows"]: s for s in sizes}
    if 1_000_000 in by_rows and 10_000_000 in by_rows:
        ratios["growth_1m_to_10m"] = ratio(
            by_rows[10_000_000]["reload"].median, by_rows[1_000_000]["reload"].median
        )
    if 100_000 in by_rows and 1_000_000 in by_rows:
        ratios["growth_100k_to_1m"] = ratio(
            by_rows[1_000_000]["reload"].median, by_rows[100_000]["reload"].median
        )
    if results.get("verification"):
        largest = results["verification"][-1]
        ratios["verify_vs_psql_floor"] = ratio(
            verification.median(largest["verify"]), verification.median(largest["floor"])
        )
    if "parallel" in results:
        par = results["parallel"]
        ratios["parallel_speed_up"] = ratio(par["serial"].median, par["parallel"].median)
    return ratios


def step_seconds_total(summary: list[str]) -> float:
    """Sum of the ``seconds`` column of lab_run's printed summary (asset, loaded, skipped, rows, seconds)."""
    total = 0.0
    for line in summary[2:]:
        fields = line.split()
        if len(fields) > 4:
            try:
                total += float(fields[4])
            except ValueError:
                continue
    return total


def to_json(value: Any) -> Any:
    if isinstance(value, Measure):
        return value.as_dict()
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [to_json(v) for v in value]
    return value


def markdown(results: dict[str, Any]) -> str:
    """The table README quotes: medians, ratios and targets."""
    ratios = results["ratios"]
    lines = [
        f"Measured {results['date']} on {results['machine']}, PostgreSQL {results['postgres'].split()[0]} "
        f"(`make bench`, {results['reps']} repetitions, "
        "medians; the machine was shared, see noise below).",
        "",
        "| rows | project first load s | project reload s | `\\copy` + INSERT s | reload µs/row | "
        "`\\copy` µs/row | skip ms | sha256 + read ms | skip ratio | skip, sha256 remembered ms |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for size in results["sizes"]:
        rows = size["rows"]
        limit = size.get("copy_limit")
        limit_seconds = f"{limit.median:.2f}" if limit else "not run"
        limit_per_row = f"{limit.median / rows * 1e6:.2f}" if limit else ""
        lines.append(
            f"| {rows:,} | {size['first_load'].median:.2f} | {size['reload'].median:.2f} | "
            f"{limit_seconds} | {size['reload'].median / rows * 1e6:.2f} | {limit_per_row} | "
            f"{size['skip'].median * 1e3:.1f} | {size['sha256_read'].median * 1e3:.1f} | "
            f"{size['skip'].median / size['sha256_read'].median:.2f} | "
            f"{size['skip_cached'].median * 1e3:.1f} |"
        )
    lines += [
        "",
        "A skip is timed as a user meets it, in a process that has not hashed the file yet (the sha256 memo "
        "forgotten before each); the last column is the same skip when the process hashed the file before.",
    ]
    naive = results["executemany"]
    lines += [
        "",
        f"Row-by-row `executemany` of {NAIVE_ROWS:,} rows: psycopg2 {naive['psycopg2'].median:.2f} s, "
        f"psycopg 3 (pipelined) {naive['psycopg3'].median:.2f} s.",
    ]
    if "sample" in results:
        sample = results["sample"]
        lines.append(
            f"md5 cap {SAMPLE_CAP} over {sample['occurrences']:,} occurrences ({len(sample['bare'].seconds)} "
            f"pairs, alternating): project {sample['project'].median:.2f} s, bare statement "
            f"{sample['bare'].median:.2f} s."
        )
    if "lab_run" in results:
        lab = results["lab_run"]
        lines.append(
            f"Lab run: first {lab['first_run'].median:.1f} s, no change {lab['no_change_run'].median:.1f} s "
            f"({statistics.median(lab['events_per_no_change_run']):.0f} Dagster events); trivial "
            f"`dagster asset materialize` {lab['trivial_cli'].median:.1f} s "
            f"({statistics.median(lab['events_per_trivial_run']):.0f} events); process start + import of "
            f"the definitions {lab['import_definitions'].median:.1f} s; the steps' own time in the last "
            "no-change run (Dagster's step start to success) "
            f"{step_seconds_total(lab['no_change_summary']):.1f} s."
        )
    if "parallel" in results:
        par = results["parallel"]
        lines.append(
            f"Backfill of `gbif_derived` + `occurrences` over {par['species']} species x "
            f"{par['rows_per_species']:,} records: 1 process {par['serial'].median:.1f} s, "
            f"{par['processes']} processes {par['parallel'].median:.1f} s (each partition loaded once, "
            "state rows and Dagster events checked)."
        )
    if results.get("verification"):
        lines += verification.markdown(results["verification"])
    lines += ["", "| ratio | measured | target | |", "| --- | ---: | ---: | --- |"]
    for key, (label, relation, target) in TARGETS.items():
        if key in ratios:
            lines.append(
                f"| {label} | {ratios[key]:.2f} | {relation} {target:g} | {verdict(key, ratios[key])} |"
            )
    extras = {
        "first_load_vs_copy": "first load / \\copy path",
        "executemany_psycopg3_vs_refresh": "psycopg 3 executemany / refresh",
        "growth_100k_to_1m": "refresh 1M / 100k",
        "parallel_speed_up": "parallel backfill speed-up",
    }
    for key, label in extras.items():
        if key in ratios:
            lines.append(f"| {label} | {ratios[key]:.2f} | | |")
    lines += ["", f"Noise: load average {results['load_before']} before, {results['load_after']} after."]
    return "\n".join(lines) + "\n"


def machine() -> str:
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    system = f"{platform.system()} {platform.release()}"
    with contextlib.suppress(OSError):
        # platform.freedesktop_os_release() names the distribution (Debian 12) where the kernel would not.
        system = platform.freedesktop_os_release().get("PRETTY_NAME", system)
    return f"{os.cpu_count()} cores, {memory:.0f} GiB, {system}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="make bench: the project's paths next to the limits")
    parser.add_argument("--reps", type=int, default=3, help="repetitions per path (the median is kept)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--with-10m", action="store_true", help="also 10,000,000 rows")
    parser.add_argument("--no-lab-run", action="store_true", help="leave out the lab run section")
    parser.add_argument("--no-parallel", action="store_true", help="leave out the parallel backfill")
    parser.add_argument(
        "--verify-sizes",
        type=lambda text: [int(size) for size in text.split(",") if size.strip()],
        default=[1_000_000, 5_000_000],
        help="rows of the verification section, comma-separated (empty: leave it out)",
    )
    parser.add_argument("--parallel-species", type=int, default=4)
    parser.add_argument("--parallel-rows", type=int, default=100_000)
    parser.add_argument("--parallel-reps", type=int, default=2)
    # The md5 cap's statement swings by a third from one run to the next on a shared machine (2.3–3.8 s
    # seen), more than the project adds to it; more pairs steady the median.
    parser.add_argument("--sample-reps", type=int, default=5, help="alternating pairs for the md5 cap")
    parser.add_argument(
        "--limit-max-rows",
        type=int,
        default=1_000_000,
        help="run the \\copy limit only up to this size (into an indexed table it grows superlinearly)",
    )
    parser.add_argument("--out", type=Path, default=PROJECT_ROOT / "bench")
    parser.add_argument(
        "--downloads", action="store_true", help="also the GBIF download section (bench/downloads.py)"
    )
    parser.add_argument("--only-downloads", action="store_true", help="only the GBIF download section")
    parser.add_argument(
        "--only-masking", action="store_true", help="only masked_release vs its limit (bench/masking.py)"
    )
    parser.add_argument(
        "--masking-sizes",
        type=lambda text: [int(size) for size in text.split(",") if size.strip()],
        default=[1_000_000, 5_000_000],
        help="rows of the one bench species in the masking section, comma-separated",
    )
    parser.add_argument(
        "--download-sizes",
        type=lambda text: [int(size) for size in text.split(",") if size.strip()],
        default=[1_000_000, 5_000_000],
        help="records per generated download, comma-separated (default 1000000,5000000)",
    )
    parser.add_argument(
        "--distributed",
        action="store_true",
        help=f"also the distributed profile's parts {DISTRIBUTED_PARTS} (see --only-distributed)",
    )
    parser.add_argument(
        "--only-distributed",
        "--only-distributed-run",
        dest="only_distributed",
        nargs="?",
        const=DISTRIBUTED_PARTS,
        help="only the distributed profile; parts, comma-separated (default "
        f"{DISTRIBUTED_PARTS}): download = make run's import of a 600,000-record download, 1 worker vs 2, "
        "side by side; lab = the lab make run, 2 workers vs local; kills = a dead worker's cost "
        "(bench/distributed_run.py, distributed-run.md); backfill = a backfill's speed-up and the "
        "profile's cost per partition (bench/distributed.py, distributed.md)",
    )
    parser.add_argument(
        "--distributed-reps", type=int, default=3, help="repetitions of the speed-ups (medians are kept)"
    )
    parser.add_argument(
        "--with-20m",
        action="store_true",
        help="also a 20,000,000-record download (the whole run at size, and --downloads)",
    )
    parser.add_argument(
        "--download-cache", type=Path, default=None, help="generated downloads (default: <out>/out)"
    )
    parser.add_argument("--only-derive", action="store_true", help="only gbif_derived vs DuckDB: derive.md")
    parser.add_argument("--derive-reps", type=int, default=3, help="alternating pairs in the derive section")
    parser.add_argument("--download-seed", type=int, default=1, help="seed of the generated downloads")
    parser.add_argument(
        "--only-quality",
        action="store_true",
        help="only occurrence_quality against plain PostGIS statements: bench/quality.md",
    )
    parser.add_argument(
        "--quality-sizes",
        default="1000000,5000000",
        help="records of the quality section's species, comma-separated",
    )
    parser.add_argument(
        "--only-regions", action="store_true", help="only region_assignment: bench/regions.md"
    )
    parser.add_argument(
        "--region-sizes",
        type=lambda text: [int(size) for size in text.split(",") if size.strip()],
        default=[1_000_000, 5_000_000],
        help="records of the one bench species in the regions section, comma-separated",
    )
    parser.add_argument(
        "--region-warmup", type=int, default=1, help="untimed pairs before the regions' timed ones"
    )
    parser.add_argument("--region-layers", default="", help="lab,natural-earth (empty: both)")
    parser.add_argument("--download-reps", type=int, default=1, help="repetitions in the download section")
    parser.add_argument(
        "--download-rss-cap-gb",
        type=float,
        default=8.0,
        help="kill (and record as failed) a download-section process whose RSS passes this",
    )
    parser.add_argument(
        "--only-whole-run", action="store_true", help="only make run over a download (whole_run.py)"
    )
    parser.add_argument(
        "--whole-run-sizes", type=lambda t: [int(s) for s in t.split(",") if s.strip()], default=[1_000_000]
    )
    parser.add_argument(
        "--whole-run-cache", type=Path, default=None, help="the downloads' cache (default OUT/out)"
    )
    parser.add_argument(
        "--at-size-sizes",
        type=lambda t: [int(s) for s in t.split(",") if s.strip()],
        default=list(AT_SIZE_SIZES),
        help="records of the pipeline at size (every asset vs its limit, the whole run), comma-separated",
    )
    parser.add_argument(
        "--at-size-reps", type=int, default=1, help="repetitions in the pipeline-at-size part"
    )
    parser.add_argument(
        "--no-at-size", action="store_true", help="leave out the pipeline at size (bench/at_size.py)"
    )
    parser.add_argument(
        "--only-at-size", action="store_true", help="only the pipeline at size, into results.md/.json"
    )
    args = parser.parse_args(argv)
    server_url = os.environ[DATABASE_URL_VARIABLE]
    command = 'make bench BENCH_ARGS="' + " ".join(sys.argv[1:] if argv is None else argv) + '"'
    if args.only_whole_run:
        from bench import whole_run

        cache = args.whole_run_cache or args.out / "out"
        sizes = args.whole_run_sizes + ([20_000_000] if args.with_20m else [])
        return whole_run.run_only(server_url, args.out, cache, sizes, args.download_seed, args.download_reps)
    if args.only_downloads:
        return run_downloads_only(args, server_url)
    if args.only_distributed:
        return run_distributed_only(args, server_url, args.only_distributed)
    if args.only_at_size:
        with tempfile.TemporaryDirectory(prefix="surveillance-bench-") as folder:
            section = measure_at_size(args, server_url, Path(folder))
        return write_results(
            args.out, {"date": section["date"], "machine": machine(), "at_size": section}, command
        )
    if args.only_masking:
        from bench import masking

        print(masking.measure_masking(server_url, args.masking_sizes, args.reps, args.out))
        return 0
    if args.only_derive:
        return run_derive_only(args, argv)
    if args.only_quality:
        from bench import quality

        sizes = [int(size) for size in args.quality_sizes.split(",") if size]
        print(quality.run_only(server_url, args.out, sizes, args.reps))
        return 0
    if args.only_regions:
        from bench import regions

        with tempfile.TemporaryDirectory(prefix="surveillance-bench-") as folder:
            work = Path(folder)
            print(
                regions.run_only(
                    server_url,
                    work,
                    args.out,
                    args.region_sizes,
                    args.reps,
                    warmup=args.region_warmup,
                    chosen=[name for name in args.region_layers.split(",") if name],
                )
            )
        return 0
    sizes = sorted(set(args.sizes + ([10_000_000] if args.with_10m else [])))
    results: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "postgres": "",
        "reps": args.reps,
        "load_before": [round(x, 2) for x in os.getloadavg()],
    }
    with tempfile.TemporaryDirectory(prefix="surveillance-bench-") as folder:
        work = Path(folder)
        with scratch_database(server_url, f"surveillance_bench_{os.getpid()}") as url:
            with psycopg.connect(url) as conn:
                version = conn.execute("SHOW server_version").fetchone()
                results["postgres"] = version[0] if version else ""
            results["sizes"] = [
                measure_size(url, work, rows, args.reps, rows <= args.limit_max_rows) for rows in sizes
            ]
            log("executemany on a 20k slice")
            results["executemany"] = measure_executemany(url, work / f"derived-{sizes[0]}-a.csv", args.reps)
            if SAMPLE_ROWS in sizes:
                # The cap runs over the species at 1M rows, whatever size was measured last.
                with psycopg.connect(url, autocommit=True) as conn:
                    load_project(conn, work / f"derived-{SAMPLE_ROWS}-a.csv", None)
                results["sample"] = measure_sample(url, args.sample_reps)
            results["verification"] = [
                verification.measure_verification(
                    url, libpq_environment(url), work, rows, args.reps, load_project, forget_occurrences
                )
                for rows in args.verify_sizes
            ]
        if not args.no_lab_run:
            results["lab_run"] = measure_lab_run(server_url, work, args.reps)
        if not args.no_parallel:
            results["parallel"] = measure_parallel(
                server_url, work, args.parallel_species, args.parallel_rows, 2, args.parallel_reps
            )
        if args.downloads:
            results["downloads"] = download_section(args, server_url, work)
        if args.distributed:
            run_distributed_only(args, server_url, DISTRIBUTED_PARTS)
        if not args.no_at_size:
            results["at_size"] = measure_at_size(args, server_url, work)
    results["load_after"] = [round(x, 2) for x in os.getloadavg()]
    results["ratios"] = summarize(results)
    results["verdicts"] = {k: verdict(k, v) for k, v in results["ratios"].items() if k in TARGETS}
    return write_results(args.out, results, command)


def measure_at_size(args: argparse.Namespace, server_url: str, work: Path) -> dict[str, Any]:
    """The pipeline at size (bench/at_size.py): every asset vs its limit, the whole run vs its floors."""
    from bench import at_size

    whole_run_sizes = sorted(set(args.at_size_sizes + ([20_000_000] if args.with_20m else [])))
    return at_size.measure_at_size(
        server_url,
        work,
        args.download_cache or args.out / "out",
        args.at_size_sizes,
        whole_run_sizes,
        args.at_size_reps,
        args.download_seed,
        args.download_rss_cap_gb,
    )


def write_results(out: Path, results: dict[str, Any], command: str) -> int:
    """results.json (every repetition) and results.md: the pipeline-at-size scorecard first, when measured."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(to_json(results), indent=1) + "\n", encoding="utf-8")
    table = ""
    if "at_size" in results:
        from bench import at_size

        table += at_size.markdown(results["at_size"], results.get("ratios", {}), command) + "\n"
    if "sizes" in results:
        table += markdown(results)
    if "downloads" in results:
        from bench import downloads

        table += "\n" + downloads.markdown(results["downloads"])
    (out / "results.md").write_text(table, encoding="utf-8")
    print(table)
    return 0


def download_section(args: argparse.Namespace, server_url: str, work: Path) -> dict[str, Any]:
    """The GBIF download section (bench/downloads.py imports this module, hence the late import)."""
    from bench import downloads

    extra = ([10_000_000] if args.with_10m else []) + ([20_000_000] if args.with_20m else [])
    sizes = sorted(set(args.download_sizes + extra))
    return downloads.measure_downloads(
        server_url,
        work,
        args.download_cache or args.out / "out",
        sizes,
        seed=args.download_seed,
        reps=args.download_reps,
        rss_cap_gb=args.download_rss_cap_gb,
    )


def run_downloads_only(args: argparse.Namespace, server_url: str) -> int:
    """``--only-downloads``: the section alone, put into the results the other sections left."""
    from bench import downloads

    with tempfile.TemporaryDirectory(prefix="surveillance-bench-") as folder:
        section = download_section(args, server_url, Path(folder))
    args.out.mkdir(parents=True, exist_ok=True)
    print(downloads.merge_into(args.out, section))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


def run_distributed_only(args: argparse.Namespace, server_url: str, parts: str) -> int:
    """``--only-distributed [parts]``: make run under the profile, 1 worker vs 2 and vs local, and a dead
    worker's cost (bench/distributed-run.md); ``backfill`` adds bench/distributed.md's backfill figures."""
    chosen = [part.strip() for part in parts.split(",") if part.strip()]
    unknown = sorted(set(chosen) - {"download", "lab", "kills", "backfill"})
    if unknown:
        raise SystemExit(f"--only-distributed: unknown part(s) {', '.join(unknown)}")
    run_parts = [part for part in chosen if part != "backfill"]
    if run_parts:
        from bench.distributed_run import main as distributed_run_main

        distributed_run_main(",".join(run_parts), args.distributed_reps, args.out, machine())
    if "backfill" in chosen:
        from bench import distributed

        with tempfile.TemporaryDirectory(prefix="surveillance-bench-") as folder:
            section = distributed.measure_distributed(
                server_url, Path(folder), args.distributed_reps, machine()
            )
        print(distributed.write(args.out, section))
    return 0


def run_derive_only(args: argparse.Namespace, argv: list[str] | None) -> int:
    """``--only-derive``: gbif_derived's derive next to DuckDB's at each download size; bench/derive.md."""
    from bench import derive

    command = 'make bench BENCH_ARGS="' + " ".join(sys.argv[1:] if argv is None else argv) + '"'
    with tempfile.TemporaryDirectory(prefix="surveillance-bench-") as folder:
        section = derive.measure_derive(
            Path(folder),
            args.download_cache or args.out / "out",
            args.download_sizes,
            args.download_seed,
            args.derive_reps,
            args.download_rss_cap_gb,
        )
    print(derive.write(args.out, section, command))
    return 0
