"""The refresh transaction: the target holds snapshot X, and its state row says so.

One transaction per (target, partition): a transaction-scoped advisory lock, the state row read FOR UPDATE,
then either a skip (equal key) or a full replace of the partition's rows plus the new state row. The state
row therefore changes only with the rows it describes; a crash anywhere before COMMIT leaves both as
they were.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from surveillance_pipeline.core.errors import StaleInputError
from surveillance_pipeline.core.fault_points import BEFORE_COMMIT, fault_point
from surveillance_pipeline.core.keys import JobKeyParts, advisory_lock_id, describe_change
from surveillance_pipeline.core.migrations import migrate
from surveillance_pipeline.core.sql_files import load_sql
from surveillance_pipeline.core.targets import Target

CORE = "surveillance_pipeline.core"

LOADED = "loaded"
SKIPPED = "skipped"
NOTHING_CHANGED = "nothing changed"
# The partition key recorded for targets that are not partitioned.
WHOLE_TARGET = "all"


@dataclass(frozen=True)
class RefreshOutcome:
    action: str
    reason: str
    job_key: str
    parts: dict[str, Any]
    rows: int
    previous_key: str | None = None


def ensure_state_tables(conn: psycopg.Connection) -> None:
    """Bring the project's own tables (state, provenance, ledgers) to the current schema (migrations.py)."""
    migrate(conn)


def ensure_target_schema(conn: psycopg.Connection, target: Target) -> bool:
    """Build the target's table at its current schema version; True when it was (re)built.

    Must run inside the caller's transaction so a rebuild commits with the first load into it. A
    rebuilt table is empty, so the target's state rows are deleted with it: no state row may describe
    rows that are gone.

    Loads of different partitions of one table hold the schema lock shared, so they run side by side;
    only a rebuild takes it exclusively, and it then waits for every load in flight to commit. The
    version is re-read under the shared lock, because a rebuild may commit between the first read and
    the lock.
    """
    lock = advisory_lock_id("schema", target.name)
    if _schema_is_current(conn, target):
        conn.execute("SELECT pg_advisory_xact_lock_shared(%s)", [lock])
        if _schema_is_current(conn, target):
            return False
    conn.execute("SELECT pg_advisory_xact_lock(%s)", [lock])
    if _schema_is_current(conn, target):
        return False
    table = sql.Identifier(target.name)
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {} CASCADE").format(table))
    conn.execute(target.create_statement(table))
    conn.execute("DELETE FROM target_state WHERE target = %s", [target.name])
    conn.execute(
        "INSERT INTO target_schema (target, version) VALUES (%s, %s) "
        "ON CONFLICT (target) DO UPDATE SET version = EXCLUDED.version, built_at = now()",
        [target.name, target.schema_version],
    )
    return True


def _schema_is_current(conn: psycopg.Connection, target: Target) -> bool:
    row = conn.execute(
        "SELECT version = %s AND to_regclass(%s) IS NOT NULL FROM target_schema WHERE target = %s",
        [target.schema_version, target.name, target.name],
    ).fetchone()
    return bool(row and row[0])


def refresh_partition(
    conn: psycopg.Connection,
    *,
    target: Target,
    partition_key: str,
    parts: JobKeyParts | Callable[[psycopg.Connection], JobKeyParts],
    replace_rows: Callable[[psycopg.Connection], int],
    run_id: str,
) -> RefreshOutcome:
    """Make the target hold the snapshot named by ``parts``, or skip if it already does.

    ``parts`` may be a function of the connection, called inside the transaction once the lock is held,
    for inputs that live in the database (an upstream state row read ``FOR SHARE``). ``replace_rows``
    deletes the partition's rows and writes the new ones, returning the row count; it runs only when the
    key differs, and whatever it raises rolls the whole transaction back.
    """
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", [advisory_lock_id(target.name, partition_key)])
        if callable(parts):
            parts = parts(conn)
        job_key = parts.key
        ensure_target_schema(conn, target)
        state = conn.execute(
            load_sql(CORE, "select_target_state_for_update"),
            {"target": target.name, "partition_key": partition_key},
        ).fetchone()
        previous_key, previous_parts, previous_rows = state if state else (None, None, 0)

        if previous_key == job_key:
            outcome = RefreshOutcome(
                SKIPPED, NOTHING_CHANGED, job_key, parts.as_dict(), previous_rows, previous_key
            )
        else:
            if previous_parts is None:
                # No state row: a first load, or a table rebuilt for a new schema. History tells which.
                previous_parts = last_loaded_parts(conn, target.name, partition_key)
            reason = describe_change(previous_parts, parts)
            rows = replace_rows(conn)
            conn.execute(
                load_sql(CORE, "upsert_target_state"),
                {
                    "target": target.name,
                    "partition_key": partition_key,
                    "job_key": job_key,
                    "parts": Jsonb(parts.as_dict()),
                    "rows": rows,
                },
            )
            outcome = RefreshOutcome(LOADED, reason, job_key, parts.as_dict(), rows, previous_key)
        record_provenance(
            conn, run_id=run_id, asset=target.name, partition_key=partition_key, outcome=outcome
        )
        if outcome.action == LOADED:
            fault_point(BEFORE_COMMIT, conn)
    return outcome


def held_job_key(conn: psycopg.Connection, target: str, partition_key: str) -> str | None:
    """The key a target holds now, by its state row (no lock: for a sensor's guess, not for a load)."""
    present = conn.execute("SELECT to_regclass('target_state') IS NOT NULL").fetchone()
    if not present or not present[0]:
        return None
    row = conn.execute(
        "SELECT job_key FROM target_state WHERE target = %s AND partition_key = %s", [target, partition_key]
    ).fetchone()
    return row[0] if row else None


def last_loaded_parts(conn: psycopg.Connection, target: str, partition_key: str) -> dict[str, Any] | None:
    row = conn.execute(load_sql(CORE, "select_last_loaded_parts"), [target, partition_key]).fetchone()
    return row[0] if row else None


def worker_name() -> str:
    """This process as ``host:pid``: which machine and process loaded a partition (a Celery worker's, or
    the run's own)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def record_provenance(
    conn: psycopg.Connection,
    *,
    run_id: str,
    asset: str,
    partition_key: str,
    outcome: RefreshOutcome,
    detail: Mapping[str, Any] | None = None,
) -> int:
    """One provenance row (its id); ``detail`` holds what a replay needs (a seed, a manifest sha256)."""
    row = conn.execute(
        load_sql(CORE, "insert_provenance"),
        {
            "run_id": run_id,
            "asset": asset,
            "partition_key": partition_key,
            "action": outcome.action,
            "reason": outcome.reason,
            "job_key": outcome.job_key,
            "parts": Jsonb(outcome.parts),
            "rows": outcome.rows,
            "detail": Jsonb(dict(detail)) if detail is not None else None,
            "worker": worker_name(),
        },
    ).fetchone()
    if row is None:
        raise RuntimeError("INSERT INTO provenance ... RETURNING id returned no row")
    return int(row[0])


def upstream_job_key(conn: psycopg.Connection, target: str, partition_key: str) -> str:
    """The key an upstream target holds, share-locked so it cannot reload under the reader's transaction."""
    row = conn.execute(
        load_sql(CORE, "select_target_key_for_share"), {"target": target, "partition_key": partition_key}
    ).fetchone()
    if row is None:
        raise StaleInputError(
            f"{target} holds nothing for partition {partition_key!r}: materialize {target} first"
        )
    return row[0]


def report_derived_output(
    conn: psycopg.Connection,
    *,
    asset: str,
    partition_key: str,
    parts: JobKeyParts,
    rows: int,
    run_id: str,
    unchanged: bool,
    detail: Mapping[str, Any] | None = None,
) -> RefreshOutcome:
    """Provenance for an output kept outside the database (a file, a summary): skipped when ``unchanged``.

    The reason for a change is named against the parts of the last load recorded for it.
    """
    if unchanged:
        outcome = RefreshOutcome(SKIPPED, NOTHING_CHANGED, parts.key, parts.as_dict(), rows)
    else:
        reason = describe_change(last_loaded_parts(conn, asset, partition_key), parts)
        if reason == "key recipe changed":
            reason = "output was missing or edited"
        outcome = RefreshOutcome(LOADED, reason, parts.key, parts.as_dict(), rows)
    record_provenance(
        conn, run_id=run_id, asset=asset, partition_key=partition_key, outcome=outcome, detail=detail
    )
    return outcome


def last_recorded_key(conn: psycopg.Connection, asset: str, partition_key: str) -> str | None:
    row = conn.execute(load_sql(CORE, "select_last_provenance"), [asset, partition_key]).fetchone()
    return row[0] if row else None


@dataclass(frozen=True)
class RecordedOutput:
    """The last provenance row of an output: its key, what it recorded as ``detail`` and its rows."""

    job_key: str
    detail: dict[str, Any]
    rows: int


def last_recorded_output(conn: psycopg.Connection, asset: str, partition_key: str) -> RecordedOutput | None:
    row = conn.execute(load_sql(CORE, "select_last_provenance_detail"), [asset, partition_key]).fetchone()
    if row is None:
        return None
    return RecordedOutput(row[0], dict(row[1] or {}), int(row[2]))
