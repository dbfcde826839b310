"""The distributed profile's bench: Celery workers through a real `dagster dev` and its daemon.

1. **Speed-up.** Raw snapshots of SPEEDUP_SPECIES registry species x SPEEDUP_ROWS records; a backfill of
   ``gbif_derived`` and ``occurrences`` over them (runs of SPEEDUP_PER_RUN species), timed from launch to
   the end of its last run, with one worker and then with two. Each repetition starts from empty tables and
   no derived files, and is checked: every species holds its rows, one ``loaded`` per partition.
2. **The Celery hop.** A backfill of every species partition of the species assets (the lab's 71 species)
   where nothing changed: under the distributed profile (two workers, runs of the default size) and in one
   process (the local profile's single run), on the same warehouse. The difference, per asset partition,
   is what the profile costs a no-change pass.

``make bench BENCH_ARGS="--only-distributed backfill"`` runs this alone and writes
bench/results/distributed.md and .json.
"""

from __future__ import annotations

import os
import shutil
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from bench.shared.inputs import raw_snapshot
from bench.shared.report import write_section
from bench.shared.scratch import drop_project_tables
from surveillance_pipeline.core.partition_files import replace_file
from surveillance_pipeline.core.refresh import ensure_state_tables
from surveillance_pipeline.definitions import defs
from surveillance_pipeline.gbif.registry import load_registry, packaged_registry_path
from surveillance_pipeline.orchestration.jobs import SPECIES_ASSETS_JOB
from surveillance_pipeline_tests.support.celery_workers import workers_running
from surveillance_pipeline_tests.support.dagster_dev import DagsterDev
from surveillance_pipeline_tests.support.redis_server import PrivateRedis
from surveillance_pipeline_tests.support.scratch_databases import scratch_database

SPEEDUP_SPECIES = 8
SPEEDUP_ROWS = 250_000
SPEEDUP_PER_RUN = 2
SPEEDUP_ASSETS = ["gbif_derived", "occurrences"]
SPECIES_ASSETS = sorted(defs.resolve_job_def(SPECIES_ASSETS_JOB).graph.node_dict)


def log(message: str) -> None:
    print(f"[bench distributed {datetime.now(UTC):%H:%M:%S}] {message}", flush=True)


def _environment(redis_url: str, registry: Path | None, per_run: int | None) -> dict[str, str]:
    env = {
        "SURVEILLANCE_PROFILE": "distributed",
        "REDIS_URL": redis_url,
        "SURVEILLANCE_PARTITION_WRITERS": "2",
        "GEOCODER_LEDGER_SALT": os.environ.get("GEOCODER_LEDGER_SALT", "bench-salt"),
        "RELEASE_MASKING_KEY": os.environ.get("RELEASE_MASKING_KEY", "bench-masking-key"),
        "GBIF_SOURCE": "lab",
    }
    if registry is not None:
        env["SURVEILLANCE_SPECIES_FILE"] = str(registry)
    if per_run is not None:
        env["SURVEILLANCE_PARTITIONS_PER_RUN"] = str(per_run)
    return env


def _timed_backfill(server: DagsterDev, assets: list[str], partitions: list[str]) -> tuple[float, list[str]]:
    started = time.monotonic()
    status, run_ids = server.wait_backfill(server.launch_backfill(assets, partitions), timeout=3600)
    seconds = time.monotonic() - started
    if status != "COMPLETED_SUCCESS":
        raise RuntimeError(f"backfill ended {status}: see {server.log_path}")
    return seconds, run_ids


def _actions(warehouse: str, run_ids: list[str], assets: list[str]) -> dict[str, int]:
    with psycopg.connect(warehouse) as conn:
        rows = conn.execute(
            "SELECT action, count(*) FROM provenance WHERE run_id = ANY(%s) AND asset = ANY(%s) GROUP BY 1",
            [run_ids, assets],
        ).fetchall()
    return dict(rows)


def measure_speedup(server_url: str, work: Path, reps: int) -> dict[str, Any]:
    chosen = list(load_registry()[:SPEEDUP_SPECIES])
    slugs = [species.slug for species in chosen]
    registry = work / "speedup-species.csv"
    lines = packaged_registry_path().read_text(encoding="utf-8").splitlines()
    kept = {line.split(",")[1] for line in lines[1:]} & set(slugs)
    registry.write_text(
        "\n".join([lines[0], *(line for line in lines[1:] if line.split(",")[1] in kept)]) + "\n",
        encoding="utf-8",
    )
    data = work / "speedup-data"
    log(f"speed-up: raw snapshots of {SPEEDUP_SPECIES} species x {SPEEDUP_ROWS:,} records")
    for index, species in enumerate(chosen):
        snapshot = raw_snapshot(species, SPEEDUP_ROWS, index * SPEEDUP_ROWS)
        replace_file(data / "raw" / f"{species.slug}.json", snapshot.to_bytes())
    seconds: dict[int, list[float]] = {1: [], 2: []}
    with (
        scratch_database(server_url, f"surveillance_bench_celery_{os.getpid()}") as warehouse,
        scratch_database(server_url, f"dagster_bench_celery_{os.getpid()}", postgis=False) as storage,
        PrivateRedis(work / "speedup-redis") as redis,
    ):
        env = _environment(redis.url, registry, SPEEDUP_PER_RUN)
        server = DagsterDev(work / "speedup-home", warehouse, storage, data, extra_env=env)
        server.start()
        try:
            for _ in range(reps):
                for count in (1, 2):
                    shutil.rmtree(data / "derived", ignore_errors=True)
                    with psycopg.connect(warehouse, autocommit=True) as conn:
                        drop_project_tables(conn)
                        ensure_state_tables(conn)
                    names = [f"speedup{count}-{number}" for number in range(1, count + 1)]
                    with workers_running(server.env, work, names):
                        log(f"speed-up: backfill with {count} worker(s)")
                        elapsed, run_ids = _timed_backfill(server, SPEEDUP_ASSETS, slugs)
                    actions = _actions(warehouse, run_ids, ["occurrences"])
                    with psycopg.connect(warehouse) as conn:
                        counts: dict[int, int] = dict(
                            conn.execute("SELECT species_id, count(*) FROM occurrences GROUP BY 1").fetchall()
                        )
                    if actions != {"loaded": SPEEDUP_SPECIES} or set(counts.values()) != {SPEEDUP_ROWS}:
                        raise RuntimeError(f"speed-up check failed: {actions}, {counts}")
                    seconds[count].append(elapsed)
                    log(f"speed-up: {count} worker(s) {elapsed:.1f} s")
        finally:
            server.stop()
    one, two = statistics.median(seconds[1]), statistics.median(seconds[2])
    return {
        "species": SPEEDUP_SPECIES,
        "rows_per_species": SPEEDUP_ROWS,
        "species_per_run": SPEEDUP_PER_RUN,
        "seconds": {str(k): [round(x, 1) for x in v] for k, v in seconds.items()},
        "one_worker_s": round(one, 1),
        "two_workers_s": round(two, 1),
        "speedup": round(one / two, 2),
    }


def measure_hop(server_url: str, work: Path) -> dict[str, Any]:
    species = [s.slug for s in load_registry()]
    data = work / "hop-data"
    partitions = len(species) * len(SPECIES_ASSETS)
    with (
        scratch_database(server_url, f"surveillance_bench_hop_{os.getpid()}") as warehouse,
        scratch_database(server_url, f"dagster_bench_hop_c_{os.getpid()}", postgis=False) as celery_storage,
        scratch_database(server_url, f"dagster_bench_hop_l_{os.getpid()}", postgis=False) as local_storage,
        PrivateRedis(work / "hop-redis") as redis,
    ):
        env = _environment(redis.url, None, None)
        server = DagsterDev(work / "hop-celery-home", warehouse, celery_storage, data, extra_env=env)
        server.start()
        try:
            with workers_running(server.env, work, ["hop1", "hop2"]):
                log(f"hop: first backfill of {len(species)} species (loads)")
                first, _ = _timed_backfill(server, SPECIES_ASSETS, species)
                log("hop: no-change backfill on Celery workers")
                celery, celery_runs = _timed_backfill(server, SPECIES_ASSETS, species)
        finally:
            server.stop()
        celery_actions = _actions(warehouse, celery_runs, SPECIES_ASSETS)
        local_env = {
            "SURVEILLANCE_PROFILE": "local",
            "GEOCODER_LEDGER_SALT": env["GEOCODER_LEDGER_SALT"],
            "RELEASE_MASKING_KEY": env["RELEASE_MASKING_KEY"],
        }
        server = DagsterDev(work / "hop-local-home", warehouse, local_storage, data, extra_env=local_env)
        server.start()
        try:
            log("hop: no-change backfill in one process")
            local, local_runs = _timed_backfill(server, SPECIES_ASSETS, species)
        finally:
            server.stop()
        local_actions = _actions(warehouse, local_runs, SPECIES_ASSETS)
    if celery_actions != {"skipped": partitions} or local_actions != {"skipped": partitions}:
        raise RuntimeError(f"hop check failed: celery {celery_actions}, local {local_actions}")
    return {
        "species": len(species),
        "asset_partitions": partitions,
        "first_load_celery_s": round(first, 1),
        "no_change_celery_s": round(celery, 1),
        "celery_runs": len(celery_runs),
        "no_change_in_process_s": round(local, 1),
        "in_process_runs": len(local_runs),
        "extra_ms_per_asset_partition": round((celery - local) / partitions * 1000, 1),
    }


def markdown(section: dict[str, Any]) -> str:
    speed, hop = section["speedup"], section["hop"]
    return "\n".join(
        [
            f"# Distributed profile ({section['date']}, {section['machine']})",
            "",
            f"Load average before: {section['load_before']}, after: {section['load_after']}.",
            "",
            "| measure | value |",
            "| --- | --- |",
            f"| backfill of gbif_derived + occurrences, {speed['species']} species x "
            f"{speed['rows_per_species']:,} records, runs of {speed['species_per_run']}: 1 worker | "
            f"{speed['one_worker_s']} s (each: {speed['seconds']['1']}) |",
            f"| the same, 2 workers | {speed['two_workers_s']} s (each: {speed['seconds']['2']}) |",
            f"| speed-up | {speed['speedup']}x |",
            f"| first backfill of the species assets, {hop['species']} species, 2 workers (loads) | "
            f"{hop['first_load_celery_s']} s |",
            f"| no-change backfill, {hop['asset_partitions']} asset partitions: Celery, 2 workers, "
            f"{hop['celery_runs']} runs | {hop['no_change_celery_s']} s |",
            f"| the same in one process, {hop['in_process_runs']} run(s) | "
            f"{hop['no_change_in_process_s']} s |",
            f"| the profile's cost per asset partition of a no-change pass | "
            f"{hop['extra_ms_per_asset_partition']} ms |",
            "",
        ]
    )


def measure_distributed(server_url: str, work: Path, reps: int, machine: str) -> dict[str, Any]:
    section: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine,
        "load_before": [round(x, 2) for x in os.getloadavg()],
    }
    section["speedup"] = measure_speedup(server_url, work, reps)
    section["hop"] = measure_hop(server_url, work)
    section["load_after"] = [round(x, 2) for x in os.getloadavg()]
    return section


def write(out: Path, section: dict[str, Any]) -> str:
    """bench/results/distributed.md and .json: this section's last run."""
    return write_section(out, "distributed", section, markdown(section))
