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
from functools import cache
from typing import Any

import psycopg
from psycopg import sql
from psycopg.pq import TransactionStatus
from psycopg.types.json import Jsonb

from surveillance_pipeline.core.errors import StaleInputError
from surveillance_pipeline.core.fault_points import BEFORE_COMMIT, fault_point
from surveillance_pipeline.core.fingerprints import (
    EDITED_OUTSIDE,
    REFRESHING_SETTING,
    UNKNOWN_DIGEST,
    VERIFY_SETTING,
    WATCH_TRIGGERS,
    Fingerprint,
    PartitionWatch,
    forget_edits,
    note_table_replaced,
    partition_fingerprint,
    read_watch,
    rewatch_partition,
    watch_parameters,
    watch_target,
)
from surveillance_pipeline.core.keys import JobKeyParts, advisory_lock_id, changed_parts, describe_change
from surveillance_pipeline.core.migrations import migrate
from surveillance_pipeline.core.record_delta import Delta, RecordChanges
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
    # Set when the load compared records (a delta, applied or found too large).
    changes: RecordChanges | None = None


def ensure_state_tables(conn: psycopg.Connection) -> None:
    """Bring the project's own tables (state, provenance, ledgers) to the current schema (migrations.py)."""
    migrate(conn)


def ensure_target_schema(conn: psycopg.Connection, target: Target) -> bool:
    """Build the target's table at its current schema version, watched; True when it was built anew for
    a new schema (or a first time), its state rows forgotten.

    Must run inside the caller's transaction so a rebuild commits with the first load into it. A table
    rebuilt for a new schema is empty, so the target's state rows are deleted with it: no state row may
    describe rows that are gone. A table dropped or made again outside the pipeline (its oid is not the
    one the watch was put on) is rebuilt too, but its state rows stay and every loaded partition is noted
    as edited, so each reloads with that reason. A table built before the watch existed gets the watch.

    Loads of different partitions of one table hold the schema lock shared, so they run side by side;
    only a rebuild takes it exclusively, and it then waits for every load in flight to commit. The
    status is re-read under the shared lock, because a rebuild may commit between the first read and
    the lock.
    """
    lock = advisory_lock_id("schema", target.name)
    if _schema_status(conn, target) == SCHEMA_CURRENT:
        conn.execute("SELECT pg_advisory_xact_lock_shared(%s)", [lock])
        if _schema_status(conn, target) == SCHEMA_CURRENT:
            return False
    conn.execute("SELECT pg_advisory_xact_lock(%s)", [lock])
    status = _schema_status(conn, target)
    if status == SCHEMA_CURRENT:
        return False
    if status == SCHEMA_UNWATCHED:
        watch_target(conn, target)
        _record_schema(conn, target)
        return False
    table = sql.Identifier(target.name)
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {} CASCADE").format(table))
    conn.execute(target.create_statement(table))
    watch_target(conn, target)
    _record_schema(conn, target)
    if status == SCHEMA_REPLACED:
        note_table_replaced(conn, target, "table dropped or replaced")
        return False
    conn.execute("DELETE FROM target_state WHERE target = %s", [target.name])
    return True


SCHEMA_CURRENT = "current"
# Built at an older schema version, or never: (re)build and forget the state rows.
SCHEMA_STALE = "stale"
# Built at this version, but the table is gone or is another table than the one the watch was put on.
SCHEMA_REPLACED = "replaced"
# Built at this version before the watch existed (migration 8): put the watch on it.
SCHEMA_UNWATCHED = "unwatched"


def _schema_status(conn: psycopg.Connection, target: Target) -> str:
    row = conn.execute(
        "SELECT version = %s, to_regclass(%s)::oid, table_oid FROM target_schema WHERE target = %s",
        [target.schema_version, target.name, target.name],
    ).fetchone()
    if row is None or not row[0]:
        return SCHEMA_STALE
    current_oid, watched_oid = row[1], row[2]
    if current_oid is None:
        return SCHEMA_REPLACED
    if watched_oid is None:
        return SCHEMA_UNWATCHED
    return SCHEMA_CURRENT if current_oid == watched_oid else SCHEMA_REPLACED


def _record_schema(conn: psycopg.Connection, target: Target) -> None:
    conn.execute(
        "INSERT INTO target_schema (target, version, table_oid) VALUES (%s, %s, to_regclass(%s)::oid) "
        "ON CONFLICT (target) DO UPDATE SET version = EXCLUDED.version, table_oid = EXCLUDED.table_oid, "
        "built_at = now()",
        [target.name, target.schema_version, target.name],
    )


def refresh_partition(
    conn: psycopg.Connection,
    *,
    target: Target,
    partition_key: str,
    parts: JobKeyParts | Callable[[psycopg.Connection], JobKeyParts],
    replace_rows: Callable[[psycopg.Connection], int | Fingerprint],
    run_id: str,
    partition_value: int | None = None,
    likely_parts: JobKeyParts | None = None,
    apply_changes: Callable[[psycopg.Connection, Fingerprint, Mapping[str, Any], JobKeyParts], Delta | None]
    | None = None,
) -> RefreshOutcome:
    """Make the target hold the snapshot named by ``parts``, or skip if it already does.

    ``parts`` may be a function of the connection, called inside the transaction once the lock is held,
    for inputs that live in the database (an upstream state row read ``FOR SHARE``). ``replace_rows``
    deletes the partition's rows and writes the new ones, returning the row count (or the rows'
    fingerprint, when it can take it more cheaply than a read of the target); it runs only when the key
    differs or the partition no longer holds what its load wrote, and whatever it raises rolls the whole
    transaction back. ``partition_value`` is the value of the target's partition column (the species_id)
    for a partitioned target.

    ``apply_changes`` (optional) loads by record-level delta: when only the key's input changed and the
    partition plainly holds what its last load wrote (no edit noted, its watch intact, its fingerprint
    known), it is called instead of ``replace_rows`` with that fingerprint, the parts it was loaded under
    and the parts it loads now; it applies the records that differ and returns the fingerprint after
    them (record_delta.py), so the partition ends as ``replace_rows`` would have left it. It runs in a
    savepoint: when it finds the delta too large to pay (or returns None: the input changed in a way no
    delta follows), all it did is rolled back, its locks and temporary tables with it, and ``replace_rows``
    runs.

    An equal key skips only when the partition still holds its snapshot: no edit noted against it since
    its load, and a watch that could have noted one (else its fingerprint is compared).

    The common case, a skip, is first tried in one statement (insert_skip_when_held.sql) when the key is
    known before any lock: ``parts`` itself, or ``likely_parts``, the caller's guess of what the function
    will return (from keys read without a lock, HeldKeys). Only when that statement finds the partition
    not plainly holding the key does the refresh transaction run: some seven round trips, 71 partitions per
    asset and run, each slowed further while another thread holds the GIL.
    """
    partition_ref = target.partition_ref(partition_value)
    outermost = conn.info.transaction_status == TransactionStatus.IDLE
    known = parts if isinstance(parts, JobKeyParts) else likely_parts
    if known is not None and outermost and conn.autocommit:
        skipped = _skip_when_held(conn, target, partition_key, partition_ref, known, run_id)
        if skipped is not None:
            return skipped
    with conn.transaction():
        began = conn.execute(
            _composed_statement("begin_partition_refresh"),
            {
                "refreshing": REFRESHING_SETTING,
                "outermost": outermost,
                "lock": advisory_lock_id(target.name, partition_key),
                "verify": VERIFY_SETTING,
                "target": target.name,
                "schema_version": target.schema_version,
            },
        ).fetchone()
        assert began is not None
        verify, schema_looks_current = bool(began[3]), bool(began[4])
        if callable(parts):
            parts = parts(conn)
        job_key = parts.key
        held = _held_partition(conn, target, partition_key, partition_ref) if schema_looks_current else None
        if held is None:
            # Never built, at an older version, dropped or replaced outside the pipeline, or found so only
            # under the shared lock: ensure_target_schema tells these apart (and takes the lock exclusively).
            ensure_target_schema(conn, target)
            held = _held_partition(conn, target, partition_key, partition_ref)
            assert held is not None, f"{target.name}: schema not current after ensure_target_schema"
        previous_key, previous_parts, previous_rows, previous_digest = held.state

        edited = None
        if previous_key == job_key:
            edited = _why_partition_differs(
                conn,
                target,
                partition_key,
                partition_ref,
                Fingerprint(previous_rows, previous_digest or UNKNOWN_DIGEST),
                held.watch,
                verify,
            )
        if previous_key == job_key and edited is None:
            # Committed without waiting for its WAL flush (begin_partition_refresh), when outermost.
            outcome = RefreshOutcome(
                SKIPPED, NOTHING_CHANGED, job_key, parts.as_dict(), previous_rows, previous_key
            )
        else:
            if outermost:
                conn.execute(RESTORE_SYNCHRONOUS_COMMIT)  # a load's commit waits for its WAL flush
            if edited is not None:
                reason = edited
            else:
                if previous_parts is None:
                    # No state row: a first load, or a table rebuilt for a new schema. History tells which.
                    previous_parts = last_loaded_parts(conn, target.name, partition_key)
                reason = describe_change(previous_parts, parts)
            delta = None
            if apply_changes is not None and _delta_applies(
                previous_parts, parts, previous_digest, held, verify
            ):
                assert previous_parts is not None  # _delta_applies
                held_fingerprint = Fingerprint(previous_rows, previous_digest or UNKNOWN_DIGEST)
                # In a savepoint, rolled back when the delta does not pay: that releases the locks the
                # attempt took. Else a delta's temporary table made LIKE a partitioned parent kept a lock
                # on the parent until COMMIT, and two species reloading at once each waited, at the swap's
                # DROP of its partition, for the other's lock: a deadlock (a refresh with a fifth of the
                # records changed, two partition threads of one step, 2026-12-08).
                with conn.transaction() as attempt:
                    delta = apply_changes(conn, held_fingerprint, previous_parts, parts)
                    if delta is None or delta.fingerprint is None:
                        raise psycopg.Rollback(attempt)
            if delta is not None and delta.fingerprint is not None:
                fingerprint = delta.fingerprint
            else:
                written = replace_rows(conn)
                fingerprint = (
                    written
                    if isinstance(written, Fingerprint)
                    else partition_fingerprint(conn, target, partition_ref)
                )
            conn.execute(
                load_sql(CORE, "upsert_target_state"),
                {
                    "target": target.name,
                    "partition_key": partition_key,
                    "job_key": job_key,
                    "parts": Jsonb(parts.as_dict()),
                    "rows": fingerprint.rows,
                    "partition_ref": partition_ref,
                    "digest": fingerprint.digest,
                },
            )
            forget_edits(conn, target, partition_ref)
            outcome = RefreshOutcome(
                LOADED,
                reason,
                job_key,
                parts.as_dict(),
                fingerprint.rows,
                previous_key,
                delta.changes if delta is not None else None,
            )
        record_provenance(
            conn,
            run_id=run_id,
            asset=target.name,
            partition_key=partition_key,
            outcome=outcome,
            detail={"changes": outcome.changes.as_dict()} if outcome.changes is not None else None,
        )
        if outcome.action == LOADED:
            fault_point(BEFORE_COMMIT, conn)
    return outcome


def _delta_applies(
    previous_parts: Mapping[str, Any] | None,
    parts: JobKeyParts,
    previous_digest: str | None,
    held: _HeldPartition,
    verify: bool,
) -> bool:
    """A record-level delta may replace a full reload: only the input changed (a transform, config or
    schema change reshapes every row), and the partition plainly holds what its last load wrote (else its
    rows are no base to apply changes to)."""
    return (
        previous_parts is not None
        and changed_parts(previous_parts, parts) == ["input"]
        and previous_digest not in (None, UNKNOWN_DIGEST)
        and held.watch.intact
        and not held.watch.edits
        and not verify
    )


# Within a transaction that set it off: the session's own value again (its default; no session sets it).
RESTORE_SYNCHRONOUS_COMMIT = "SET LOCAL synchronous_commit TO DEFAULT"


def commit_without_waiting_for_disk(conn: psycopg.Connection) -> None:
    """Let the caller's transaction commit without waiting for its WAL to reach the disk
    (``synchronous_commit`` off for this transaction only), for transactions whose loss costs nothing: a
    skip's (it changes no rows; refresh_partition sets it in its first statement, begin_partition_refresh.sql,
    and a load sets the wait back) and a geocoder call's pending row (places/ledger.py). A skip's provenance
    row written alone does the same inside its own statement (insert_provenance.sql).

    That wait is most of what a skip costs (a few ms each, 71 per asset and run). The commit is visible
    at once and survives the process's death; only a server crash within the next fraction of a second
    can lose such a transaction, whole, never half of it: a provenance row saying "skipped", over rows and
    state rows that it did not change. A load's transaction still waits.
    """
    conn.execute("SELECT set_config('synchronous_commit', 'off', true)")


@dataclass(frozen=True)
class _HeldPartition:
    """What a refresh reads under its locks: the partition's state row (job key, parts, rows, digest;
    ``(None, None, 0, None)`` when it has none) and its watch."""

    state: tuple[str | None, dict[str, Any] | None, int, str | None]
    watch: PartitionWatch


@cache
def _composed_statement(name: str) -> sql.Composed:
    """A refresh statement that reads the schema's status (and the watch) in its own round trip."""
    return load_sql(CORE, name).format(
        schema_is_current=load_sql(CORE, "select_target_schema_is_current"),
        watch=load_sql(CORE, "select_partition_watch"),
    )


def _skip_when_held(
    conn: psycopg.Connection,
    target: Target,
    partition_key: str,
    partition_ref: str,
    parts: JobKeyParts,
    run_id: str,
) -> RefreshOutcome | None:
    """The skip, decided and recorded in one statement (its own implicit transaction, so ``conn`` must be
    in autocommit and idle); None when the partition does not plainly hold ``parts``' key (refresh_partition
    then takes the transaction's path, which tells a load, a repair and a fingerprint's check apart)."""
    watch_parameters_ = watch_parameters(target, partition_ref)
    tables = watch_parameters_["tables"]
    assert isinstance(tables, list)
    row = conn.execute(
        _composed_statement("insert_skip_when_held"),
        {
            **watch_parameters_,
            "partition_key": partition_key,
            "schema_version": target.schema_version,
            "job_key": parts.key,
            "unknown_digest": UNKNOWN_DIGEST,
            "verify": VERIFY_SETTING,
            "whole_watch_triggers": WATCH_TRIGGERS * len(tables),
            "run_id": run_id,
            "action": SKIPPED,
            "reason": NOTHING_CHANGED,
            "parts": Jsonb(parts.as_dict()),
            "worker": worker_name(),
        },
    ).fetchone()
    if row is None:
        return None
    return RefreshOutcome(SKIPPED, NOTHING_CHANGED, parts.key, parts.as_dict(), int(row[0]), parts.key)


@dataclass(frozen=True)
class HeldKeys:
    """The key each partition of some targets held when read, without a lock, the partitions with an edit
    noted against them left out: a step's guess of its partitions' input keys, read once for all of them
    (read_held_keys), so that each skip takes one statement (refresh_partition's ``likely_parts``). Only a
    guess: the skip's statement checks the key the partition holds, and a load reads its inputs' keys
    again under a share lock (upstream_job_key)."""

    keys: Mapping[tuple[str, str], str]
    # Whether the connection verifies every skip (VERIFY_SETTING), read in the same statement: the same
    # for every connection of a step's warehouse.
    verifying: bool = False

    def get(self, target: str, partition_key: str) -> str | None:
        return self.keys.get((target, partition_key))


def read_held_keys(conn: psycopg.Connection, *targets: str) -> HeldKeys:
    rows = conn.execute(
        load_sql(CORE, "select_held_keys"), {"targets": list(targets), "verify": VERIFY_SETTING}
    ).fetchall()
    keys = {(target, key): job_key for _, target, key, job_key in rows if target is not None}
    return HeldKeys(keys, verifying=bool(rows[0][0]))


def _held_partition(
    conn: psycopg.Connection, target: Target, partition_key: str, partition_ref: str
) -> _HeldPartition | None:
    """The partition's state row (locked) and watch, read under the schema's shared lock; None when the
    target's table is not current after all (ensure_target_schema then rebuilds or rewatches it).

    Loads of different partitions of one table hold the schema lock shared, so they run side by side; a
    rebuild takes it exclusively (ensure_target_schema). The status is read again under the lock, in the
    same statement as the state row: a rebuild may commit while the lock is awaited.
    """
    conn.execute("SELECT pg_advisory_xact_lock_shared(%s)", [advisory_lock_id("schema", target.name)])
    watch_parameters_ = watch_parameters(target, partition_ref)
    row = conn.execute(
        _composed_statement("select_partition_state_for_refresh"),
        {**watch_parameters_, "partition_key": partition_key, "schema_version": target.schema_version},
    ).fetchone()
    assert row is not None
    if not row[0]:
        return None
    job_key, parts, rows, digest = row[1:5]
    state = (job_key, parts, rows, digest) if job_key is not None else (None, None, 0, None)
    return _HeldPartition(state, read_watch(watch_parameters_, *row[5:8]))


def _why_partition_differs(
    conn: psycopg.Connection,
    target: Target,
    partition_key: str,
    partition_ref: str,
    recorded: Fingerprint,
    watch: PartitionWatch,
    verify: bool,
) -> str | None:
    """Why a partition whose key is unchanged no longer holds its snapshot (None: it does).

    The cheap path reads nothing more: no edit noted and the watch intact (both read with the state row).
    Otherwise (the watch was off, the partition was loaded before fingerprints, or the connection asks
    for verification) its rows are fingerprinted and compared; a partition found intact gets its watch
    back.
    """
    if watch.edits:
        return f"{EDITED_OUTSIDE} ({watch.edits})"
    if watch.intact and recorded.digest != UNKNOWN_DIGEST and not verify:
        return None
    found = partition_fingerprint(conn, target, partition_ref)
    if recorded.digest == UNKNOWN_DIGEST:
        # Loaded before fingerprints: the count is all its state row knows; from now on, the digest too.
        if found.rows != recorded.rows:
            return f"{EDITED_OUTSIDE} (holds {found.rows} rows, its load wrote {recorded.rows})"
        conn.execute(
            load_sql(CORE, "update_target_state_fingerprint"),
            {
                "digest": found.digest,
                "partition_ref": partition_ref,
                "target": target.name,
                "partition_key": partition_key,
            },
        )
    elif found != recorded:
        # The digests are in the state row and the checks; the reason stays one a person reads.
        return (
            f"{EDITED_OUTSIDE} (found by its fingerprint: {found.rows} rows, its load wrote {recorded.rows})"
        )
    if not watch.intact:
        rewatch_partition(conn, target, partition_ref)
    return None


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
    """One provenance row (its id); ``detail`` holds what a replay needs (a logical run, a manifest sha256).

    A skip's row alone (autocommit, no transaction open) commits without waiting for the disk, as a skip's
    refresh transaction does: its loss in a server crash costs nothing.
    """
    unflushed = (
        outcome.action == SKIPPED
        and conn.autocommit
        and conn.info.transaction_status == TransactionStatus.IDLE
    )
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
            "unflushed": unflushed,
        },
    ).fetchone()
    if row is None:
        raise RuntimeError("INSERT INTO provenance ... RETURNING id returned no row")
    return int(row[0])


@dataclass(frozen=True)
class HeldState:
    """What a partition's state row says it holds: its rows, and the input checksum its key names."""

    rows: int
    input: str | None


def held_state(conn: psycopg.Connection, target: str, partition_key: str) -> HeldState | None:
    """The partition's state row as the caller's transaction sees it (read under the share lock
    upstream_job_key takes, it cannot change before the transaction ends); None when nothing is held."""
    row = conn.execute(
        load_sql(CORE, "select_held_state"), {"target": target, "partition_key": partition_key}
    ).fetchone()
    return HeldState(int(row[0]), row[1]) if row is not None else None


def upstream_job_key(conn: psycopg.Connection, target: str, partition_key: str) -> str:
    """The key an upstream target holds, share-locked so it cannot reload under the reader's transaction.

    Refused while an edit made outside the pipeline is noted against the partition: its rows are not
    the snapshot its key names, and whatever is made from them would carry that key all the same.
    """
    row = conn.execute(
        load_sql(CORE, "select_target_key_for_share"), {"target": target, "partition_key": partition_key}
    ).fetchone()
    if row is None:
        raise StaleInputError(
            f"{target} holds nothing for partition {partition_key!r}: materialize {target} first"
        )
    if row[1]:
        raise StaleInputError(
            f"{target} partition {partition_key!r} was {EDITED_OUTSIDE.removeprefix('target ')} ({row[1]}) "
            f"since its load: materialize {target} for {partition_key!r} to repair it first"
        )
    return str(row[0])


def refuse_edited_targets(conn: psycopg.Connection, *targets: str) -> None:
    """StaleInputError while an edit made outside the pipeline is noted against any partition of
    ``targets``: an output read from them now would not be the one their keys name."""
    rows = conn.execute(
        "SELECT target, partition_ref, array_to_string(operations, ', ') FROM target_edits "
        "WHERE target = ANY(%s) ORDER BY target, partition_ref LIMIT 5",
        [list(targets)],
    ).fetchall()
    if rows:
        listed = "; ".join(f"{target} partition {ref} ({operations})" for target, ref, operations in rows)
        raise StaleInputError(
            f"edited outside the pipeline since their load: {listed}: materialize "
            f"{' and '.join(sorted({row[0] for row in rows}))} to repair them first"
        )


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
