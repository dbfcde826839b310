"""Per-partition reports: one event per partition with its own data version, written in batches; none for
a partition that failed, which Dagster then shows failed.

The batch is observed in PostgreSQL itself: rows inserted by one transaction share their ``xmin``, and
Dagster writes a batch of events with one INSERT, each single event in a transaction of its own.
"""

import threading
import time

import dagster as dg
import psycopg
import pytest

from surveillance_pipeline.definitions import EXECUTOR
from surveillance_pipeline.gbif.registry import partition_keys
from surveillance_pipeline.orchestration import reporting
from surveillance_pipeline.orchestration.partitions import species_partitions
from surveillance_pipeline.orchestration.reporting import (
    PartitionReport,
    partition_range_tags,
    report_partitions,
)
from surveillance_pipeline.orchestration.run_config import QUIET_CONSOLE
from surveillance_pipeline_tests.support.pipeline import execute_as_launched, partitions_in_status

pytestmark = [pytest.mark.db, pytest.mark.dagster]
BATCH_SIZE = "200"
FAILING_PARTITION = partition_keys()[40]


class PartitionFailed(Exception):
    pass


@dg.asset(partitions_def=species_partitions, backfill_policy=dg.BackfillPolicy.single_run())
def reported(context: dg.AssetExecutionContext):
    yield from report_partitions(
        context, lambda key: PartitionReport(f"v-{key}", {"action": "skipped", "reason": "same key"})
    )


@dg.asset(partitions_def=species_partitions, backfill_policy=dg.BackfillPolicy.single_run())
def fails_midway(context: dg.AssetExecutionContext):
    def compute(key: str) -> PartitionReport:
        if key == FAILING_PARTITION:
            raise PartitionFailed(key)
        return PartitionReport(f"v-{key}", {"action": "loaded"})

    yield from report_partitions(context, compute)


@dg.asset(partitions_def=species_partitions, backfill_policy=dg.BackfillPolicy.single_run())
def unreportable_midway(context: dg.AssetExecutionContext):
    """Partition FAILING_PARTITION computes, but its report cannot be made into an event."""

    def compute(key: str) -> PartitionReport:
        metadata: dict[str, object] = {"action": "loaded"}
        if key == FAILING_PARTITION:
            metadata["not metadata"] = object()
        return PartitionReport(f"v-{key}", metadata)

    yield from report_partitions(context, compute)


class _Overlap:
    """How many computes run at once, at most: each holds a while so that a second one can start."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running = 0
        self.most = 0
        self.threads: set[str] = set()

    def __call__(self, key: str) -> PartitionReport:
        with self._lock:
            self._running += 1
            self.most = max(self.most, self._running)
            self.threads.add(threading.current_thread().name)
        time.sleep(0.02)
        with self._lock:
            self._running -= 1
        if key == FAILING_PARTITION:
            raise PartitionFailed(key)
        return PartitionReport(f"v-{key}", {"action": "loaded"})


SIDE_BY_SIDE = _Overlap()


@dg.asset(partitions_def=species_partitions, backfill_policy=dg.BackfillPolicy.single_run())
def side_by_side(context: dg.AssetExecutionContext):
    yield from report_partitions(context, SIDE_BY_SIDE, side_by_side=2)


def _materialize(asset: dg.AssetsDefinition, instance: dg.DagsterInstance) -> dg.ExecuteInProcessResult:
    keys = partition_keys()
    return dg.materialize(
        [asset],
        instance=instance,
        tags=partition_range_tags(keys[0], keys[-1]),
        run_config=QUIET_CONSOLE,
        raise_on_error=False,
    )


def _transactions_and_events(storage_url: str, run_id: str) -> tuple[int, int]:
    """How many transactions wrote the run's materializations, and how many there are."""
    url = storage_url.replace("postgresql+psycopg2://", "postgresql://", 1)
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(DISTINCT xmin::text), count(*) FROM event_logs "
            "WHERE run_id = %s AND dagster_event_type = 'ASSET_MATERIALIZATION'",
            [run_id],
        ).fetchone()
    assert row is not None
    return row[0], row[1]


def _data_versions(instance: dg.DagsterInstance, asset: dg.AssetsDefinition) -> dict[str, str]:
    records = instance.fetch_materializations(asset.key, limit=1000).records
    return {
        r.partition_key: r.asset_materialization.tags["dagster/data_version"]
        for r in records
        if r.partition_key and r.asset_materialization and r.asset_materialization.tags
    }


def test_a_steps_partition_events_are_written_in_one_batch(
    postgres_instance, dagster_storage_url, monkeypatch
):
    monkeypatch.setenv("DAGSTER_EVENT_BATCH_SIZE", BATCH_SIZE)
    result = _materialize(reported, postgres_instance)
    assert result.success
    assert _transactions_and_events(dagster_storage_url, result.run_id) == (1, 71)
    assert _data_versions(postgres_instance, reported) == {key: f"v-{key}" for key in partition_keys()}
    # The asset's row (Dagster's "latest materialization") is the last partition's event.
    latest = postgres_instance.get_latest_materialization_event(reported.key)
    assert latest is not None and latest.dagster_event is not None
    assert latest.dagster_event.partition == partition_keys()[-1]


def test_without_the_batch_size_each_event_is_written_on_its_own(
    postgres_instance, dagster_storage_url, monkeypatch
):
    monkeypatch.delenv("DAGSTER_EVENT_BATCH_SIZE", raising=False)
    result = _materialize(reported, postgres_instance)
    assert result.success
    assert _transactions_and_events(dagster_storage_url, result.run_id) == (71, 71)
    assert _data_versions(postgres_instance, reported) == {key: f"v-{key}" for key in partition_keys()}


def test_a_batch_open_for_batch_seconds_is_closed(postgres_instance, dagster_storage_url, monkeypatch):
    """A long step's partitions reach the UI as it goes: here every event is past the (zero) limit."""
    monkeypatch.setenv("DAGSTER_EVENT_BATCH_SIZE", BATCH_SIZE)
    monkeypatch.setattr(reporting, "BATCH_SECONDS", 0.0)
    result = _materialize(reported, postgres_instance)
    assert result.success
    assert _transactions_and_events(dagster_storage_url, result.run_id) == (71, 71)


def test_a_skip_says_so_where_a_user_looks(postgres_instance):
    result = _materialize(reported, postgres_instance)
    assert result.success
    records = postgres_instance.fetch_materializations(reported.key, limit=1000).records
    assert {r.asset_materialization.description for r in records} == {"skipped: same key"}
    run = postgres_instance.get_run_by_id(result.run_id)
    assert run.tags["surveillance/reported"] == "71 skipped"


def test_a_failing_partition_fails_alone_and_the_others_are_reported(
    postgres_instance, dagster_storage_url, monkeypatch
):
    monkeypatch.setenv("DAGSTER_EVENT_BATCH_SIZE", BATCH_SIZE)
    result = _materialize(fails_midway, postgres_instance)
    # The others are reported; then the step fails, so Dagster shows that one partition failed.
    assert not result.success
    others = [key for key in partition_keys() if key != FAILING_PARTITION]
    assert _data_versions(postgres_instance, fails_midway) == {key: f"v-{key}" for key in others}
    assert reporting.failed_partitions(postgres_instance, result.run_id) == {
        "fails_midway": {FAILING_PARTITION: FAILING_PARTITION}
    }
    assert _failed_in_dagster(postgres_instance, fails_midway) == {FAILING_PARTITION}
    run = postgres_instance.get_run_by_id(result.run_id)
    assert run.tags["surveillance/fails_midway"] == "1 failed, 70 loaded"


def test_partitions_computed_side_by_side_are_reported_in_key_order_and_fail_alone(
    postgres_instance, dagster_storage_url, monkeypatch
):
    monkeypatch.setenv("DAGSTER_EVENT_BATCH_SIZE", BATCH_SIZE)
    result = _materialize(side_by_side, postgres_instance)
    assert not result.success
    # Two at once, in threads of their own; never more.
    assert SIDE_BY_SIDE.most == 2
    assert len(SIDE_BY_SIDE.threads) == 2
    assert all(name.startswith("partition") for name in SIDE_BY_SIDE.threads)
    others = [key for key in partition_keys() if key != FAILING_PARTITION]
    assert _data_versions(postgres_instance, side_by_side) == {key: f"v-{key}" for key in others}
    # Reported one by one in key order, from the step's own thread, in one batch.
    records = postgres_instance.get_records_for_run(
        result.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION
    ).records
    assert [r.event_log_entry.dagster_event.partition for r in records] == others
    assert _transactions_and_events(dagster_storage_url, result.run_id) == (1, 70)
    assert _failed_in_dagster(postgres_instance, side_by_side) == {FAILING_PARTITION}
    run = postgres_instance.get_run_by_id(result.run_id)
    assert run.tags["surveillance/side_by_side"] == "1 failed, 70 loaded"


def _failed_in_dagster(instance: dg.DagsterInstance, asset: dg.AssetsDefinition) -> set[str]:
    """The partitions Dagster's own status shows failed (what the UI's partition bar reads)."""
    return partitions_in_status(instance, asset.key, species_partitions, dg.AssetPartitionStatus.FAILED)


@dg.asset(
    partitions_def=species_partitions, backfill_policy=dg.BackfillPolicy.single_run(), deps=[fails_midway]
)
def downstream_of_failure(context: dg.AssetExecutionContext):
    yield from report_partitions(context, lambda key: PartitionReport(f"d-{key}", {}))


def test_downstream_leaves_out_the_partitions_whose_upstream_failed(postgres_instance, monkeypatch):
    """As launched (the project's executor): the step that failed one partition hands its output on, the
    next step computes the others, and the run fails; nothing is recorded for the failed partition."""
    monkeypatch.setenv("DAGSTER_EVENT_BATCH_SIZE", BATCH_SIZE)
    keys = partition_keys()
    job = dg.Definitions(
        assets=[fails_midway, downstream_of_failure], executor=EXECUTOR
    ).resolve_implicit_global_asset_job_def()
    run = execute_as_launched(postgres_instance, job, tags=partition_range_tags(keys[0], keys[-1]))
    assert run.status == dg.DagsterRunStatus.FAILURE
    others = {key: f"d-{key}" for key in keys if key != FAILING_PARTITION}
    assert _data_versions(postgres_instance, downstream_of_failure) == others
    assert _failed_in_dagster(postgres_instance, downstream_of_failure) == {FAILING_PARTITION}
    assert run.tags["surveillance/downstream_of_failure"] == "70 loaded, 1 not computed"


@dg.asset(partitions_def=species_partitions, backfill_policy=dg.BackfillPolicy.single_run())
def fails_everywhere(context: dg.AssetExecutionContext):
    def compute(key: str) -> PartitionReport:
        raise PartitionFailed(key)

    yield from report_partitions(context, compute)


def test_a_step_whose_every_partition_fails_fails(postgres_instance, monkeypatch):
    monkeypatch.setenv("DAGSTER_EVENT_BATCH_SIZE", BATCH_SIZE)
    result = _materialize(fails_everywhere, postgres_instance)
    assert not result.success
    failure = next(event for event in result.all_events if event.is_step_failure)
    assert failure.step_failure_data is not None and failure.step_failure_data.error is not None
    assert f"PartitionFailed: {partition_keys()[0]}" in failure.step_failure_data.error.to_string()


def test_a_report_that_cannot_become_an_event_logs_no_partition_twice(
    postgres_instance, dagster_storage_url, monkeypatch
):
    monkeypatch.setenv("DAGSTER_EVENT_BATCH_SIZE", BATCH_SIZE)
    result = _materialize(unreportable_midway, postgres_instance)
    assert not result.success
    before = partition_keys()[: partition_keys().index(FAILING_PARTITION)]
    records = postgres_instance.fetch_materializations(unreportable_midway.key, limit=1000).records
    assert sorted(r.partition_key for r in records) == sorted(before), "each partition before it once"
    assert _transactions_and_events(dagster_storage_url, result.run_id) == (1, len(before))
