"""Apply a batch at most once: the ledger row and the batch's rows commit in one transaction.

The ledger is keyed by the batch's checksum, so it answers "was this batch applied?", not "what does the
target hold?". That is right for batches that add up (daily feeds upserted by gbifID) and wrong for
snapshots: after A, B, A the ledger skips the second A and the target keeps B (the tests show it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import psycopg

from surveillance_pipeline.core.fingerprints import mark_refreshing
from surveillance_pipeline.core.keys import advisory_lock_id
from surveillance_pipeline.core.refresh import ensure_state_tables

PACKAGE = "surveillance_pipeline.ledger"


@dataclass(frozen=True)
class BatchOutcome:
    applied: bool
    checksum: str
    rows: int
    applied_at: str


def applied_checksums(conn: psycopg.Connection, target: str) -> set[str]:
    """The batches the ledger has applied to ``target`` (none before the ledger exists)."""
    present = conn.execute("SELECT to_regclass('batch_ledger') IS NOT NULL").fetchone()
    if not present or not present[0]:
        return set()
    rows = conn.execute("SELECT checksum FROM batch_ledger WHERE target = %s", [target]).fetchall()
    return {row[0] for row in rows}


def apply_batch_once(
    conn: psycopg.Connection,
    *,
    target: str,
    partition_key: str,
    checksum: str,
    apply: Callable[[psycopg.Connection], int],
) -> BatchOutcome:
    """Run ``apply`` unless the ledger has ``checksum``; record it in the same transaction."""
    # The ledger is one of the project's own tables: core/migrations.py creates and evolves it.
    ensure_state_tables(conn)
    with conn.transaction():
        # A write of the pipeline's own: the watch on the target's table (core/fingerprints.py) lets it be.
        mark_refreshing(conn)
        # Two runs with the same batch serialize here; the second then finds the ledger row.
        conn.execute("SELECT pg_advisory_xact_lock(%s)", [advisory_lock_id("batch", checksum)])
        seen = conn.execute(
            "SELECT rows, applied_at::text FROM batch_ledger WHERE checksum = %s", [checksum]
        ).fetchone()
        if seen is not None:
            return BatchOutcome(False, checksum, seen[0], seen[1])
        rows = apply(conn)
        applied_at = conn.execute(
            "INSERT INTO batch_ledger (checksum, target, partition_key, rows, status) "
            "VALUES (%s, %s, %s, %s, 'applied') RETURNING applied_at::text",
            [checksum, target, partition_key, rows],
        ).fetchone()
    assert applied_at is not None
    return BatchOutcome(True, checksum, rows, applied_at[0])
