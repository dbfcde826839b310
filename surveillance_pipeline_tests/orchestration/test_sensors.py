"""Sensors, the schedule and automation, evaluated against a real Dagster instance and PostGIS."""

import hashlib
import json
from datetime import UTC, datetime

import dagster as dg
import pytest

from surveillance_pipeline.definitions import assemble
from surveillance_pipeline.gbif.registry import partition_keys
from surveillance_pipeline.lab.batches import write_lab_batches
from surveillance_pipeline.lab.deliveries import write_lab_delivery
from surveillance_pipeline.ledger.assets import occurrence_batches
from surveillance_pipeline.ledger.sensors import batches_sensor
from surveillance_pipeline.orchestration.distributed import (
    SPECIES_WEIGHT,
    balanced_ranges,
    partition_ranges,
    side_by_side_ranges,
)
from surveillance_pipeline.quality.assets import occurrence_quality
from surveillance_pipeline.snapshots.assets import devil_snapshot
from surveillance_pipeline.snapshots.sensors import deliveries_sensor
from surveillance_pipeline_tests.conftest import scratch_database
from surveillance_pipeline_tests.support.pipeline import (
    DEVIL,
    SAMPLED,
    SPINE,
    materialize,
    metadata,
    resources,
)

pytestmark = pytest.mark.db


@pytest.fixture()
def instance():
    with dg.instance_for_test() as instance:
        yield instance


def _tick(sensor, instance, definitions, cursor=None):
    # With the instance's ref, as the daemon evaluates it: a run request for a day the same tick adds as a
    # partition is checked against the partitions after the tick's requests.
    context = dg.build_sensor_context(
        instance=instance,
        instance_ref=instance.get_ref(),
        cursor=cursor,
        definitions=definitions,
        resources=definitions.resources,
    )
    return sensor.evaluate_tick(context), context


def _materialize_request(request, instance, database_url, data_dir):
    result = dg.materialize(
        [devil_snapshot],
        instance=instance,
        resources=resources(database_url, data_dir),
        run_config=request.run_config,
    )
    assert result.success


def test_deliveries_sensor_requests_only_when_the_key_moves(db, database_url, data_dir, instance):
    definitions = assemble(resources(database_url, data_dir))
    empty, _ = _tick(deliveries_sensor, instance, definitions)
    assert empty.run_requests == [] and "no delivery" in empty.skip_message

    write_lab_delivery(data_dir, "A", "2026-11-02")
    first, _ = _tick(deliveries_sensor, instance, definitions)
    [request_a] = first.run_requests
    assert request_a.asset_selection == [devil_snapshot.key]
    assert request_a.run_config["ops"]["devil_snapshot"]["config"]["cap"] == 1000
    [observation] = first.asset_events  # the daemon records it; here we read what the tick returned
    assert observation.asset_key == dg.AssetKey("devil_delivery")
    delivered = (data_dir / "deliveries" / DEVIL / "2026-11-02.csv").read_bytes()
    assert observation.tags["dagster/data_version"] == hashlib.sha256(delivered).hexdigest()
    _materialize_request(request_a, instance, database_url, data_dir)

    settled, _ = _tick(deliveries_sensor, instance, definitions, first.cursor)
    assert settled.run_requests == [] and "nothing changed" in settled.skip_message

    write_lab_delivery(data_dir, "B", "2026-11-09")
    second, _ = _tick(deliveries_sensor, instance, definitions, settled.cursor)
    [request_b] = second.run_requests
    _materialize_request(request_b, instance, database_url, data_dir)

    write_lab_delivery(data_dir, "A", "2026-11-16")
    third, _ = _tick(deliveries_sensor, instance, definitions, second.cursor)
    [request_a_again] = third.run_requests
    # Same would-be key as the first A, yet a new trigger: a distinct run key Dagster will not drop.
    assert request_a_again.run_key.split("|")[1] == request_a.run_key.split("|")[1]
    assert request_a_again.run_key != request_a.run_key
    assert json.loads(third.cursor)[DEVIL]["trigger"] == 3


def test_deliveries_sensor_decides_by_the_warehouse_not_by_dagsters_event_log(
    db, database_url, server_url, data_dir, instance
):
    """Two warehouses on one server: what one instance recorded says nothing of the other warehouse."""
    write_lab_delivery(data_dir, "A", "2026-11-02")
    definitions = assemble(resources(database_url, data_dir))
    [request] = _tick(deliveries_sensor, instance, definitions)[0].run_requests
    _materialize_request(request, instance, database_url, data_dir)
    assert _tick(deliveries_sensor, instance, definitions)[0].run_requests == []
    # Another instance, same warehouse: it never saw the load, and still nothing is to be done.
    with dg.instance_for_test() as fresh:
        assert _tick(deliveries_sensor, fresh, definitions)[0].run_requests == []
    # The same instance (it recorded A's key), another warehouse that holds nothing: A must be loaded there.
    with scratch_database(server_url, "second_warehouse") as second_warehouse:
        elsewhere = assemble(resources(second_warehouse, data_dir))
        [needed] = _tick(deliveries_sensor, instance, elsewhere)[0].run_requests
    assert needed.asset_selection == [devil_snapshot.key]


def test_deliveries_sensor_names_a_bad_delivery_and_requests_nothing(db, database_url, data_dir, instance):
    definitions = assemble(resources(database_url, data_dir))
    folder = data_dir / "deliveries" / DEVIL
    folder.mkdir(parents=True)
    (folder / "2026-11-02.csv").write_text("id,year,license\nnot-an-id,2000,CC0 1.0\n")
    result, _ = _tick(deliveries_sensor, instance, definitions)
    assert result.run_requests == []
    assert "2026-11-02.csv: line 2, field 'id'" in result.skip_message


def test_batches_sensor_requests_each_new_day_once(db, database_url, data_dir, instance):
    definitions = assemble(resources(database_url, data_dir))
    write_lab_batches(data_dir)
    (data_dir / "batches" / "2026-02-30.csv").write_text("id,species,year,longitude,latitude,license\n")
    first, _ = _tick(batches_sensor, instance, definitions)
    days = sorted(p.stem for p in (data_dir / "batches").glob("2026-10-*.csv"))
    assert [r.partition_key for r in first.run_requests] == days
    # Each day with a file becomes a partition (what the daemon does with the tick's request).
    [added] = first.dynamic_partitions_requests
    assert (added.partitions_def_name, sorted(added.partition_keys)) == ("batch_days", days)
    instance.add_dynamic_partitions(added.partitions_def_name, list(added.partition_keys))
    day = first.run_requests[0].partition_key
    dg.materialize(
        [occurrence_batches],
        instance=instance,
        partition_key=day,
        resources=resources(database_url, data_dir),
    )
    second, _ = _tick(batches_sensor, instance, definitions)
    assert day not in [r.partition_key for r in second.run_requests]
    assert len(second.run_requests) == len(first.run_requests) - 1
    assert not second.dynamic_partitions_requests


def test_weekly_schedule_runs_every_species_in_one_run(database_url, data_dir, instance):
    definitions = assemble(resources(database_url, data_dir))
    schedule = definitions.resolve_schedule_def("weekly_ingest")
    assert schedule.default_status == dg.DefaultScheduleStatus.RUNNING
    monday = datetime(2026, 11, 30, 3, tzinfo=UTC)
    context = dg.build_schedule_context(instance=instance, scheduled_execution_time=monday)
    [request] = schedule.evaluate_tick(context).run_requests
    assert request.run_key == "weekly_ingest|2026-11-30T03:00:00+00:00"
    keys = partition_keys()
    assert request.tags["dagster/asset_partition_range_start"] == keys[0]
    assert request.tags["dagster/asset_partition_range_end"] == keys[-1]


def test_automation_requests_the_sample_of_a_species_whose_occurrences_changed(
    db, database_url, data_dir, instance
):
    definitions = assemble(resources(database_url, data_dir))
    before = dg.evaluate_automation_conditions(defs=definitions, instance=instance)
    assert before.total_requested == 0
    # The sample also reads the flags (under a policy that drops flagged records): it waits for them.
    dg.materialize(
        [*SPINE, occurrence_quality],
        instance=instance,
        partition_key=DEVIL,
        resources=resources(database_url, data_dir),
    )
    result = dg.evaluate_automation_conditions(defs=definitions, instance=instance, cursor=before.cursor)
    assert result.get_requested_partitions(dg.AssetKey("occurrence_sample")) == {DEVIL}
    assert result.get_num_requested(dg.AssetKey("devil_snapshot")) == 0


def test_automation_launches_nothing_after_a_skip_and_only_what_a_new_version_reaches(
    db, database_url, data_dir, instance
):
    """A skip is a materialization with the same data version: it must trigger nothing downstream."""
    definitions = assemble(resources(database_url, data_dir))
    other = partition_keys()[0]
    for species in (DEVIL, other):
        materialize(instance, database_url, data_dir, species, assets=[*SAMPLED, occurrence_quality])
    cursor = dg.evaluate_automation_conditions(defs=definitions, instance=instance).cursor
    # A tick after the loads settles them (the summary and exports go on their first runs).
    cursor = dg.evaluate_automation_conditions(defs=definitions, instance=instance, cursor=cursor).cursor

    for species in (DEVIL, other):
        skipped = materialize(instance, database_url, data_dir, species)
        assert metadata(skipped, "occurrences")["action"] == "skipped"
    after_skips = dg.evaluate_automation_conditions(defs=definitions, instance=instance, cursor=cursor)
    assert after_skips.total_requested == 0

    changed = materialize(instance, database_url, data_dir, DEVIL, edit="drop_lowest_id")
    assert metadata(changed, "occurrences")["action"] == "loaded"
    result = dg.evaluate_automation_conditions(defs=definitions, instance=instance, cursor=after_skips.cursor)
    assert result.get_requested_partitions(dg.AssetKey("occurrence_sample")) == {DEVIL}
    assert result.total_requested == 1
    again = dg.evaluate_automation_conditions(defs=definitions, instance=instance, cursor=result.cursor)
    assert again.get_num_requested(dg.AssetKey("occurrence_sample")) == 0


def test_under_the_distributed_profile_the_schedule_splits_species_as_a_backfill_does(
    db, database_url, data_dir, instance, monkeypatch
):
    monkeypatch.setenv("SURVEILLANCE_PROFILE", "distributed")
    monkeypatch.setenv("SURVEILLANCE_PARTITIONS_PER_RUN", "8")
    keys = partition_keys()
    ranges = partition_ranges(keys)
    assert len(ranges) == -(-len(keys) // 8)
    covered = [k for first, last in ranges for k in keys[keys.index(first) : keys.index(last) + 1]]
    assert covered == keys
    schedule = assemble(resources(database_url, data_dir)).resolve_schedule_def("weekly_ingest")
    monday = datetime(2026, 11, 30, 3, tzinfo=UTC)
    context = dg.build_schedule_context(instance=instance, scheduled_execution_time=monday)
    requests = schedule.evaluate_tick(context).run_requests
    assert [
        (r.tags["dagster/asset_partition_range_start"], r.tags["dagster/asset_partition_range_end"])
        for r in requests
    ] == ranges
    assert len({r.run_key for r in requests}) == len(ranges)


def test_make_run_under_the_distributed_profile_runs_one_range_per_writer(monkeypatch):
    """make run executes at most one species run per writer slot at a time: it makes no more than that."""
    keys = partition_keys()

    def covered(ranges):
        return [k for first, last in ranges for k in keys[keys.index(first) : keys.index(last) + 1]]

    assert side_by_side_ranges(keys) == [(keys[0], keys[-1])]
    monkeypatch.setenv("SURVEILLANCE_PROFILE", "distributed")
    monkeypatch.setenv("SURVEILLANCE_PARTITION_WRITERS", "2")
    monkeypatch.setenv("SURVEILLANCE_PARTITIONS_PER_RUN", "8")
    ranges = side_by_side_ranges(keys)
    assert len(ranges) == 2 and covered(ranges) == keys
    # Never smaller than the runs a backfill makes.
    monkeypatch.setenv("SURVEILLANCE_PARTITIONS_PER_RUN", str(len(keys)))
    assert side_by_side_ranges(keys) == [(keys[0], keys[-1])]


def test_make_run_splits_species_by_records_when_the_downloads_say_how_many(monkeypatch):
    """Under the distributed profile, the same number of ranges, cut where each holds its share of the
    records: one big species no longer leaves a worker alone with its range."""
    keys = partition_keys()
    monkeypatch.setenv("SURVEILLANCE_PROFILE", "distributed")
    monkeypatch.setenv("SURVEILLANCE_PARTITION_WRITERS", "2")
    monkeypatch.setenv("SURVEILLANCE_PARTITIONS_PER_RUN", "8")
    big = keys[50]
    weights = {key: 1_000 for key in keys} | {big: 400_000}
    ranges = side_by_side_ranges(keys, weights)
    assert len(ranges) == 2
    (first, end), (start, last) = ranges
    assert (first, last) == (keys[0], keys[-1]) and keys.index(start) == keys.index(end) + 1
    # The big species and the few beside it in one range; every other species in the other.
    assert keys.index(end) > len(keys) // 2 and keys.index(start) <= keys.index(big)
    share = [
        sum(weights[k] + SPECIES_WEIGHT for k in keys[keys.index(a) : keys.index(b) + 1]) for a, b in ranges
    ]
    assert abs(share[0] - share[1]) <= max(weights.values()) + SPECIES_WEIGHT
    # Without weights, or locally, the split is by count as before.
    assert side_by_side_ranges(keys) == side_by_side_ranges(keys, None)
    monkeypatch.setenv("SURVEILLANCE_PROFILE", "local")
    assert side_by_side_ranges(keys, weights) == [(keys[0], keys[-1])]


def test_balanced_ranges_cover_every_key_once_in_order():
    keys = [f"k{i:02d}" for i in range(10)]
    for count in (1, 2, 3, 10, 12):
        for weights in ([1] * 10, [100, *[1] * 9], [*[1] * 9, 100], list(range(10))):
            ranges = balanced_ranges(keys, weights, count)
            covered = [k for a, b in ranges for k in keys[keys.index(a) : keys.index(b) + 1]]
            assert covered == keys and len(ranges) == min(count, len(keys))
    assert balanced_ranges([], [], 2) == []
    assert balanced_ranges(keys, [1] * 10, 2) == [("k00", "k04"), ("k05", "k09")]
    assert balanced_ranges(keys, [*[1] * 9, 100], 2) == [("k00", "k08"), ("k09", "k09")]
