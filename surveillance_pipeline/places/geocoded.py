"""geocoded_localities: one species' records that have a locality text but no coordinates, geocoded
through the call ledger, replaced per partition under a job key that includes the ledger's checksum.

The records come from the raw snapshot (the derived CSV has no locality). The job key holds ids and HMAC
keys, never a locality text: keys and parts are written to provenance and shown in the UI.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from surveillance_pipeline.core.errors import InputError, StaleInputError
from surveillance_pipeline.core.keys import JobKeyParts, canonical_json, sha256_hex
from surveillance_pipeline.core.refresh import RefreshOutcome, refresh_partition
from surveillance_pipeline.core.sql_files import load_sql
from surveillance_pipeline.core.targets import Target
from surveillance_pipeline.gbif.raw_snapshots import RawSnapshot, read_raw_snapshot
from surveillance_pipeline.gbif.records import RECORD_COLUMNS, iter_record_lines, record_from_fields
from surveillance_pipeline.gbif.registry import Species
from surveillance_pipeline.geocoding.service import Geocoder, ledger_key, normalize_locality
from surveillance_pipeline.occurrences.derive import check_request
from surveillance_pipeline.places.ledger import (
    GeocodeRun,
    LedgerEntry,
    answers_for,
    entries_checksum,
    geocode_missing,
)

PACKAGE = "surveillance_pipeline.places"
GEOCODED_LOCALITIES = Target(
    "geocoded_localities", PACKAGE, "create_geocoded_localities", partition_column="species_id"
)


@dataclass(frozen=True)
class LocalityRecord:
    id: int
    normalized: str


def localities_to_geocode(raw_path: Path, species: Species) -> list[LocalityRecord]:
    """Records with a non-empty locality and neither coordinate, sorted by id (not by the file's order)."""
    snapshot = read_raw_snapshot(raw_path)
    check_request(snapshot, species, raw_path)
    found: list[LocalityRecord] = []
    for index, record in enumerate(_records_without_coordinates(snapshot, raw_path)):
        if not isinstance(record, dict):
            raise InputError(raw_path, f"record {index}", None, "expected a JSON object")
        if record.get("decimalLatitude") is not None or record.get("decimalLongitude") is not None:
            continue
        locality = record.get("locality")
        if locality is None:
            continue
        if not isinstance(locality, str):
            raise InputError(raw_path, f"record {index}", "locality", f"expected text, got {locality!r}")
        normalized = normalize_locality(locality)
        if normalized:
            found.append(LocalityRecord(int(record["key"]), normalized))
    return sorted(found, key=lambda r: r.id)


def _records_without_coordinates(snapshot: RawSnapshot, raw_path: Path) -> Iterator[Any]:
    """The snapshot's records, less (for a records file) the lines that have coordinates: most of a big
    species, and cheaper to pass over as text than as parsed records."""
    if snapshot.records_file is None:
        yield from snapshot.records
        return
    latitude, longitude = RECORD_COLUMNS.index("decimalLatitude"), RECORD_COLUMNS.index("decimalLongitude")
    for line in iter_record_lines(raw_path.with_name(snapshot.records_file), snapshot.records_sha256):
        fields = line.split("\t")
        if not fields[latitude] and not fields[longitude]:
            yield record_from_fields(fields)


def geocoded_parts(
    keyed: list[tuple[int, str]], entries: dict[str, LedgerEntry], service: str
) -> JobKeyParts:
    """The job key's parts of a species' geocoded rows: its (id, ledger key) pairs and the answers used."""
    records_sha256 = sha256_hex(canonical_json([list(pair) for pair in keyed]).encode("utf-8"))
    ledger = entries_checksum(service, entries)
    checksum = sha256_hex(canonical_json({"records": records_sha256, "ledger": ledger}).encode("utf-8"))
    return GEOCODED_LOCALITIES.key_parts(checksum, {"geocoder": service})


@dataclass(frozen=True)
class GeocodedOutcome:
    refresh: RefreshOutcome
    run: GeocodeRun
    records: int
    found: int


def refresh_geocoded_localities(
    conn: psycopg.Connection,
    *,
    species: Species,
    raw_path: Path,
    geocoder: Geocoder,
    salt: str,
    run_id: str,
) -> GeocodedOutcome:
    """Geocode what the ledger lacks (each call committed), then make the table hold this species' answers."""
    records = localities_to_geocode(raw_path, species)
    key_of = {text: ledger_key(salt, text) for text in sorted({r.normalized for r in records})}
    run = geocode_missing(conn, geocoder, {key: text for text, key in key_of.items()})
    keyed = [(r.id, key_of[r.normalized]) for r in records]
    used: dict[str, list[object]] = {}

    def parts(connection: psycopg.Connection) -> JobKeyParts:
        entries = answers_for(connection, geocoder.service, key_of.values())
        missing = sorted(set(key_of.values()) - set(entries))
        if missing:
            raise StaleInputError(f"{len(missing)} localities of {species.slug} have no geocoder answer yet")
        used.update({key: entry.as_list() for key, entry in entries.items()})
        return geocoded_parts(keyed, entries, geocoder.service)

    def replace_rows(connection: psycopg.Connection) -> int:
        table = sql.Identifier(GEOCODED_LOCALITIES.name)
        connection.execute(
            sql.SQL("DELETE FROM {} WHERE species_id = %s").format(table), [species.species_id]
        )
        connection.execute(load_sql(PACKAGE, "create_incoming_geocoded"))
        with connection.cursor().copy(
            "COPY incoming_geocoded (id, status, longitude, latitude) FROM STDIN"
        ) as copy:
            for record_id, key in keyed:
                _, status, longitude, latitude = used[key]
                copy.write_row((record_id, status, longitude, latitude))
        return connection.execute(
            load_sql(PACKAGE, "insert_geocoded_localities").format(table=table),
            {"species_id": species.species_id},
        ).rowcount

    outcome = refresh_partition(
        conn,
        target=GEOCODED_LOCALITIES,
        partition_key=species.slug,
        parts=parts,
        replace_rows=replace_rows,
        run_id=run_id,
        partition_value=species.species_id,
    )
    found = sum(1 for _, key in keyed if used.get(key, [None, None])[1] == "found")
    return GeocodedOutcome(outcome, run, len(keyed), found)
