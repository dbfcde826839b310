"""The geocoder's call ledger: each locality is asked once per service, and every answer is kept.

Calls are made one by one, in key order, each between two commits (``pending`` before, the answer after),
so a run that dies after 60 of 100 calls leaves 60 answers, and the next run asks only for the other 40.
A call whose answer never arrived (still ``pending``) is asked again: without an answer there is nothing
to reuse. The ledger holds HMAC keys and points, never the locality text.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

import psycopg

from surveillance_pipeline.core.fingerprints import VERIFY_SETTING
from surveillance_pipeline.core.keys import advisory_lock_id, canonical_json, sha256_hex
from surveillance_pipeline.core.refresh import commit_without_waiting_for_disk, ensure_state_tables
from surveillance_pipeline.core.sql_files import load_sql
from surveillance_pipeline.geocoding.service import GeocodeAnswer, Geocoder

PACKAGE = "surveillance_pipeline.places"
# The statements that look up a species' ledger keys (thousands per species) are planned afresh each time,
# never prepared: psycopg prepares a statement on its fifth execution, and PostgreSQL may then keep a
# generic plan, in which ``key = ANY(<the parameter>)`` is not known to be a constant array, so a
# sequential scan compares each row with every key in turn (2.2 s for 2,717 keys over 2,717 rows, seen
# on the first run over a 1M-record download; a table that grows from empty during that run is where
# the planner picks the scan). Planned with the value, the array is a constant and the server hashes it
# (1.8 ms for the same scan).
KEY_LIST_PREPARE = False


@dataclass(frozen=True)
class LedgerEntry:
    key: str
    status: str
    longitude: float | None
    latitude: float | None

    def as_list(self) -> list[object]:
        return [self.key, self.status, self.longitude, self.latitude]


@dataclass(frozen=True)
class GeocodeRun:
    """What one pass over the ledger did: the calls made now, and the answers reused from earlier runs."""

    calls: int
    reused: int


def geocode_missing(conn: psycopg.Connection, geocoder: Geocoder, texts_by_key: dict[str, str]) -> GeocodeRun:
    """Ask ``geocoder`` for every key the ledger has no answer to, committing each answer on its own.

    ``texts_by_key`` maps ledger keys to the normalized locality each stands for; keys are visited in
    sorted order, so two runs over the same localities ask in the same order.
    """
    # The ledger is one of the project's own tables: core/migrations.py creates and evolves it.
    ensure_state_tables(conn)
    answered = set(
        conn.execute(
            load_sql(PACKAGE, "select_answered_geocode_keys"),
            {"service": geocoder.service, "keys": sorted(texts_by_key)},
            prepare=KEY_LIST_PREPARE,
        ).fetchall()
    )
    reused = len(answered)
    calls = 0
    for key in sorted(set(texts_by_key) - {row[0] for row in answered}):
        # Session-level lock across the two commits: two runs never ask for one key at once.
        lock = advisory_lock_id("geocode-call", geocoder.service, key)
        conn.execute("SELECT pg_advisory_lock(%s)", [lock])
        try:
            if _answered(conn, geocoder.service, key):  # another run answered it while we waited
                reused += 1
                continue
            with conn.transaction():
                # The attempt need not wait for its WAL flush (a few ms, thousands of calls in a first
                # run): once committed it survives this process's death, which is what it guards
                # against; only a server crash could lose it, and a lost pending row costs nothing, as a
                # pending call is asked again anyway. The answer's commit below still waits.
                commit_without_waiting_for_disk(conn)
                conn.execute(
                    load_sql(PACKAGE, "upsert_geocode_call_pending"),
                    {"service": geocoder.service, "key": key},
                )
            answer = geocoder.geocode(texts_by_key[key])  # raises: the row stays pending, earlier ones stay
            _record_answer(conn, geocoder.service, key, answer)
            calls += 1
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", [lock])
    return GeocodeRun(calls=calls, reused=reused)


# Attempts at committing an answer that PostgreSQL chose as a deadlock's victim. The version's trigger
# (migration 9) has every write to the ledger update one row, so a transaction outside the pipeline that
# writes the ledger in two statements, the second waiting for the row being answered, can deadlock with
# the answer; the answer is paid for, so it is written again rather than asked again.
ANSWER_ATTEMPTS = 3


def _record_answer(conn: psycopg.Connection, service: str, key: str, answer: GeocodeAnswer) -> None:
    for attempt in range(1, ANSWER_ATTEMPTS + 1):
        try:
            with conn.transaction():
                conn.execute(
                    load_sql(PACKAGE, "update_geocode_call_answer"),
                    {
                        "service": service,
                        "key": key,
                        "status": answer.status,
                        "longitude": answer.longitude,
                        "latitude": answer.latitude,
                    },
                )
            return
        except psycopg.errors.DeadlockDetected:
            if attempt == ANSWER_ATTEMPTS:
                raise


def _answered(conn: psycopg.Connection, service: str, key: str) -> bool:
    row = conn.execute(
        "SELECT status FROM geocode_calls WHERE service = %s AND idempotency_key = %s", [service, key]
    ).fetchone()
    return row is not None and row[0] != "pending"


def answers_for(conn: psycopg.Connection, service: str, keys: Iterable[str]) -> dict[str, LedgerEntry]:
    """The answered entries for ``keys``, share-locked until the caller's transaction ends."""
    rows = conn.execute(
        load_sql(PACKAGE, "select_geocode_answers"),
        {"service": service, "keys": _key_list(keys)},
        prepare=KEY_LIST_PREPARE,
    ).fetchall()
    return {row[0]: LedgerEntry(*row) for row in rows}


def answers_stamp(conn: psycopg.Connection, service: str, keys: Iterable[str]) -> list[object]:
    """[count, md5] of the answered entries for ``keys``, computed by the server: equal stamps, equal
    entries. Cheap next to ``answers_for`` (no row leaves the server), and takes no lock."""
    row = conn.execute(
        load_sql(PACKAGE, "select_geocode_answers_stamp"),
        {"service": service, "keys": _key_list(keys)},
        prepare=KEY_LIST_PREPARE,
    ).fetchone()
    return [int(row[0]), str(row[1])] if row is not None else [0, ""]


class LedgerVersion(NamedTuple):
    """The ledger's version (migration 9): a token every statement that writes geocode_calls replaces.

    Read before the entries or their stamp, it vouches for them: seen again later, no write has committed
    in between, so the entries are still those read after it. (Read after them, a write committed in
    between would pair the new token with the old entries.)"""

    token: str
    # The connection verifies every skip (make repair): a skip then trusts no token, only the entries.
    verifying: bool


def ledger_version(conn: psycopg.Connection) -> LedgerVersion:
    row = conn.execute(
        load_sql(PACKAGE, "select_geocode_ledger_version"), {"verify": VERIFY_SETTING}
    ).fetchone()
    if row is None:
        raise RuntimeError("geocode_ledger_version holds no row (migration 9 inserts it)")
    return LedgerVersion(str(row[0]), bool(row[1]))


def _key_list(keys: Iterable[str]) -> str:
    """Ledger keys (hex HMACs) as one comma-separated text, split by the server: binding a list sends and
    adapts each of some 2,000 keys per species as its own array element (twice the time of the query)."""
    listed = sorted(set(keys))
    if any(not key.isalnum() for key in listed):
        raise ValueError("a ledger key that is not an HMAC's hex digits")
    return ",".join(listed)


def entries_checksum(service: str, entries: dict[str, LedgerEntry]) -> str:
    """sha256 of the entries used, in key order: the ledger's version as an input of a job key.

    Times and attempt counts are left out: they do not change a row.
    """
    ordered = [entries[key].as_list() for key in sorted(entries)]
    return sha256_hex(canonical_json({"service": service, "entries": ordered}).encode("utf-8"))
