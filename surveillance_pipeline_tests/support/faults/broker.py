"""make faults' broker rows: Redis stopped in the middle of a distributed run, then started again empty.

Under the distributed profile (a real `dagster dev`, a private Redis, one Celery worker as `make workers`
starts it, a registry of one species), a backfill of the species' assets runs until the worker's first
load is held just before its COMMIT (the fault suite's hook). Redis is stopped, and started again empty
(the private Redis persists nothing, the worst case): once the run has failed (Celery's reconnection
gives up), or at once, before Celery notices (the run loop's watch sees a new server that loaded no
data, distributed.py). The held load is let go; then the same partitions are launched again. A trial
counts as:

- target intact: after the failure, every table partition the warehouse holds is the snapshot its state
  row names (`make verify`'s check), and the run's failure names Redis at its port and what happened;
- state consistent: across both backfills, no partition was loaded twice;
- converged: the second backfill succeeded, every species asset's partition was loaded, and the tables
  and files equal `make run`'s in one process on the same registry.

About two minutes a trial; the test suite leaves it here (its distributed session takes minutes already).
"""

from __future__ import annotations

import os
import re
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from surveillance_pipeline.gbif.registry import packaged_registry_path
from surveillance_pipeline_tests.conftest import scratch_database
from surveillance_pipeline_tests.support.celery_workers import Workers, workers_running
from surveillance_pipeline_tests.support.commands import verify_command
from surveillance_pipeline_tests.support.dagster_dev import DagsterDev, project_dagster_home
from surveillance_pipeline_tests.support.distributed_runs import (
    SPECIES_ASSETS,
    TASK_ENDED,
    make_run_in_one_process,
    outputs_fingerprint,
    run_failures,
    species_provenance,
)
from surveillance_pipeline_tests.support.faults.harness import Bench, Tally
from surveillance_pipeline_tests.support.faults.points import held_before_commit
from surveillance_pipeline_tests.support.redis_server import PrivateRedis

# How long the held load, the failed run and the second backfill may each take.
STEP_LIMIT = 300.0


@contextmanager
def one_species_reference(
    root: Path, server_url: str, label: str
) -> Iterator[tuple[dict[str, str], list[str], dict[str, object]]]:
    """A registry of the packaged registry's first species, and what ``make run`` in one process (the
    local profile, scratch databases on ``server_url``) leaves with it: the settings a trial's runs share,
    the species' slugs, and the outputs' fingerprint to compare the trial's with."""
    registry = root / "species.csv"
    lines = packaged_registry_path().read_text(encoding="utf-8").splitlines()
    registry.write_text("\n".join(lines[:2]) + "\n", encoding="utf-8")
    species = [lines[1].split(",")[1]]
    common = {"SURVEILLANCE_SPECIES_FILE": str(registry), "GBIF_SOURCE": "lab"}
    with (
        scratch_database(server_url, f"surveillance_{label}_single") as reference_warehouse,
        scratch_database(server_url, f"dagster_{label}_single") as reference_storage,
    ):
        make_run_in_one_process(
            {
                **os.environ,
                **common,
                **project_dagster_home(root / "single_home", reference_storage),
                "SURVEILLANCE_PROFILE": "local",
                "SURVEILLANCE_DATABASE_URL": reference_warehouse,
                "SURVEILLANCE_DATA_DIR": str(root / "single_data"),
            }
        )
        reference = outputs_fingerprint(reference_warehouse, root / "single_data")
    yield common, species, reference


def broker_stopped_trial(bench: Bench, tally: Tally, server_url: str, number: int) -> None:
    """Redis stopped; started again, empty, once the run has failed."""
    _broker_trial(bench, tally, server_url, number, at_once=False)


def broker_restarted_trial(bench: Bench, tally: Tally, server_url: str, number: int) -> None:
    """Redis stopped and started again, empty, at once: before Celery notices it was gone."""
    _broker_trial(bench, tally, server_url, 100 + number, at_once=True)


def _broker_trial(bench: Bench, tally: Tally, server_url: str, number: int, at_once: bool) -> None:
    root = bench.work / f"broker-{number}"
    root.mkdir(parents=True)
    with (
        one_species_reference(root, server_url, f"broker_{number}") as (common, species, reference),
        scratch_database(server_url, f"surveillance_broker_{number}") as warehouse,
        scratch_database(server_url, f"dagster_broker_{number}") as storage,
        PrivateRedis(root / "redis") as redis,
    ):
        data = root / "data"
        extra = {**common, "SURVEILLANCE_PROFILE": "distributed", "REDIS_URL": redis.url}
        server = DagsterDev(root / "dagster_home", warehouse, storage, data, extra_env=extra)
        server.start()
        try:
            with workers_running(server.env, root, []) as workers:
                outcome = _stop_the_broker_inside_a_load(
                    server, workers, warehouse, species, root, redis, at_once
                )
        finally:
            server.stop()
        intact, consistent, converged, note = outcome
        if converged:
            converged = outputs_fingerprint(warehouse, data) == reference
            if not converged:
                note = "the outputs differ from make run's in one process"
    tally.add(intact, consistent, converged, note)


def hold_the_first_load(
    server: DagsterDev, workers: Workers, species: list[str], root: Path
) -> tuple[str, Path, float] | None:
    """A worker whose first load waits just before its COMMIT, and a backfill of the species' assets, once
    that load is held: (the backfill, the file whose ``.release`` lets the load go, the trial's deadline);
    None when no load was held within STEP_LIMIT."""
    signal_file = root / "worker.signal"
    workers.start("worker1", held_before_commit(signal_file))
    backfill = server.launch_backfill(SPECIES_ASSETS, species)
    deadline = time.monotonic() + STEP_LIMIT
    while not signal_file.exists():
        if time.monotonic() > deadline:
            return None
        time.sleep(0.2)
    return backfill, signal_file, deadline


def _stop_the_broker_inside_a_load(
    server: DagsterDev,
    workers: Workers,
    warehouse: str,
    species: list[str],
    root: Path,
    redis: PrivateRedis,
    at_once: bool,
) -> tuple[bool, bool, bool, str]:
    held = hold_the_first_load(server, workers, species, root)
    if held is None:
        return False, False, False, "the worker never reached a load's COMMIT"
    backfill, signal_file, deadline = held
    ended = len(re.findall(TASK_ENDED, workers.log("worker1"), re.M))
    redis.stop()
    stopped = time.monotonic()
    if at_once:
        # Restarted empty before Celery notices: the steps queued in it are gone.
        redis.start()
        Path(f"{signal_file}.release").touch()
        status, lost_runs = server.wait_backfill(backfill, timeout=STEP_LIMIT)
    else:
        status, lost_runs = server.wait_backfill(backfill, timeout=STEP_LIMIT)
        redis.start()
        Path(f"{signal_file}.release").touch()
    failed_after = time.monotonic() - stopped
    said = [message for run_id in lost_runs for message in run_failures(server, run_id)]
    # Restarted at once, the run's loop may look while Redis is down (connection refused: "stopped
    # answering") or after it is back (empty: "restarted without its data"); both name Redis and what
    # to do. Which one it sees depends on how long Redis takes to start (a fresh clone on 2026-12-07 saw
    # the first). Stopped and started later, only the first is right.
    words = ("restarted without its data", "stopped answering") if at_once else ("stopped answering",)
    named = (
        status != "COMPLETED_SUCCESS"
        and len(said) == len(lost_runs)
        and all(
            any(f"Redis at 127.0.0.1:{redis.port} (REDIS_URL), {said_words}" in text for said_words in words)
            for text in said
        )
    )
    # The held load commits, and the worker reconnects to the new Redis by itself.
    while len(re.findall(TASK_ENDED, workers.log("worker1"), re.M)) == ended:
        if time.monotonic() > deadline + STEP_LIMIT:
            return False, False, False, "the held load never ended"
        time.sleep(0.5)
    verified = verify_command(warehouse)
    intact = named and verified.returncode == 0
    retry = server.launch_backfill(SPECIES_ASSETS, species)
    started = time.monotonic()
    retry_status, retry_runs = server.wait_backfill(retry, timeout=STEP_LIMIT)
    runs = lost_runs + retry_runs
    loaded = Counter((a, s) for a, s, action, _ in species_provenance(warehouse, runs) if action == "loaded")
    consistent = max(loaded.values(), default=0) == 1
    # A fresh warehouse and data folder: every partition of every species asset loads, once.
    every = {(asset, slug) for asset in SPECIES_ASSETS for slug in species}
    converged = retry_status == "COMPLETED_SUCCESS" and set(loaded) == every
    note = (
        f"run failed {failed_after:.0f} s after Redis {'restarted' if at_once else 'stopped'}, naming it; "
        f"launched again, done in {time.monotonic() - started:.0f} s"
    )
    if not converged:
        note = f"launched again: {retry_status}; not loaded: {sorted(every - set(loaded))}"
    if not named:
        note = f"the run's failure did not name Redis: {said or status}"
    elif verified.returncode != 0:
        note = f"make verify after the failure: {verified.stdout[-500:]}"
    return intact, consistent, converged, note
