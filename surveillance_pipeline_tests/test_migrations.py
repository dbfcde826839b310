"""The state tables' migrations: a warehouse made by an earlier release is brought to the current schema
by the new code and loads into it; a migration added later reaches an existing warehouse, once."""

from dataclasses import dataclass

import dagster as dg
import pytest
from psycopg import sql

from surveillance_pipeline.core.migrations import MIGRATIONS, Migration, applied_version, migrate
from surveillance_pipeline_tests.pipeline import SPINE, resources

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
LAST_RELEASE = BEFORE_PROVENANCE_V2 + "ALTER TABLE provenance ADD COLUMN detail jsonb;"


def _columns(db, table):
    return {
        row[0]
        for row in db.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s", [table]
        )
    }


@pytest.mark.dagster
def test_a_warehouse_from_before_provenance_v2_is_migrated_and_loads(db, database_url, data_dir):
    db.execute(BEFORE_PROVENANCE_V2)
    assert "detail" not in _columns(db, "provenance") and applied_version(db) == 0
    with dg.instance_for_test() as instance:
        result = dg.materialize(
            SPINE,
            instance=instance,
            partition_key="sarcophilus-harrisii",
            resources=resources(database_url, data_dir),
        )
    assert result.success
    assert "detail" in _columns(db, "provenance")
    assert [row[0] for row in db.execute("SELECT version FROM state_migrations ORDER BY version")] == [1, 2]
    rows = db.execute("SELECT run_id, detail IS NOT NULL FROM provenance ORDER BY id").fetchall()
    # The old row is kept; gbif_derived's new row carries its derive record in `detail`.
    assert rows[0] == ("an-old-run", False) and any(has_detail for _, has_detail in rows[1:])


def test_the_last_release_records_its_migrations_without_changing_a_row(db):
    db.execute(LAST_RELEASE)
    before = db.execute("SELECT * FROM provenance").fetchall()
    assert migrate(db) == [1, 2]
    assert db.execute("SELECT * FROM provenance").fetchall() == before
    assert migrate(db) == [] and applied_version(db) == MIGRATIONS[-1].version


@dataclass(frozen=True)
class AddsAColumn(Migration):
    """A migration added after this release: a column on job_state."""

    def statement(self) -> sql.SQL:
        return sql.SQL("ALTER TABLE job_state ADD COLUMN note text")


def test_a_migration_added_later_reaches_an_existing_warehouse_once(db):
    migrate(db)
    later = (*MIGRATIONS, AddsAColumn(MIGRATIONS[-1].version + 1, "add_job_state_note"))
    assert migrate(db, later) == [later[-1].version]
    assert "note" in _columns(db, "job_state")
    # Applied once: a second time would fail (the column exists), and is not attempted.
    assert migrate(db, later) == []
