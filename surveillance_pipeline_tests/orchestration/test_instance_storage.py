"""The project's Dagster storage: dagster-postgres, its event log and run storage on pooled connections."""

import threading
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import dagster as dg
import psycopg
import pytest
from dagster_shared.check import CheckError
from sqlalchemy import event

from surveillance_pipeline.gbif.registry import partition_keys
from surveillance_pipeline.orchestration.instance_storage import (
    EVENT_LOG_POOLED_CONNECTIONS,
    PooledPostgresEventLogStorage,
    PooledPostgresRunStorage,
    PooledPostgresStorage,
)
from surveillance_pipeline.orchestration.partitions import species_partitions
from surveillance_pipeline.orchestration.reporting import (
    PartitionReport,
    partition_range_tags,
    report_partitions,
)
from surveillance_pipeline.orchestration.run_config import QUIET_CONSOLE
from surveillance_pipeline_tests.support.dagster_dev import project_dagster_home

pytestmark = [pytest.mark.db, pytest.mark.dagster]


@dg.asset(partitions_def=species_partitions, backfill_policy=dg.BackfillPolicy.single_run())
def every_species(context: dg.AssetExecutionContext):
    """One materialization per partition, as every species asset reports its skips."""
    yield from report_partitions(context, lambda key: PartitionReport(f"v-{key}", {"action": "skipped"}))


@dg.asset(pool="storage_test")
def first_pooled() -> None:
    pass


@dg.asset(pool="storage_test", deps=[first_pooled])
def second_pooled() -> None:
    pass


def test_pool_slot_claims_and_releases_reuse_the_pooled_connections(postgres_instance):
    """A claim holds one connection for its lock while Dagster's statements take another: with one pooled
    connection, each of those opened (and closed) a connection of its own, five or six per step."""
    postgres_instance.event_log_storage.set_concurrency_slots("storage_test", 1)
    storage = postgres_instance.event_log_storage
    assert isinstance(storage, PooledPostgresEventLogStorage)
    dg.materialize([first_pooled, second_pooled], instance=postgres_instance, run_config=QUIET_CONSOLE)
    opened = _connections_opened(storage)
    result = dg.materialize(
        [first_pooled, second_pooled], instance=postgres_instance, run_config=QUIET_CONSOLE
    )
    assert result.success
    assert opened == []


def _materialize_every_species(instance: dg.DagsterInstance) -> None:
    keys = partition_keys()
    result = dg.materialize(
        [every_species],
        instance=instance,
        tags=partition_range_tags(keys[0], keys[-1]),
        run_config=QUIET_CONSOLE,
    )
    assert result.success


def _connections_opened(storage: PooledPostgresEventLogStorage | PooledPostgresRunStorage) -> list[int]:
    opened: list[int] = []
    event.listen(storage._engine, "connect", lambda *_: opened.append(1))
    return opened


def test_the_project_instance_and_its_run_workers_use_the_pooled_event_log(
    dagster_storage_url, tmp_path, monkeypatch
):
    for name, value in project_dagster_home(tmp_path, dagster_storage_url).items():
        monkeypatch.setenv(name, value)
    with dg.DagsterInstance.get() as instance:
        assert isinstance(instance.get_ref().storage, PooledPostgresStorage)
        assert isinstance(instance.event_log_storage, PooledPostgresEventLogStorage)
        assert isinstance(instance.run_storage, PooledPostgresRunStorage)
        # A run worker rebuilds its instance from this ref: it pools too.
        with dg.DagsterInstance.from_ref(instance.get_ref()) as rebuilt:
            assert isinstance(rebuilt.event_log_storage, PooledPostgresEventLogStorage)
            assert isinstance(rebuilt.run_storage, PooledPostgresRunStorage)


def test_a_run_over_71_partitions_stores_its_events_and_run_on_one_connection_each(postgres_instance):
    storage = postgres_instance.event_log_storage
    assert isinstance(storage, PooledPostgresEventLogStorage)
    opened = _connections_opened(storage)
    run_storage = postgres_instance.run_storage
    assert isinstance(run_storage, PooledPostgresRunStorage)
    opened_for_runs = _connections_opened(run_storage)
    _materialize_every_species(postgres_instance)
    # dagster-postgres alone opens a connection per call: three or four for each of the 71 events, and
    # one for each question the run storage is asked.
    assert len(opened) <= 1
    assert len(opened_for_runs) <= 1
    stored = postgres_instance.fetch_materializations(every_species.key, limit=1000).records
    assert sorted(r.partition_key for r in stored) == sorted(partition_keys())
    assert {r.asset_materialization.tags["dagster/data_version"] for r in stored} == {
        f"v-{key}" for key in partition_keys()
    }


def test_dagsters_asset_key_columns_are_read_from_the_catalog_once_per_column(postgres_instance):
    """Dagster asks whether its asset_keys table has a column before every step, on every batch of events
    and for every asset status, each time reflecting the table from the server's catalog (72 times in a
    no-change make run). A column once there stays there."""
    config = {"postgres_url": postgres_instance.event_log_storage.postgres_url}
    storage = PooledPostgresEventLogStorage.from_config_value(None, config)
    reflections: list[str] = []

    def note_reflection(_conn, _cursor, statement: str, *_: object) -> None:
        if "pg_catalog.pg_attribute" in statement:
            reflections.append(statement)

    event.listen(storage._engine, "before_cursor_execute", note_reflection)
    try:
        for _ in range(3):
            assert storage.has_asset_key_index_cols() and storage.can_read_asset_status_cache()
        assert not storage.has_asset_key_col("no_such_column")
        assert not storage.has_asset_key_col("no_such_column")
    finally:
        storage.dispose()
    # One reflection per column present, and one for each question about a missing one.
    assert len(reflections) == 2 + 2

    instance_storage = postgres_instance.event_log_storage
    assert isinstance(instance_storage, PooledPostgresEventLogStorage)
    event.listen(instance_storage._engine, "before_cursor_execute", note_reflection)
    _materialize_every_species(postgres_instance)
    asked = len(reflections)
    _materialize_every_species(postgres_instance)
    assert len(reflections) == asked, "a second run over 71 partitions reflected asset_keys again"


class VersionConfig(dg.Config):
    version: str


@dg.asset(partitions_def=species_partitions, backfill_policy=dg.BackfillPolicy.single_run())
def versioned_species(context: dg.AssetExecutionContext, config: VersionConfig):
    yield from report_partitions(
        context, lambda key: PartitionReport(f"{config.version}-{key}", {"action": "loaded"})
    )


def test_the_latest_data_version_of_each_partition_is_dagsters_answer(postgres_instance):
    """The storage's own query for each partition's latest tags (a lateral join) answers as Dagster's."""
    storage = postgres_instance.event_log_storage
    assert isinstance(storage, PooledPostgresEventLogStorage)
    keys = partition_keys()
    for version, (first, last) in (("a", (keys[0], keys[-1])), ("b", (keys[3], keys[9]))):
        result = dg.materialize(
            [versioned_species],
            instance=postgres_instance,
            tags=partition_range_tags(first, last),
            run_config={**QUIET_CONSOLE, "ops": {"versioned_species": {"config": {"version": version}}}},
        )
        assert result.success
    ids = sorted(
        r.storage_id for r in postgres_instance.fetch_materializations(versioned_species.key, 1000).records
    )
    between = ids[len(keys) - 1] + 1  # after version a's events, before b's
    materialization = dg.DagsterEventType.ASSET_MATERIALIZATION
    asked = [
        {"asset_partitions": keys},
        {"asset_partitions": keys[2:5]},
        {"asset_partitions": ["no-such-species"]},
        {},
        {"before_cursor": between},
        {"after_cursor": between - 1},
        {"asset_partitions": keys[:6], "after_cursor": between - 1},
    ]
    for question in asked:
        ours = storage.get_latest_tags_by_partition(
            versioned_species.key, materialization, ["dagster/data_version"], **question
        )
        dagsters = super(PooledPostgresEventLogStorage, storage).get_latest_tags_by_partition(
            versioned_species.key, materialization, ["dagster/data_version"], **question
        )
        assert ours == dagsters, question
    latest = storage.get_latest_tags_by_partition(
        versioned_species.key, materialization, ["dagster/data_version"]
    )
    assert latest[keys[3]] == {"dagster/data_version": f"b-{keys[3]}"}
    assert latest[keys[10]] == {"dagster/data_version": f"a-{keys[10]}"}
    before = storage.get_latest_tags_by_partition(
        versioned_species.key, materialization, ["dagster/data_version"], before_cursor=between
    )
    assert before[keys[3]] == {"dagster/data_version": f"a-{keys[3]}"}
    with pytest.raises(CheckError, match="whitelisted"):
        storage.get_latest_tags_by_partition(versioned_species.key, materialization, ["dagster/code_version"])


def test_a_pooled_connection_the_server_dropped_is_replaced_not_failed(
    postgres_instance, dagster_storage_url, server_url
):
    storage = postgres_instance.event_log_storage
    _materialize_every_species(postgres_instance)
    database = urlsplit(dagster_storage_url).path.lstrip("/")
    with psycopg.connect(server_url, autocommit=True) as admin:
        dropped = admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            [database],
        ).fetchone()
    assert dropped is not None and dropped[0] >= 1, "the pool held no connection to drop"
    opened = _connections_opened(storage)
    _materialize_every_species(postgres_instance)
    assert 1 <= len(opened) <= EVENT_LOG_POOLED_CONNECTIONS
    assert len(postgres_instance.fetch_materializations(every_species.key, limit=1000).records) == 142


def test_a_range_runs_planned_materializations_are_written_in_one_batch(
    postgres_instance, dagster_storage_url, monkeypatch
):
    """One planned event per partition (what Dagster's failed and in-progress partition status reads;
    test_reporting checks that status), inserted together."""
    monkeypatch.setenv("DAGSTER_EVENT_BATCH_SIZE", "200")
    _materialize_every_species(postgres_instance)
    url = dagster_storage_url.replace("postgresql+psycopg2://", "postgresql://", 1)
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(DISTINCT xmin::text), count(*), count(DISTINCT partition) FROM event_logs"
            " WHERE dagster_event_type = 'ASSET_MATERIALIZATION_PLANNED'"
        ).fetchone()
    assert row == (1, 71, 71)


def test_simultaneous_claims_of_a_pool_give_its_one_slot_to_one_step_and_queue_the_others(
    postgres_instance,
):
    """Dagster's claim on autocommit connections let steps claiming at the same moment share a pool's one
    slot, or all be assigned it (then none counts as waiting); each claim now runs under one lock."""
    postgres_instance.event_log_storage.set_concurrency_slots("pool", 1)
    config = {"postgres_url": postgres_instance.event_log_storage.postgres_url}
    claimers = 4
    for trial in range(10):
        storages = [PooledPostgresEventLogStorage.from_config_value(None, config) for _ in range(claimers)]
        barrier = threading.Barrier(claimers)

        def claim(index: int, storages=storages, barrier=barrier, trial=trial) -> bool:
            storages[index].get_concurrency_info("pool")  # connected before the race starts
            barrier.wait()
            status = storages[index].claim_concurrency_slot("pool", f"run-{trial}-{index}", "step")
            return status.is_claimed

        with ThreadPoolExecutor(claimers) as pool:
            claimed = list(pool.map(claim, range(claimers)))
        info = postgres_instance.event_log_storage.get_concurrency_info("pool")
        assert (sum(claimed), len(info.claimed_slots), info.pending_step_count) == (1, 1, claimers - 1)
        assert info.assigned_step_count == 1, "only the holder is assigned the slot"
        for index, storage in enumerate(storages):
            storage.free_concurrency_slots_for_run(f"run-{trial}-{index}")
            storage.dispose()
