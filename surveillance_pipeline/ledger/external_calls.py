"""Side-effecting calls made at most once: an idempotency-key ledger written call by call.

Before the call, a ``pending`` row is committed; after it, ``done`` with the answer. A run that dies
between the two leaves ``pending``; the next run first reconciles (asks the service whether the call took
effect, e.g. by listing what exists) and adopts what it finds instead of calling again. A session-level
advisory lock keeps two runs from racing on one key across those separate commits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from surveillance_pipeline.core.keys import advisory_lock_id
from surveillance_pipeline.core.refresh import ensure_state_tables
from surveillance_pipeline.core.sql_files import load_sql

PACKAGE = "surveillance_pipeline.ledger"
PENDING = "pending"
DONE = "done"


@dataclass(frozen=True)
class CallOutcome:
    called: bool  # this run made the call
    adopted: bool  # the call's effect was found by reconciling
    response: dict[str, Any]


def call_once(
    conn: psycopg.Connection,
    *,
    key: str,
    service: str,
    fingerprint: str,
    reconcile: Callable[[], dict[str, Any] | None],
    call: Callable[[], dict[str, Any]],
) -> CallOutcome:
    """Make ``call`` at most once per ``key``; ``reconcile`` runs before any call and after a lost answer."""
    # The ledger is one of the project's own tables: core/migrations.py creates and evolves it.
    ensure_state_tables(conn)
    lock = advisory_lock_id("external-call", key)
    conn.execute("SELECT pg_advisory_lock(%s)", [lock])
    try:
        row = conn.execute(
            "SELECT status, request_fingerprint, response FROM external_calls WHERE idempotency_key = %s",
            [key],
        ).fetchone()
        if row is not None and row[1] != fingerprint:
            raise ValueError(
                f"{service} call {key[:12]}… was made with another request; refusing to reuse its key"
            )
        if row is not None and row[0] == DONE:
            return CallOutcome(False, False, row[2])
        found = reconcile()
        if found is not None:
            _record(conn, key, service, fingerprint, DONE, found, adopted=True)
            return CallOutcome(False, True, found)
        _record(conn, key, service, fingerprint, PENDING, None, adopted=False)
        response = call()  # if this raises, the row stays pending and the next run reconciles
        _record(conn, key, service, fingerprint, DONE, response, adopted=False)
        return CallOutcome(True, False, response)
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", [lock])


def _record(
    conn: psycopg.Connection,
    key: str,
    service: str,
    fingerprint: str,
    status: str,
    response: dict[str, Any] | None,
    *,
    adopted: bool,
) -> None:
    with conn.transaction():
        conn.execute(
            load_sql(PACKAGE, "upsert_external_call"),
            {
                "key": key,
                "service": service,
                "status": status,
                "fingerprint": fingerprint,
                "response": Jsonb(response) if response is not None else None,
                "adopted": adopted,
            },
        )
