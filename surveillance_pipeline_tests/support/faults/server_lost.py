"""make faults' server row: PostgreSQL stopped in the middle of a distributed run, then started again.

Under the distributed profile (a real `dagster dev`, a private Redis, one Celery worker as `make workers`
starts it, a registry of one species), the warehouse and Dagster's own storage live on a private,
throwaway cluster (cluster.py), the one server both need. A backfill of the species' assets runs until the
worker's first load is held just before its COMMIT (the fault suite's hook). The cluster is stopped
(``-m immediate``: every connection cut, no checkpoint), kept down for ``DOWN_SECONDS``, and started again
(crash recovery); then the held load is let go, its connection gone. Once the backfill has ended, the same
partitions are launched again if it did not succeed. A trial counts as:

- target intact: every table partition the warehouse holds is the snapshot its state row names
  (`make verify`'s check), and a failed run's error names the server at its port;
- state consistent: across both backfills, no partition was loaded twice;
- converged: the last backfill succeeded, every species asset's partition was loaded, and the tables and
  files equal `make run`'s in one process on the same registry.

About 150 s a trial; the test suite leaves it here (its distributed session takes minutes already).
"""

from __future__ import annotations

import re
import time
from collections import Counter
from pathlib import Path

import psycopg

from surveillance_pipeline_tests.support.celery_workers import Workers, workers_running
from surveillance_pipeline_tests.support.commands import verify_command
from surveillance_pipeline_tests.support.dagster_dev import DagsterDev
from surveillance_pipeline_tests.support.distributed_runs import (
    SPECIES_ASSETS,
    TASK_ENDED,
    outputs_fingerprint,
    run_failures,
    species_provenance,
)
from surveillance_pipeline_tests.support.faults.broker import (
    STEP_LIMIT,
    hold_the_first_load,
    one_species_reference,
)
from surveillance_pipeline_tests.support.faults.cluster import PrivateCluster
from surveillance_pipeline_tests.support.faults.harness import Bench, Tally
from surveillance_pipeline_tests.support.redis_server import PrivateRedis

RUNS_QUERY = "{ runsOrError(limit: 5) { __typename ... on Runs { results { runId status } } } }"
# Long enough for every process to notice (Dagster's storage pool, Celery's result poll, the held load).
DOWN_SECONDS = 10.0
# How long the webserver may take to answer again once the server is back.
ANSWER_LIMIT = 120.0


def server_lost_trial(bench: Bench, tally: Tally, server_url: str, number: int) -> None:
    root = bench.work / f"server-{number}"
    root.mkdir(parents=True)
    cluster = PrivateCluster()
    with (
        one_species_reference(root, server_url, f"server_{number}") as (common, species, reference),
        PrivateRedis(root / "redis") as redis,
    ):
        try:
            cluster.start()
            storage = cluster.url.rsplit("/", 1)[0] + "/dagster"
            with psycopg.connect(cluster.url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
                conn.execute("CREATE DATABASE dagster")
            data = root / "data"
            extra = {**common, "SURVEILLANCE_PROFILE": "distributed", "REDIS_URL": redis.url}
            server = DagsterDev(root / "dagster_home", cluster.url, storage, data, extra_env=extra)
            server.start()
            try:
                with workers_running(server.env, root, []) as workers:
                    intact, consistent, converged, note = _stop_the_server_inside_a_load(
                        server, workers, cluster, species, root
                    )
            finally:
                server.stop()
            if converged:
                converged = outputs_fingerprint(cluster.url, data) == reference
                if not converged:
                    note = "the outputs differ from make run's in one process"
        finally:
            cluster.destroy()
    tally.add(intact, consistent, converged, note)


def _answering_again(server: DagsterDev) -> tuple[float | None, str]:
    """Seconds until the webserver answers a GraphQL query again (None: not within ANSWER_LIMIT), and the
    last error it gave before."""
    started = time.monotonic()
    last_error = ""
    while time.monotonic() - started < ANSWER_LIMIT:
        try:
            server.graphql("{ version }")
            server.graphql(RUNS_QUERY)
            return time.monotonic() - started, last_error
        except (OSError, RuntimeError) as error:
            last_error = str(error)[:300]
            time.sleep(1)
    return None, last_error


def _stop_the_server_inside_a_load(
    server: DagsterDev, workers: Workers, cluster: PrivateCluster, species: list[str], root: Path
) -> tuple[bool, bool, bool, str]:
    held = hold_the_first_load(server, workers, species, root)
    if held is None:
        return False, False, False, "the worker never reached a load's COMMIT"
    backfill, signal_file, deadline = held
    ended = len(re.findall(TASK_ENDED, workers.log("worker1"), re.M))
    cluster.stop_immediately()
    stopped = time.monotonic()
    time.sleep(DOWN_SECONDS)
    cluster.restart_server()
    Path(f"{signal_file}.release").touch()
    answered, last_error = _answering_again(server)
    if answered is None:
        tail = " | ".join(server.log_path.read_text(errors="replace").splitlines()[-5:])
        return (
            False,
            False,
            False,
            f"the UI never answered again: {last_error}; dagster dev said: {tail[-600:]}",
        )
    status, lost_runs = server.wait_backfill(backfill, timeout=STEP_LIMIT)
    ended_after = time.monotonic() - stopped
    said = [message for run_id in lost_runs for message in run_failures(server, run_id)]
    while len(re.findall(TASK_ENDED, workers.log("worker1"), re.M)) == ended:
        if time.monotonic() > deadline + STEP_LIMIT:
            return False, False, False, "the held load never ended"
        time.sleep(0.5)
    # Dagster shows the failed step's error as the run's: it must name the server and say what to do.
    named = status == "COMPLETED_SUCCESS" or (
        len(said) == len(lost_runs)
        and all(
            f"PostgreSQL at 127.0.0.1:{cluster.port} (SURVEILLANCE_DATABASE_URL), stopped answering" in text
            for text in said
        )
    )
    verified = verify_command(cluster.url)
    intact = named and verified.returncode == 0
    runs = list(lost_runs)
    retry_status = status
    started = time.monotonic()
    if status != "COMPLETED_SUCCESS":
        retry = server.launch_backfill(SPECIES_ASSETS, species)
        retry_status, retry_runs = server.wait_backfill(retry, timeout=STEP_LIMIT)
        runs += retry_runs
    loaded = Counter(
        (a, s) for a, s, action, _ in species_provenance(cluster.url, runs) if action == "loaded"
    )
    consistent = max(loaded.values(), default=0) == 1
    every = {(asset, slug) for asset in SPECIES_ASSETS for slug in species}
    converged = retry_status == "COMPLETED_SUCCESS" and set(loaded) == every
    first = (
        f"the backfill ended {status} {ended_after:.0f} s after the server stopped "
        f"({DOWN_SECONDS:.0f} s down)"
    )
    if said:
        first += f", naming the server ({len(said)} run{'s' if len(said) != 1 else ''})"
    note = (
        first
        if status == "COMPLETED_SUCCESS"
        else f"{first}; launched again, done in {time.monotonic() - started:.0f} s"
    )
    if not converged:
        note = f"{first}; launched again: {retry_status}; not loaded: {sorted(every - set(loaded))}"
    if not named:
        note = f"the run's failure did not name the server: {said or status}"
    elif verified.returncode != 0:
        note = f"make verify after the fault: {verified.stdout[-500:]}"
    return intact, consistent, converged, note
