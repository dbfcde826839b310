"""make bench, the lab run: the lab's ``make run``, first and unchanged, next to one trivial
``dagster asset materialize``; and a backfill of species partitions by two processes at once next to one.

The lab run is ``make run``'s own entry point on scratch databases (a warehouse, a Dagster storage) and a
scratch data folder: a first run, then runs with nothing changed, each counted in Dagster events; the
trivial CLI run (bench/trivial_definitions.py) is what any one ``dagster`` process costs with nothing to
do. The backfill materializes ``gbif_derived`` and ``occurrences`` over registry species whose raw
snapshots are generated (bench/shared/inputs.py), by one process (bench/materialize_range.py) over every
partition and by two over disjoint ranges; each repetition is checked: every partition loaded once, with
its rows, its state row and one Dagster materialization. Plain ``make bench`` runs it (``--no-lab-run``,
``--no-parallel`` leave either out); its figures: bench/results/lab_run.md and .json.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess  # noqa: S404  # make run and dagster are run as the user runs them
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg

from bench.shared.inputs import raw_snapshot, trivial_cli_command
from bench.shared.report import log, machine
from bench.shared.scratch import dagster_home, drop_project_tables
from bench.shared.targets import RATIO_HEADER, Target, ratio_rows, verdicts
from bench.shared.timing import Measure, median_of, ratio, repeat
from surveillance_pipeline.core.partition_files import replace_file
from surveillance_pipeline.core.refresh import ensure_state_tables
from surveillance_pipeline.core.settings import DATABASE_URL_VARIABLE, PROJECT_ROOT
from surveillance_pipeline.core.sql_files import load_sql
from surveillance_pipeline.gbif.registry import Species, load_registry
from surveillance_pipeline_tests.support.scratch_databases import scratch_database

PACKAGE = "bench"
PARALLEL_PROCESSES = 2
TARGETS: dict[str, Target] = {
    "lab_run_vs_trivial_cli": ("no-change lab run / trivial CLI run", "<=", 1.5),
}
EXTRAS = {"parallel_speed_up": "parallel backfill speed-up"}


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


# ---------------------------------------------------------------------------------------------------------
# The section


def measure(
    server_url: str,
    work: Path,
    reps: int,
    *,
    make_run: bool = True,
    parallel: tuple[int, int, int] | None = (4, 100_000, 2),
) -> dict[str, Any]:
    """The lab's make run (unless ``make_run`` is false) and the backfill of ``parallel``'s (species, rows
    per species, repetitions), unless it is None."""
    section: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "reps": reps,
        "load_before": [round(x, 2) for x in os.getloadavg()],
    }
    if make_run:
        section["make_run"] = measure_lab_run(server_url, work, reps)
    if parallel is not None:
        species, rows, parallel_reps = parallel
        section["parallel"] = measure_parallel(
            server_url, work, species, rows, PARALLEL_PROCESSES, parallel_reps
        )
    section["load_after"] = [round(x, 2) for x in os.getloadavg()]
    section["ratios"] = ratios(section)
    section["verdicts"] = verdicts(TARGETS, section["ratios"])
    return section


def ratios(section: dict[str, Any]) -> dict[str, float]:
    found: dict[str, float] = {}
    if "make_run" in section:
        lab = section["make_run"]
        found["lab_run_vs_trivial_cli"] = ratio(
            median_of(lab["no_change_run"]), median_of(lab["trivial_cli"])
        )
    if "parallel" in section:
        par = section["parallel"]
        found["parallel_speed_up"] = ratio(median_of(par["serial"]), median_of(par["parallel"]))
    return found


def markdown(section: dict[str, Any]) -> str:
    lines = [
        "## The lab run against a trivial CLI run, and a parallel backfill",
        "",
        f"Measured {section['date']} on {section['machine']} (`make bench`, {section['reps']} repetitions, "
        "medians).",
        "",
    ]
    if "make_run" in section:
        lab = section["make_run"]
        lines.append(
            f"Lab run: first {median_of(lab['first_run']):.1f} s, "
            f"no change {median_of(lab['no_change_run']):.1f} s "
            f"({statistics.median(lab['events_per_no_change_run']):.0f} Dagster events); trivial "
            f"`dagster asset materialize` {median_of(lab['trivial_cli']):.1f} s "
            f"({statistics.median(lab['events_per_trivial_run']):.0f} events); process start + import of "
            f"the definitions {median_of(lab['import_definitions']):.1f} s; the steps' own time in the last "
            "no-change run (Dagster's step start to success) "
            f"{step_seconds_total(lab['no_change_summary']):.1f} s."
        )
    if "parallel" in section:
        par = section["parallel"]
        lines.append(
            f"Backfill of `gbif_derived` + `occurrences` over {par['species']} species x "
            f"{par['rows_per_species']:,} records: 1 process {median_of(par['serial']):.1f} s, "
            f"{par['processes']} processes {median_of(par['parallel']):.1f} s (each partition loaded once, "
            "state rows and Dagster events checked)."
        )
    lines += ["", *RATIO_HEADER, *ratio_rows(TARGETS, section["ratios"], EXTRAS)]
    lines += ["", f"Noise: load average {section['load_before']} before, {section['load_after']} after."]
    return "\n".join(lines) + "\n"
