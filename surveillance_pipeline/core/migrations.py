"""Versioned migrations of the project's own tables: the state every target shares (target_state,
provenance, target_schema) and the ledgers (batch_ledger, external_calls, geocode_calls).

An ordered list, each applied once and recorded in ``state_migrations``, under the state lock, in one
transaction: a warehouse made by any earlier release is brought to the current schema by the first
connection of the new code, and a column added later reaches every existing deployment. (Before, the
tables were created when missing and never changed after: a column added in place ran only on a fresh
database.) Every migration's SQL is idempotent, so a warehouse made before migrations were recorded takes
the ones it already has as no-ops. Append new migrations; never edit or renumber a released one.

The target tables themselves are rebuilt by their own DDL version (``refresh.ensure_target_schema``): they
hold only what a reload can make again, while these tables hold what nothing can (which batches and calls
were made), so they are migrated, never dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg import sql

from surveillance_pipeline.core.keys import advisory_lock_id
from surveillance_pipeline.core.sql_files import load_sql

CORE = "surveillance_pipeline.core"


@dataclass(frozen=True)
class Migration:
    version: int
    # core/sql/migrate_<version:04d>_<name>.sql
    name: str

    @property
    def sql_name(self) -> str:
        return f"migrate_{self.version:04d}_{self.name}"

    def statement(self) -> sql.SQL:
        return load_sql(CORE, self.sql_name)


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "create_state_tables"),
    Migration(2, "add_provenance_detail"),
    Migration(3, "rename_job_state_to_target_state"),
    Migration(4, "create_batch_ledger"),
    Migration(5, "create_external_calls"),
    Migration(6, "create_geocode_calls"),
    Migration(7, "add_provenance_worker"),
    Migration(8, "watch_targets"),
    Migration(9, "version_geocode_ledger"),
    Migration(10, "note_truncate_of_one_partition"),
)


def applied_version(conn: psycopg.Connection) -> int:
    """The highest migration this warehouse has recorded (0: none, or no record of them yet)."""
    present = conn.execute("SELECT to_regclass('state_migrations') IS NOT NULL").fetchone()
    if present is None or not present[0]:
        return 0
    row = conn.execute("SELECT coalesce(max(version), 0) FROM state_migrations").fetchone()
    return int(row[0]) if row is not None else 0


def migrate(conn: psycopg.Connection, migrations: tuple[Migration, ...] = MIGRATIONS) -> list[int]:
    """Apply the migrations this warehouse has not had, in order, in one transaction under the state lock;
    the versions applied. Looks first without a lock, so a current warehouse costs two small reads (DDL
    takes locks that would queue every new connection behind any load still in its transaction)."""
    if applied_version(conn) >= migrations[-1].version:
        return []
    applied: list[int] = []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", [advisory_lock_id("state-tables")])
        conn.execute(load_sql(CORE, "create_state_migrations"))
        done = {row[0] for row in conn.execute("SELECT version FROM state_migrations")}
        for migration in migrations:
            if migration.version in done:
                continue
            conn.execute(migration.statement())
            conn.execute(
                "INSERT INTO state_migrations (version, name) VALUES (%s, %s)",
                [migration.version, migration.name],
            )
            applied.append(migration.version)
    return applied
