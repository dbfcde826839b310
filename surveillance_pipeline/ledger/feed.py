"""Daily batches (``data/batches/YYYY-MM-DD.csv``) applied once each to ``occurrence_feed``.

A batch file is ``id,species,year,longitude,latitude,license``: each day's new records, each with its gbifID.
The batch ledger skips a file it has applied (same sha256); a corrected file for a day is a new batch and
upserts, changing exactly the corrected rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from surveillance_pipeline.core.day_files import day_of_file_name
from surveillance_pipeline.core.errors import InputError, StaleInputError, text_lines
from surveillance_pipeline.core.fingerprints import (
    EDITED_OUTSIDE,
    UNKNOWN_DIGEST,
    Fingerprint,
    forget_edits,
    mark_refreshing,
    partition_fingerprint,
    partition_watch,
    rewatch_partition,
)
from surveillance_pipeline.core.keys import advisory_lock_id, canonical_json, sha256_file, sha256_hex
from surveillance_pipeline.core.refresh import (
    LOADED,
    SKIPPED,
    WHOLE_TARGET,
    RefreshOutcome,
    ensure_target_schema,
    record_provenance,
)
from surveillance_pipeline.core.sql_files import load_sql
from surveillance_pipeline.core.targets import Target
from surveillance_pipeline.gbif.licenses import LICENSES
from surveillance_pipeline.gbif.registry import partition_keys
from surveillance_pipeline.gbif.rules import coordinate_texts_problem, gbif_id_text_problem, year_text_problem
from surveillance_pipeline.ledger.batches import BatchOutcome, apply_batch_once

PACKAGE = "surveillance_pipeline.ledger"
OCCURRENCE_FEED = Target("occurrence_feed", PACKAGE, "create_occurrence_feed")
# The asset that applies batches, as its provenance rows name it.
ASSET = "occurrence_batches"
# The data version of a day without a batch file.
NO_BATCH = "none"
BATCH_HEADER = "id,species,year,longitude,latitude,license"
FEED_LOCK = advisory_lock_id("feed", OCCURRENCE_FEED.name)


@dataclass(frozen=True)
class Batch:
    path: Path
    day: date
    data: bytes
    rows: int

    @property
    def checksum(self) -> str:
        return sha256_hex(self.data)


def batch_path(folder: Path, day: str) -> Path:
    return folder / f"{day}.csv"


def read_batch(path: Path) -> Batch:
    """A checked batch file; InputError names the file, line and field of the first problem."""
    day = day_of_file_name(path.name)
    if day is None:
        raise InputError(path, "file name", None, "a batch is named by its day, YYYY-MM-DD.csv")
    if path.is_symlink() or not path.is_file():
        raise InputError(path, "file", None, "a batch must be a regular file (not a directory or a symlink)")
    data = path.read_bytes()
    lines = text_lines(path, data, BATCH_HEADER.split(","))
    if not lines or lines[0] != BATCH_HEADER:
        raise InputError(path, "line 1", None, f"expected the header {BATCH_HEADER!r}")
    if len(lines) == 1:
        raise InputError(
            path, "line 2", None, "no records after the header: a day without records has no file"
        )
    species = set(partition_keys())
    seen: dict[int, int] = {}
    for number, line in enumerate(lines[1:], start=2):
        fields = line.split(",")
        where = f"line {number}"
        if len(fields) != 6:
            raise InputError(path, where, None, f"expected 6 fields ({BATCH_HEADER}), found {len(fields)}")
        raw_id, slug, raw_year, raw_longitude, raw_latitude, license_name = fields
        problem = gbif_id_text_problem(raw_id)
        if problem:
            raise InputError(path, where, "id", problem)
        if int(raw_id) in seen:
            raise InputError(path, where, "id", f"duplicate id, first on line {seen[int(raw_id)]}")
        seen[int(raw_id)] = number
        if slug not in species:
            raise InputError(path, where, "species", f"{slug!r} is not in the species registry")
        problem = year_text_problem(raw_year)
        if problem:
            raise InputError(path, where, "year", problem)
        _check_coordinates(path, where, raw_longitude, raw_latitude)
        if license_name and license_name not in LICENSES:
            raise InputError(path, where, "license", f"unknown license {license_name!r}")
    return Batch(path, day, data, len(lines) - 1)


def _check_coordinates(path: Path, where: str, raw_longitude: str, raw_latitude: str) -> None:
    found = coordinate_texts_problem((("longitude", raw_longitude, 180), ("latitude", raw_latitude, 90)))
    if found:
        raise InputError(path, where, *found)


def _upsert_batch(conn: psycopg.Connection, batch: Batch) -> int:
    conn.execute(load_sql(PACKAGE, "create_incoming_batch"))
    with conn.cursor().copy("COPY incoming_batch FROM STDIN (FORMAT csv, HEADER true)") as copy:
        copy.write(batch.data)
    statement = load_sql(PACKAGE, "upsert_batch").format(occurrence_feed=sql.Identifier(OCCURRENCE_FEED.name))
    rows = conn.execute(statement, {"batch_date": batch.day}).rowcount
    conn.execute("DROP TABLE incoming_batch")
    return rows


def apply_batch(conn: psycopg.Connection, batch: Batch) -> BatchOutcome:
    """Apply ``batch`` to occurrence_feed unless the ledger has its checksum; one transaction for both.

    The feed's fingerprint (the whole table's, in its state row under partition ``all``) is taken again
    in the same transaction, with the ledger it now stands for.
    """

    def upsert(connection: psycopg.Connection) -> int:
        # One writer of the feed at a time: a batch never lands between a repair's read of the ledger and
        # its replay.
        connection.execute("SELECT pg_advisory_xact_lock(%s)", [FEED_LOCK])
        if ensure_target_schema(connection, OCCURRENCE_FEED):
            # A rebuilt feed is empty: the ledger must forget what it had applied to the old one.
            connection.execute("DELETE FROM batch_ledger WHERE target = %s", [OCCURRENCE_FEED.name])
        rows = _upsert_batch(connection, batch)
        _record_feed_state(
            connection, [*_applied_batches(connection), (batch.checksum, batch.day.isoformat())]
        )
        return rows

    return apply_batch_once(
        conn,
        target=OCCURRENCE_FEED.name,
        partition_key=batch.day.isoformat(),
        checksum=batch.checksum,
        apply=upsert,
    )


@dataclass(frozen=True)
class DayOutcome:
    """What applying one day did, its data version (the batch's sha256, or NO_BATCH) and its batch."""

    outcome: RefreshOutcome
    version: str
    batch: Batch | None = None
    applied_at: str | None = None


def _applied_batches(conn: psycopg.Connection) -> list[tuple[str, str]]:
    """(checksum, day) of every batch the ledger applied to the feed, in the order they were applied."""
    rows = conn.execute(
        "SELECT checksum, partition_key FROM batch_ledger WHERE target = %s ORDER BY applied_at, checksum",
        [OCCURRENCE_FEED.name],
    ).fetchall()
    return [(str(checksum), str(day)) for checksum, day in rows]


def _feed_parts(applied: list[tuple[str, str]]) -> dict[str, object]:
    ledger = sha256_hex(canonical_json([list(entry) for entry in applied]).encode("utf-8"))
    return OCCURRENCE_FEED.key_parts(ledger, {}).as_dict()


def _record_feed_state(conn: psycopg.Connection, applied: list[tuple[str, str]]) -> Fingerprint:
    """The feed's state row: the ledger it stands for, and the fingerprint of what it holds now."""
    fingerprint = partition_fingerprint(conn, OCCURRENCE_FEED, WHOLE_TARGET)
    parts = _feed_parts(applied)
    conn.execute(
        load_sql("surveillance_pipeline.core", "upsert_target_state"),
        {
            "target": OCCURRENCE_FEED.name,
            "partition_key": WHOLE_TARGET,
            "job_key": sha256_hex(canonical_json(parts).encode("utf-8")),
            "parts": Jsonb(parts),
            "rows": fingerprint.rows,
            "partition_ref": WHOLE_TARGET,
            "digest": fingerprint.digest,
        },
    )
    forget_edits(conn, OCCURRENCE_FEED, WHOLE_TARGET)
    return fingerprint


def repair_feed(conn: psycopg.Connection, folder: Path, run_id: str) -> RefreshOutcome | None:
    """Rebuild occurrence_feed from the batches its ledger applied when it no longer holds what they
    made (an edit noted by the watch, or, with the watch off, a fingerprint that differs); None when it
    holds it. The batches are read again from ``folder`` and must be the bytes the ledger applied.
    """
    with conn.transaction():
        mark_refreshing(conn)
        conn.execute("SELECT pg_advisory_xact_lock(%s)", [FEED_LOCK])
        ensure_target_schema(conn, OCCURRENCE_FEED)
        state = conn.execute(
            "SELECT rows, coalesce(digest, %s) FROM target_state WHERE target = %s AND partition_key = %s "
            "FOR UPDATE",
            [UNKNOWN_DIGEST, OCCURRENCE_FEED.name, WHOLE_TARGET],
        ).fetchone()
        applied = _applied_batches(conn)
        if state is None and not applied:
            return None
        watch = partition_watch(conn, OCCURRENCE_FEED, WHOLE_TARGET)
        reason = f"{EDITED_OUTSIDE} ({watch.edits})" if watch.edits else None
        if reason is None and (state is None or state[1] == UNKNOWN_DIGEST or not watch.intact):
            found = partition_fingerprint(conn, OCCURRENCE_FEED, WHOLE_TARGET)
            recorded = Fingerprint(int(state[0]), state[1]) if state else None
            if recorded is not None and recorded.digest == UNKNOWN_DIGEST and found.rows == recorded.rows:
                _record_feed_state(conn, applied)  # applied before fingerprints: trusted by its count once
            elif recorded is None or found != recorded:
                expected = recorded.describe() if recorded else "no fingerprint"
                reason = (
                    f"{EDITED_OUTSIDE} (found by its fingerprint: {found.describe()}, expected {expected})"
                )
            if not watch.intact:
                rewatch_partition(conn, OCCURRENCE_FEED, WHOLE_TARGET)
        if reason is None:
            return None
        conn.execute(sql.SQL("DELETE FROM {}").format(sql.Identifier(OCCURRENCE_FEED.name)))
        for checksum, day in applied:
            path = batch_path(folder, day)
            if not path.is_file() or sha256_file(path) != checksum:
                raise StaleInputError(
                    f"{path}: occurrence_feed cannot be rebuilt: the batch the ledger applied for {day} "
                    f"(sha256 {checksum[:12]}) is no longer this file; put it back, or drop occurrence_feed "
                    "to apply every batch on disk afresh"
                )
            _upsert_batch(conn, read_batch(path))
        fingerprint = _record_feed_state(conn, applied)
        parts = _feed_parts(applied)
        outcome = RefreshOutcome(
            LOADED, reason, sha256_hex(canonical_json(parts).encode("utf-8")), parts, fingerprint.rows
        )
        record_provenance(
            conn, run_id=run_id, asset=OCCURRENCE_FEED.name, partition_key=WHOLE_TARGET, outcome=outcome
        )
    return outcome


def apply_day(conn: psycopg.Connection, folder: Path, day: str, run_id: str) -> DayOutcome:
    """Apply ``day``'s batch file, if there is one, once; record provenance either way. A feed edited
    outside the pipeline is rebuilt from its ledger's batches first."""
    repair_feed(conn, folder, run_id)
    path = batch_path(folder, day)
    if not path.exists():
        parts = OCCURRENCE_FEED.key_parts(NO_BATCH, {})
        outcome = RefreshOutcome(SKIPPED, f"no batch file for {day}", parts.key, parts.as_dict(), 0)
        day_outcome = DayOutcome(outcome, NO_BATCH)
    else:
        batch = read_batch(path)
        applied = apply_batch(conn, batch)
        parts = OCCURRENCE_FEED.key_parts(batch.checksum, {})
        action, reason = (LOADED, "new batch") if applied.applied else (SKIPPED, "batch already applied")
        outcome = RefreshOutcome(action, reason, parts.key, parts.as_dict(), applied.rows)
        day_outcome = DayOutcome(outcome, batch.checksum, batch, applied.applied_at)
    record_provenance(conn, run_id=run_id, asset=ASSET, partition_key=day, outcome=outcome)
    return day_outcome
