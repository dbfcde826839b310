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

from surveillance_pipeline.core.day_files import day_of_file_name
from surveillance_pipeline.core.errors import InputError, text_lines
from surveillance_pipeline.core.keys import sha256_hex
from surveillance_pipeline.core.refresh import (
    LOADED,
    SKIPPED,
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


def apply_batch(conn: psycopg.Connection, batch: Batch) -> BatchOutcome:
    """Apply ``batch`` to occurrence_feed unless the ledger has its checksum; one transaction for both."""

    def upsert(connection: psycopg.Connection) -> int:
        if ensure_target_schema(connection, OCCURRENCE_FEED):
            # A rebuilt feed is empty: the ledger must forget what it had applied to the old one.
            connection.execute("DELETE FROM batch_ledger WHERE target = %s", [OCCURRENCE_FEED.name])
        connection.execute(load_sql(PACKAGE, "create_incoming_batch"))
        with connection.cursor().copy("COPY incoming_batch FROM STDIN (FORMAT csv, HEADER true)") as copy:
            copy.write(batch.data)
        statement = load_sql(PACKAGE, "upsert_batch").format(
            occurrence_feed=sql.Identifier(OCCURRENCE_FEED.name)
        )
        return connection.execute(statement, {"batch_date": batch.day}).rowcount

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


def apply_day(conn: psycopg.Connection, folder: Path, day: str, run_id: str) -> DayOutcome:
    """Apply ``day``'s batch file, if there is one, once; record provenance either way."""
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
