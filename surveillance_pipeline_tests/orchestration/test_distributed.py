"""The distributed profile end to end: species backfills through the daemon on two Celery workers.

A real `dagster dev` (webserver and daemon) with SURVEILLANCE_PROFILE=distributed, a private Redis, and two
workers started as `make workers` starts them, each its own process with only the environment. The backfill
covers every species partition of every species asset (of a registry of SPECIES_COUNT species, so the suite
stays short), split into runs of PER_RUN species. Then:

- every partition loaded exactly once, and both workers loaded some (provenance names host:pid);
- the tables and files equal what `make run` gives in one process on the same registry;
- a second backfill skips everything;
- a worker SIGKILLed in the middle of a backfill, inside a load's transaction, loses nothing: every
  partition is loaded once (its step, redelivered to the other worker, skips what the dead worker had
  committed) or reported failed and loaded by a retry, and the outputs again equal the single-process
  run's.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import Counter
from datetime import datetime

import psycopg
import pytest

from surveillance_pipeline.core.settings import DATA_DIR_VARIABLE
from surveillance_pipeline.gbif.registry import packaged_registry_path
from surveillance_pipeline.orchestration import run_settings
from surveillance_pipeline.orchestration.run_health import PROCESS_TAG, RunProcess
from surveillance_pipeline_tests.conftest import scratch_database
from surveillance_pipeline_tests.support.celery_workers import workers_running
from surveillance_pipeline_tests.support.dagster_dev import DagsterDev, project_dagster_home
from surveillance_pipeline_tests.support.distributed_runs import (
    SPECIES_ASSETS,
    make_run_in_one_process,
    outputs_fingerprint,
    species_provenance,
    table_assets,
)
from surveillance_pipeline_tests.support.faults.points import held_before_commit
from surveillance_pipeline_tests.support.redis_server import PrivateRedis

pytestmark = [pytest.mark.db, pytest.mark.dagster, pytest.mark.distributed]

SPECIES_COUNT = 12
PER_RUN = 4
# A dead worker's step must run again on a live worker within this many seconds of the death (the default
# SURVEILLANCE_STEP_VISIBILITY_TIMEOUT of 30 s, plus a scan, plus the hop).
HANDOVER_LIMIT = 60
PARTITION_STATUS = """
query Status($key: AssetKeyInput!) {
  assetNodeOrError(assetKey: $key) {
    ... on AssetNode {
      assetPartitionStatuses { ... on DefaultPartitionStatuses { materializedPartitions failedPartitions } }
    }
  }
}"""
LATEST_BY_PARTITION = """
query Latest($key: AssetKeyInput!, $partitions: [String!]) {
  assetNodeOrError(assetKey: $key) {
    ... on AssetNode {
      latestMaterializationByPartition(partitions: $partitions) { partition tags { key value } }
    }
  }
}"""
RUN_TAGS = "query Tags($id: ID!) { runOrError(runId: $id) { ... on Run { tags { key value } } } }"


def _species_run_ids(warehouse: str) -> list[str]:
    """The runs that recorded a species asset's partition."""
    with psycopg.connect(warehouse) as conn:
        rows = conn.execute(
            "SELECT DISTINCT run_id FROM provenance WHERE asset = ANY(%s)", [SPECIES_ASSETS]
        ).fetchall()
    return [row[0] for row in rows]


def _run_tags(server: DagsterDev, run_id: str) -> dict[str, str]:
    """Every tag of the run, the hidden ones too (read from the instance's storage), after checking that
    the UI shows none of our bookkeeping tags."""
    shown = server.graphql(RUN_TAGS, {"id": run_id})["runOrError"]["tags"]
    assert not {tag["key"] for tag in shown} & {PROCESS_TAG, run_settings.SETTINGS_TAG}
    with psycopg.connect(server.storage_url, autocommit=True) as conn:
        rows = conn.execute("SELECT key, value FROM run_tags WHERE run_id = %s", [run_id]).fetchall()
    return {str(key): str(value) for key, value in rows}


@pytest.fixture(scope="module")
def cluster(server_url, tmp_path_factory):
    root = tmp_path_factory.mktemp("distributed")
    registry = root / "species.csv"
    lines = packaged_registry_path().read_text(encoding="utf-8").splitlines()
    registry.write_text("\n".join(lines[: SPECIES_COUNT + 1]) + "\n", encoding="utf-8")
    species = [line.split(",")[1] for line in lines[1 : SPECIES_COUNT + 1]]
    with (
        scratch_database(server_url, "surveillance_celery") as warehouse,
        scratch_database(server_url, "dagster_celery") as storage,
        scratch_database(server_url, "surveillance_single") as reference_warehouse,
        scratch_database(server_url, "dagster_single") as reference_storage,
        PrivateRedis(root / "redis") as redis,
    ):
        common = {
            "SURVEILLANCE_SPECIES_FILE": str(registry),
            "GEOCODER_LEDGER_SALT": "distributed-test-salt",
            "GBIF_SOURCE": "lab",
        }
        single = {
            **os.environ,
            **common,
            **project_dagster_home(root / "single_home", reference_storage),
            "SURVEILLANCE_PROFILE": "local",
            "SURVEILLANCE_DATABASE_URL": reference_warehouse,
            "SURVEILLANCE_DATA_DIR": str(root / "single_data"),
        }
        make_run_in_one_process(single)
        reference = outputs_fingerprint(reference_warehouse, root / "single_data")

        distributed = {
            **common,
            "SURVEILLANCE_PROFILE": "distributed",
            "REDIS_URL": redis.url,
            "SURVEILLANCE_PARTITIONS_PER_RUN": str(PER_RUN),
            "SURVEILLANCE_PARTITION_WRITERS": "2",
        }
        data = root / "data"
        server = DagsterDev(root / "dagster_home", warehouse, storage, data, extra_env=distributed)
        server.start()
        try:
            with workers_running(server.env, root, ["worker1", "worker2"]) as workers:
                yield server, workers, warehouse, data, species, reference, root
        finally:
            assert server.stop(), "a process of dagster dev's group was left behind"


def _one_backfill_loads_every_partition_once_on_both_workers(
    server, workers, warehouse, data, species, every
):
    """One backfill of every species partition, split into runs of PER_RUN species."""
    status, run_ids = server.wait_backfill(server.launch_backfill(SPECIES_ASSETS, species), timeout=900)
    assert status == "COMPLETED_SUCCESS"
    assert len(run_ids) >= SPECIES_COUNT // PER_RUN
    rows = species_provenance(warehouse, run_ids)
    assert Counter((asset, slug) for asset, slug, _, _ in rows) == Counter(every)
    assert {action for _, _, action, _ in rows} == {"loaded"}
    # Only the workers executed steps, and both of them did.
    assert {worker for _, _, _, worker in rows} == set(workers.names())
    # No run names a worker as its process: a worker that dies must not make the next run fail this one.
    worker_pids = {host_pid.split(":")[1] for host_pid in workers.names()}
    processes = [RunProcess.from_tags(_run_tags(server, run_id), run_id) for run_id in run_ids]
    # Each run names its own process (the daemon's run worker), so a killed one is failed by the next run.
    assert None not in processes
    assert not {str(process.pid) for process in processes if process} & worker_pids
    # Each run carries the data-shaping settings its process resolved, which every step compared with its own.
    recorded = {_run_tags(server, run_id).get(run_settings.SETTINGS_TAG) for run_id in run_ids}
    assert len(recorded) == 1 and None not in recorded
    assert json.loads(recorded.pop())[DATA_DIR_VARIABLE] == str(data.resolve())


def _dagster_shows_every_partition_materialized(server, warehouse, species):
    """Dagster's own picture, as the UI shows it, and each partition's data version is its state's job key."""
    for asset in SPECIES_ASSETS:
        statuses = server.graphql(PARTITION_STATUS, {"key": {"path": [asset]}})["assetNodeOrError"]
        status = statuses["assetPartitionStatuses"]
        assert (sorted(status["materializedPartitions"]), status["failedPartitions"]) == (
            sorted(species),
            [],
        ), asset

    # Each partition's data version, written from a worker, is the job key its state row holds.
    with psycopg.connect(warehouse) as conn:
        held = dict(
            conn.execute("SELECT partition_key, job_key FROM target_state WHERE target = 'occurrences'")
        )
    latest = server.graphql(LATEST_BY_PARTITION, {"key": {"path": ["occurrences"]}, "partitions": species})
    versions = {
        event["partition"]: {tag["key"]: tag["value"] for tag in event["tags"]}.get("dagster/data_version")
        for event in latest["assetNodeOrError"]["latestMaterializationByPartition"]
    }
    assert versions == held


def _a_second_backfill_skips_everything(server, warehouse, species, every):
    status, again = server.wait_backfill(server.launch_backfill(SPECIES_ASSETS, species), timeout=900)
    assert status == "COMPLETED_SUCCESS"
    assert {(asset, slug, action) for asset, slug, action, _ in species_provenance(warehouse, again)} == {
        (asset, slug, "skipped") for asset, slug in every
    }


def _make_run_spreads_species_over_the_workers(server, workers, warehouse, every):
    """make run under the profile: its species are split into one run per writer slot (2; each at least
    PER_RUN species), which run side by side on the workers (each skips everything here)."""
    with psycopg.connect(warehouse) as conn:
        seen = {row[0] for row in conn.execute("SELECT DISTINCT run_id FROM provenance")}
    make_run_in_one_process(server.env)
    with psycopg.connect(warehouse) as conn:
        made = [row[0] for row in conn.execute("SELECT DISTINCT run_id FROM provenance")]
    rows = species_provenance(warehouse, [run_id for run_id in made if run_id not in seen])
    assert {(asset, slug, action) for asset, slug, action, _ in rows} == {
        (asset, slug, "skipped") for asset, slug in every
    }
    assert {worker for _, _, _, worker in rows} <= set(workers.names())
    species_runs = {run_id for run_id in made if run_id not in seen} & set(_species_run_ids(warehouse))
    assert len(species_runs) == 2


def _kill_a_worker_inside_a_load(server, workers, warehouse, species, root):
    """worker2 gives way to worker3, whose first load stops just before COMMIT (the fault suite's hook), so
    the kill lands inside a transaction, not between steps; its step is handed on within HANDOVER_LIMIT.
    Returns the backfill's status and runs."""
    workers.stop("worker2")
    signal_file = root / "worker3.signal"
    workers.start("worker3", held_before_commit(signal_file))
    worker3 = next(host_pid for host_pid, name in workers.names().items() if name == "worker3")
    with psycopg.connect(warehouse, autocommit=True) as conn:
        # Forget what the species' table partitions hold, so each loads again. Only theirs: with the devil
        # snapshot's state gone too, the deliveries sensor launched a run of its own, and once (on a fresh
        # clone) its step reached worker3's fault point first, so the killed step was not
        # the backfill's.
        conn.execute("DELETE FROM target_state WHERE partition_key = ANY(%s)", (species,))
    backfill = server.launch_backfill(SPECIES_ASSETS, species)
    deadline = time.monotonic() + 300
    while not signal_file.exists():
        assert time.monotonic() < deadline, "worker3 never reached a load's COMMIT"
        time.sleep(0.2)
    assert signal_file.read_text().split()[1] == worker3.split(":")[1]
    workers.kill("worker3")
    killed_at = datetime.now()
    status, killed_runs = server.wait_backfill(backfill, timeout=900)
    # The step worker3 held (the last it received), received again by worker1. Celery's log lines:
    # "[2026-12-01 20:36:01,123: INFO/MainProcess] Task dagster.execute_plan[<id>] received".
    received = r"^\[([\d-]+ [\d:,]+): INFO/MainProcess\] Task \S+\[([\w-]+)\] received"
    held = re.findall(received, workers.log("worker3"), re.M)[-1][1]
    again = [stamp for stamp, task in re.findall(received, workers.log("worker1"), re.M) if task == held]
    handover = (datetime.strptime(again[0], "%Y-%m-%d %H:%M:%S,%f") - killed_at).total_seconds()
    print(f"handover: worker3's step received by worker1 {handover:.1f} s after the kill")
    assert handover < HANDOVER_LIMIT, handover
    return status, killed_runs


def _every_table_partition_loaded_once(server, warehouse, species, every, status, killed_runs):
    """Across the backfill after the kill and a retry of what it reported failed."""
    rows = species_provenance(warehouse, killed_runs)
    loaded = Counter((asset, slug) for asset, slug, action, _ in rows if action == "loaded")
    # The tables load again; what lives in files skips (their state is the file itself).
    missing = sorted(every - {(asset, slug) for asset, slug, _, _ in rows})
    if missing:
        # Reported failed by Dagster, then loaded by a retry of exactly those.
        assert status != "COMPLETED_SUCCESS", missing
        retry = server.launch_backfill(sorted({a for a, _ in missing}), sorted({s for _, s in missing}))
        assert server.wait_backfill(retry, timeout=900)[0] == "COMPLETED_SUCCESS"
        retried = species_provenance(warehouse, [run["runId"] for run in server.backfill_runs(retry)])
        assert set(missing) <= {(a, s) for a, s, _, _ in retried}
        loaded.update((a, s) for a, s, action, _ in retried if action == "loaded")
        assert max(loaded.values()) == 1, "a partition was loaded twice"
    # Every table partition loaded exactly once, across the backfill and any retry.
    assert loaded == Counter({(asset, slug) for asset in table_assets() for slug in species})


def test_species_backfills_spread_over_two_workers_and_survive_a_killed_worker(cluster):
    """One cluster session in four steps, each building on the state the one before left (starting the
    cluster and make run's reference take minutes, so the steps share it rather than each starting one)."""
    server, workers, warehouse, data, species, reference, root = cluster
    every = {(asset, slug) for asset in SPECIES_ASSETS for slug in species}

    # 1. Every partition loaded once, by both workers; Dagster shows them all.
    _one_backfill_loads_every_partition_once_on_both_workers(server, workers, warehouse, data, species, every)
    _dagster_shows_every_partition_materialized(server, warehouse, species)
    # 2. The same rows and bytes as make run in one process.
    assert outputs_fingerprint(warehouse, data) == reference
    # 3. Again: everything skips, whether a backfill or make run (split as a backfill) asks.
    _a_second_backfill_skips_everything(server, warehouse, species, every)
    _make_run_spreads_species_over_the_workers(server, workers, warehouse, every)
    # 4. A worker killed in the middle of a load loses nothing.
    status, killed_runs = _kill_a_worker_inside_a_load(server, workers, warehouse, species, root)
    _every_table_partition_loaded_once(server, warehouse, species, every, status, killed_runs)
    # No partition half-written: the outputs are the single-process run's again.
    assert outputs_fingerprint(warehouse, data) == reference
