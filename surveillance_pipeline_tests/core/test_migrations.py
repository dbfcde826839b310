"""Migrations of the project's own tables: a warehouse made by an earlier release is brought to the
current schema by the new code, keeps every state row and ledger entry, and loads into it (or skips what
it already holds); a migration added later reaches an existing warehouse, once."""

from dataclasses import dataclass

import dagster as dg
import pytest
from psycopg import sql

from surveillance_pipeline.core.migrations import MIGRATIONS, Migration, applied_version, migrate
from surveillance_pipeline.core.refresh import worker_name
from surveillance_pipeline_tests.support.pipeline import SPINE, resources

pytestmark = [pytest.mark.db]

# The state tables as the releases before provenance v2 made them (no `detail`), and as the last release
# before migrations made them (with `detail`); neither recorded migrations.
BEFORE_PROVENANCE_V2 = """
CREATE TABLE job_state (
    job text NOT NULL, partition_key text NOT NULL, job_key text NOT NULL, parts jsonb NOT NULL,
    rows bigint NOT NULL, updated_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (job, partition_key)
);
CREATE TABLE provenance (
    id bigserial PRIMARY KEY, run_id text NOT NULL, asset text NOT NULL, partition_key text NOT NULL,
    action text NOT NULL CHECK (action IN ('loaded', 'skipped')), reason text NOT NULL,
    job_key text NOT NULL, parts jsonb NOT NULL, rows bigint NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX provenance_asset_partition ON provenance (asset, partition_key, id);
CREATE TABLE target_schema (
    target text PRIMARY KEY, version integer NOT NULL, built_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO provenance (run_id, asset, partition_key, action, reason, job_key, parts, rows)
VALUES ('an-old-run', 'occurrences', 'sarcophilus-harrisii', 'loaded', 'first load', 'k', '{}', 1);
"""
BEFORE_MIGRATIONS = (
    BEFORE_PROVENANCE_V2
    + """
ALTER TABLE provenance ADD COLUMN detail jsonb;
CREATE TABLE batch_ledger (
    checksum text PRIMARY KEY, target text NOT NULL, partition_key text NOT NULL, rows bigint NOT NULL,
    status text NOT NULL CHECK (status IN ('applied')), applied_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO batch_ledger (checksum, target, partition_key, rows, status)
VALUES ('c0ffee', 'occurrence_feed', '2026-11-02', 3, 'applied');
"""
)
ALL_VERSIONS = [migration.version for migration in MIGRATIONS]


def _columns(db, table):
    return {
        row[0]
        for row in db.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s", [table]
        )
    }


def _load_the_devil(database_url, data_dir) -> str:
    """gbif_raw, gbif_derived and occurrences of one species through Dagster; the run's id."""
    with dg.instance_for_test() as instance:
        result = dg.materialize(
            SPINE,
            instance=instance,
            partition_key="sarcophilus-harrisii",
            resources=resources(database_url, data_dir),
        )
    assert result.success
    return result.run_id


@pytest.mark.dagster
def test_a_warehouse_from_before_provenance_v2_is_migrated_and_loads(db, database_url, data_dir):
    db.execute(BEFORE_PROVENANCE_V2)
    assert "detail" not in _columns(db, "provenance") and applied_version(db) == 0
    _load_the_devil(database_url, data_dir)
    assert "detail" in _columns(db, "provenance")
    assert [
        row[0] for row in db.execute("SELECT version FROM state_migrations ORDER BY version")
    ] == ALL_VERSIONS
    rows = db.execute("SELECT run_id, detail IS NOT NULL FROM provenance ORDER BY id").fetchall()
    # The old row is kept; gbif_derived's new row carries its derive record in `detail`.
    assert rows[0] == ("an-old-run", False) and any(has_detail for _, has_detail in rows[1:])


def test_a_release_from_before_migrations_records_them_without_losing_a_row(db):
    db.execute(BEFORE_MIGRATIONS)
    # The columns that release had; later migrations add columns (NULL in the old rows) but change none.
    columns = ("id", "run_id", "asset", "partition_key", "action", "reason", "job_key", "parts", "rows")
    old_rows = sql.SQL("SELECT {}, recorded_at, detail FROM provenance ORDER BY id").format(
        sql.SQL(", ").join(map(sql.Identifier, columns))
    )
    before = db.execute(old_rows).fetchall()
    ledger = db.execute("SELECT * FROM batch_ledger").fetchall()
    assert migrate(db) == ALL_VERSIONS
    assert db.execute(old_rows).fetchall() == before
    assert db.execute("SELECT count(*) FROM provenance WHERE worker IS NOT NULL").fetchone() == (0,)
    assert db.execute("SELECT * FROM batch_ledger").fetchall() == ledger
    assert migrate(db) == [] and applied_version(db) == MIGRATIONS[-1].version


def _as_the_last_release_left_it(db):
    """Undo migrations 3-7 as the last release had them: job_state(job, ...), the ledgers made by their
    domains (kept, as they were), provenance without `worker`, and state_migrations at version 2."""
    db.execute("DROP VIEW job_state")
    db.execute("ALTER TABLE target_state RENAME TO job_state")
    db.execute("ALTER TABLE job_state RENAME COLUMN target TO job")
    db.execute("ALTER INDEX target_state_pkey RENAME TO job_state_pkey")
    db.execute("ALTER TABLE provenance DROP COLUMN worker")
    db.execute("DELETE FROM state_migrations WHERE version > 2")


@pytest.mark.dagster
def test_a_warehouse_from_the_last_release_keeps_its_snapshots_across_the_upgrade(db, database_url, data_dir):
    def run():
        run_id = _load_the_devil(database_url, data_dir)
        # Each row names the process that wrote it (migration 7): here, this one.
        workers = db.execute("SELECT DISTINCT worker FROM provenance WHERE run_id = %s", [run_id])
        assert workers.fetchall() == [(worker_name(),)]
        return db.execute(
            "SELECT asset, action FROM provenance WHERE run_id = %s ORDER BY asset", [run_id]
        ).fetchall()

    assert {action for _, action in run()} == {"loaded"}
    state = db.execute("SELECT * FROM target_state ORDER BY target, partition_key").fetchall()
    _as_the_last_release_left_it(db)
    assert "job" in _columns(db, "job_state") and applied_version(db) == 2

    assert migrate(db) == ALL_VERSIONS[2:]
    assert db.execute("SELECT * FROM target_state ORDER BY target, partition_key").fetchall() == state
    # The old name still reads, with its old column.
    assert db.execute(
        "SELECT job, partition_key, job_key FROM job_state ORDER BY job, partition_key"
    ).fetchall() == [row[:3] for row in state]
    # What the warehouse held before the upgrade, it still holds: nothing reloads.
    assert run() == [("gbif_derived", "skipped"), ("gbif_raw", "skipped"), ("occurrences", "skipped")]


@dataclass(frozen=True)
class AddsAColumn(Migration):
    """A migration added after this release: a column on target_state."""

    def statement(self) -> sql.SQL:
        return sql.SQL("ALTER TABLE target_state ADD COLUMN note text")


def test_a_migration_added_later_reaches_an_existing_warehouse_once(db):
    migrate(db)
    later = (*MIGRATIONS, AddsAColumn(MIGRATIONS[-1].version + 1, "add_target_state_note"))
    assert migrate(db, later) == [later[-1].version]
    assert "note" in _columns(db, "target_state")
    # Applied once: a second time would fail (the column exists), and is not attempted.
    assert migrate(db, later) == []
