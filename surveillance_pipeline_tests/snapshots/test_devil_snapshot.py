"""The devil snapshot: the course's eight runs, the holds check, and why a checksum ledger is not enough."""

from dataclasses import replace

import dagster as dg
import pytest

from surveillance_pipeline.core.errors import InputError
from surveillance_pipeline.core.refresh import ensure_state_tables, ensure_target_schema
from surveillance_pipeline.lab.deliveries import delivery_a, delivery_b, write_lab_delivery
from surveillance_pipeline.ledger.batches import apply_batch_once
from surveillance_pipeline.snapshots import devil
from surveillance_pipeline.snapshots.assets import devil_snapshot, devil_snapshot_holds
from surveillance_pipeline.snapshots.deliveries import read_delivery
from surveillance_pipeline_tests.support.pipeline import resources

pytestmark = pytest.mark.db


@pytest.fixture()
def instance():
    with dg.instance_for_test() as instance:
        yield instance


def _run(instance, database_url, data_dir, **config):
    result = dg.materialize(
        [devil_snapshot, devil_snapshot_holds],
        instance=instance,
        resources=resources(database_url, data_dir),
        run_config={"ops": {"devil_snapshot": {"config": config}}} if config else {},
    )
    meta = {
        k: v.value for k, v in result.asset_materializations_for_node("devil_snapshot")[0].metadata.items()
    }
    [check] = result.get_asset_check_evaluations()
    return meta, check


def _fingerprint(db):
    return devil.table_fingerprint(db, devil.DEVIL_SNAPSHOT.name)


def test_the_courses_eight_runs(db, database_url, data_dir, instance, monkeypatch):
    table = []

    def run(label, **config):
        meta, check = _run(instance, database_url, data_dir, **config)
        assert check.passed, check.metadata["detail"].value
        table.append((label, meta["action"], meta["reason"], meta["rows"]))
        return meta

    write_lab_delivery(data_dir, "A", "2026-11-02")
    first = run("1 A")
    held_a = _fingerprint(db)
    run("2 A again")
    write_lab_delivery(data_dir, "B", "2026-11-09")
    third = run("3 B")
    write_lab_delivery(data_dir, "A", "2026-11-16")
    fourth = run("4 A re-delivered")
    assert fourth["job_key"] == first["job_key"] != third["job_key"]
    assert _fingerprint(db) == held_a
    run("5 cap 500", cap=500)
    monkeypatch.setattr(devil, "DEVIL_SNAPSHOT", replace(devil.DEVIL_SNAPSHOT, transform_version=2))
    run("6 transform 2", cap=500)
    assert db.execute("SELECT count(*) FROM devil_snapshot WHERE year IS NULL").fetchone() == (0,)
    monkeypatch.setattr(devil, "DEVIL_SNAPSHOT", replace(devil.DEVIL_SNAPSHOT, schema_version=2))
    run("7 schema 2", cap=500)
    with pytest.raises(Exception, match="devil_snapshot_license_check"):
        db.execute("INSERT INTO devil_snapshot VALUES (1, 2000, 'All rights reserved', 9999)")
    run("8 same again", cap=500)

    print("\n".join(f"{label:<18} {action:<8} {reason:<18} {rows}" for label, action, reason, rows in table))
    assert [row[1:] for row in table] == [
        ("loaded", "first load", 1000),
        ("skipped", "nothing changed", 1000),
        ("loaded", "input changed", 1000),
        ("loaded", "input changed", 1000),
        ("loaded", "config changed", 500),
        ("loaded", "transform changed", 500),
        ("loaded", "schema changed", 500),
        ("skipped", "nothing changed", 500),
    ]


def test_a_checksum_ledger_applied_to_a_snapshot_ends_holding_the_wrong_one(db, data_dir):
    """Runs 1-4 (A, A, B, A) through a batch ledger: the second A is 'seen', so B stays."""
    ensure_state_tables(db)
    every_license = devil.SnapshotRules(licenses=("CC0 1.0", "CC BY 4.0", "CC BY-NC 4.0"))
    folder = data_dir / "deliveries"
    holds = []
    for number, data in enumerate([delivery_a(), delivery_a(), delivery_b(), delivery_a()]):
        path = folder / f"2026-11-0{number + 1}.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        delivery = read_delivery(path)

        def replace(conn, delivery=delivery):
            ensure_target_schema(conn, devil.snapshot_target(schema=1))
            conn.execute("DELETE FROM devil_snapshot")
            devil.stage_delivery(conn, delivery)
            return devil.build_snapshot_rows(conn, devil.DEVIL_SNAPSHOT.name, every_license.as_config(), 1)

        apply_batch_once(
            db, target="devil_snapshot", partition_key="all", checksum=delivery.sha256, apply=replace
        )
        holds.append(_fingerprint(db))
    assert holds[0] != holds[2], "with every license kept, B's corrected year is visible"
    assert holds[3] == holds[2], "the ledger skipped the returning A: the target still holds B"


def test_the_holds_check_fails_when_rows_are_edited(db, database_url, data_dir, instance):
    write_lab_delivery(data_dir, "A", "2026-11-02")
    _run(instance, database_url, data_dir)
    db.execute("UPDATE devil_snapshot SET year = year + 1 WHERE pick = 3")
    evaluation = dg.materialize(
        [devil_snapshot, devil_snapshot_holds],
        instance=instance,
        resources=resources(database_url, data_dir),
        selection=dg.AssetSelection.checks(devil_snapshot_holds),
    ).get_asset_check_evaluations()[0]
    assert not evaluation.passed
    assert "expected 1000" in evaluation.metadata["detail"].value


@pytest.mark.parametrize(
    ("content", "where", "field"),
    [
        (b"", "line 1", None),
        (b"id,year\n1,2000\n", "line 1", None),
        (b"id,year,license\n12x,2000,CC0 1.0\n", "line 2", "id"),
        (b"id,year,license\n-5,2000,CC0 1.0\n", "line 2", "id"),
        (b"id,year,license\n99999999999999999999,2000,CC0 1.0\n", "line 2", "id"),
        (b"id,year,license\n1,2000,CC0 1.0\n1,2001,CC0 1.0\n", "line 3", "id"),
        (b"id,year,license\n1,0,CC0 1.0\n", "line 2", "year"),
        (b"id,year,license\n1,3000,CC0 1.0\n", "line 2", "year"),
        (b"id,year,license\n1,2000,CC0 1.0'); DROP TABLE devil_snapshot; --\n", "line 2", "license"),
        (b"id,year,license\n1,2000\n", "line 2", None),
        (b"id,year,license\n1,2000,CC0 1.0,extra\n", "line 2", None),
        (b"id,year,license\n1,\xff\xfe,CC0 1.0\n", "line 2 (byte 18)", None),
    ],
)
def test_a_bad_delivery_is_named_and_leaves_the_snapshot_as_it_was(
    db, database_url, data_dir, instance, content, where, field
):
    write_lab_delivery(data_dir, "A", "2026-11-02")
    _run(instance, database_url, data_dir)
    before = (
        _fingerprint(db),
        db.execute("SELECT job_key FROM target_state WHERE target = 'devil_snapshot'").fetchone(),
    )
    bad = data_dir / "deliveries" / devil.DEVIL_SLUG / "2026-11-09.csv"
    bad.write_bytes(content)
    with pytest.raises(InputError) as error:
        _run(instance, database_url, data_dir)
    assert error.value.path == str(bad) and error.value.where == where and error.value.field == field
    after = (
        _fingerprint(db),
        db.execute("SELECT job_key FROM target_state WHERE target = 'devil_snapshot'").fetchone(),
    )
    assert after == before


def test_a_delivery_that_is_a_directory_or_a_symlink_is_refused(db, database_url, data_dir, instance):
    write_lab_delivery(data_dir, "A", "2026-11-02")
    folder = data_dir / "deliveries" / devil.DEVIL_SLUG
    (folder / "2026-11-09.csv").mkdir()
    with pytest.raises(InputError, match="regular file"):
        _run(instance, database_url, data_dir)
    (folder / "2026-11-09.csv").rmdir()
    (folder / "2026-11-10.csv").symlink_to(folder / "2026-11-02.csv")
    with pytest.raises(InputError, match="regular file"):
        _run(instance, database_url, data_dir)
