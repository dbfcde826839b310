"""geocoded_localities: one species' records that have a locality text but no coordinates, geocoded
through the call ledger, replaced per partition under a job key that includes the ledger's checksum.

The records come from the raw snapshot (the derived CSV has no locality). The job key holds ids and HMAC
keys, never a locality text: keys and parts are written to provenance and shown in the UI.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from surveillance_pipeline.core.errors import InputError, StaleInputError
from surveillance_pipeline.core.keys import JobKeyParts, canonical_json, sha256_hex
from surveillance_pipeline.core.partition_files import read_memo, replace_file
from surveillance_pipeline.core.refresh import RefreshOutcome, refresh_partition
from surveillance_pipeline.core.sql_files import load_sql
from surveillance_pipeline.core.targets import Target
from surveillance_pipeline.gbif.raw_snapshots import RawSnapshot, read_raw_bytes, read_raw_snapshot
from surveillance_pipeline.gbif.records import iter_records_without_coordinates
from surveillance_pipeline.gbif.registry import Species
from surveillance_pipeline.geocoding.service import Geocoder, ledger_key, normalize_locality
from surveillance_pipeline.occurrences.derive import check_request
from surveillance_pipeline.places.ledger import (
    GeocodeRun,
    LedgerEntry,
    answers_for,
    answers_stamp,
    entries_checksum,
    geocode_missing,
    ledger_version,
)

PACKAGE = "surveillance_pipeline.places"
# Schema 2: keyed by (species_id, id), not id (create_geocoded_localities.sql says why).
GEOCODED_LOCALITIES = Target(
    "geocoded_localities",
    PACKAGE,
    "create_geocoded_localities",
    schema_version=2,
    partition_column="species_id",
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
    yield from iter_records_without_coordinates(
        raw_path.with_name(snapshot.records_file), snapshot.records_sha256
    )


def geocoded_parts(
    keyed: list[tuple[int, str]], entries: dict[str, LedgerEntry], service: str
) -> JobKeyParts:
    """The job key's parts of a species' geocoded rows: its (id, ledger key) pairs and the answers used."""
    return _parts_of_checksums(_records_sha256(keyed), entries_checksum(service, entries), service)


def _records_sha256(keyed: list[tuple[int, str]]) -> str:
    return sha256_hex(canonical_json([list(pair) for pair in keyed]).encode("utf-8"))


def _parts_of_checksums(records_sha256: str, ledger_checksum: str, service: str) -> JobKeyParts:
    """The records' checksum and the ledger entries' (entries_checksum) make the input."""
    checksum = sha256_hex(
        canonical_json({"records": records_sha256, "ledger": ledger_checksum}).encode("utf-8")
    )
    return GEOCODED_LOCALITIES.key_parts(checksum, {"geocoder": service})


@dataclass(frozen=True)
class GeocodedOutcome:
    refresh: RefreshOutcome
    run: GeocodeRun
    records: int
    found: int


class _MemoStale(Exception):
    """The memo's records or answers are not what the inputs give now: take the whole path."""


def refresh_geocoded_localities(
    conn: psycopg.Connection,
    *,
    species: Species,
    raw_path: Path,
    geocoder: Geocoder,
    salt: str,
    run_id: str,
    memo_path: Path | None = None,
) -> GeocodedOutcome:
    """Geocode what the ledger lacks (each call committed), then make the table hold this species' answers.

    With ``memo_path``, what a parse of the raw snapshot gave (the records' checksum and ledger keys) is
    kept there under the sha256 of the snapshot's bytes, the salt, the service and the versions: an
    unchanged snapshot then decides its skip from the memo and the ledger, without parsing the records
    (seconds for a big download's species). Anything the memo cannot vouch for takes the whole path.
    """
    memo_key = None
    if memo_path is not None:
        memo_key = _memo_key(raw_path, species, geocoder.service, salt)
        memo = _read_memo(memo_path, memo_key)
        if memo is not None:
            try:
                return _refresh_from_memo(conn, memo, memo_path, species, raw_path, geocoder, salt, run_id)
            except _MemoStale:
                pass  # rolled back: nothing was written; the whole path below decides
    records = localities_to_geocode(raw_path, species)
    key_of = {text: ledger_key(salt, text) for text in sorted({r.normalized for r in records})}
    run = geocode_missing(conn, geocoder, {key: text for text, key in key_of.items()})
    keyed = [(r.id, key_of[r.normalized]) for r in records]
    used: dict[str, list[object]] = {}
    ledger: dict[str, Any] = {}

    def parts(connection: psycopg.Connection) -> JobKeyParts:
        version = ledger_version(connection).token  # before the entries (LedgerVersion says why)
        entries = answers_for(connection, geocoder.service, key_of.values())
        missing = sorted(set(key_of.values()) - set(entries))
        if missing:
            raise StaleInputError(f"{len(missing)} localities of {species.slug} have no geocoder answer yet")
        used.update({key: entry.as_list() for key, entry in entries.items()})
        # Read while the entries are share-locked: the stamp is of these very entries.
        checksum = entries_checksum(geocoder.service, entries)
        stamp = answers_stamp(connection, geocoder.service, key_of.values())
        ledger.update(stamp=stamp, checksum=checksum, version=version)
        return _parts_of_checksums(_records_sha256(keyed), checksum, geocoder.service)

    outcome = refresh_partition(
        conn,
        target=GEOCODED_LOCALITIES,
        partition_key=species.slug,
        parts=parts,
        replace_rows=lambda connection: _replace_rows(connection, species, keyed, used),
        run_id=run_id,
        partition_value=species.species_id,
    )
    found = sum(1 for _, key in keyed if used.get(key, [None, None])[1] == "found")
    if memo_path is not None and memo_key is not None:
        _write_memo(memo_path, memo_key, keyed, {**ledger, "found": found})
    return GeocodedOutcome(outcome, run, len(keyed), found)


def _replace_rows(
    connection: psycopg.Connection,
    species: Species,
    keyed: list[tuple[int, str]],
    used: dict[str, list[object]],
) -> int:
    table = sql.Identifier(GEOCODED_LOCALITIES.name)
    connection.execute(sql.SQL("DELETE FROM {} WHERE species_id = %s").format(table), [species.species_id])
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


# ---------------------------------------------------------------------------------------------------------
# The memo: what parsing a raw snapshot gave, so an unchanged one is not parsed again to decide a skip

# 2: the ledger keys and their record counts in a file of their own (<slug>.keys.json), read only when
# the ledger changed: a skip parsed them all (4.6 MB of JSON for a 5M-record download's 71 species).
MEMO_VERSION = 2


def _memo_key(raw_path: Path, species: Species, service: str, salt: str) -> str:
    """Everything the parse's result depends on. The salt enters as an HMAC of a fixed text, never as is."""
    identity = {
        "memo": MEMO_VERSION,
        "raw_sha256": sha256_hex(read_raw_bytes(raw_path)),
        "request": species.request(),
        "service": service,
        "salt": ledger_key(salt, "geocoded_localities memo"),
        "code_version": GEOCODED_LOCALITIES.code_version,
    }
    return sha256_hex(canonical_json(identity).encode("utf-8"))


def _read_memo(path: Path, memo_key: str) -> dict[str, Any] | None:
    """The memo written under ``memo_key``; None when missing, unreadable or written for other inputs."""
    memo = read_memo(path, key=memo_key)
    if memo is None:
        return None
    if not all(isinstance(memo.get(name), str) for name in ("records_sha256", "keys_sha256")):
        return None
    if not all(isinstance(memo.get(name), int) for name in ("records", "keys")):
        return None
    return memo


def _keys_path(memo_path: Path) -> Path:
    return memo_path.with_name(f"{memo_path.stem}.keys.json")


def _memo_key_counts(memo_path: Path, memo: dict[str, Any]) -> dict[str, int]:
    """The memo's ledger keys with how many records use each, from the file beside it; ``_MemoStale``
    when that file is missing or is not the one the memo names (its sha256)."""
    try:
        data = _keys_path(memo_path).read_bytes()
    except OSError:
        raise _MemoStale from None
    if sha256_hex(data) != memo["keys_sha256"]:
        raise _MemoStale
    counts = json.loads(data)
    if not isinstance(counts, dict):
        raise _MemoStale
    return counts


def _write_memo(path: Path, memo_key: str, keyed: list[tuple[int, str]], ledger: dict[str, Any]) -> None:
    """``ledger``: the stamp and checksum of the ledger entries the rows were made from, the ledger's
    version read before them, and how many records they found: a skip that sees the same version, or
    else entries with the same stamp, uses the checksum without reading them.

    The keys go first, into their own file: a memo is only ever beside the keys it names (a process
    killed in between leaves a memo that names other keys, and the next skip takes the whole path)."""
    counts = Counter(k for _, k in keyed)
    keys = canonical_json(counts).encode("utf-8")
    replace_file(_keys_path(path), keys)
    memo = {
        "key": memo_key,
        "records_sha256": _records_sha256(keyed),
        "records": len(keyed),
        "keys": len(counts),
        "keys_sha256": sha256_hex(keys),
        "ledger": ledger,
    }
    replace_file(path, canonical_json(memo).encode("utf-8"))


def _write_ledger(path: Path, memo: dict[str, Any], ledger: dict[str, Any]) -> None:
    """The memo again, with what it knows of the ledger (stamp, checksum, version, found) replaced."""
    replace_file(path, canonical_json({**memo, "ledger": ledger}).encode("utf-8"))


def settle_memo_versions(
    conn: psycopg.Connection,
    partitions: Iterable[tuple[Species, Path, Path]],
    service: str,
    salt: str,
) -> int:
    """After a step whose calls wrote the ledger: give each partition's memo (``(species, raw_path,
    memo_path)``) the ledger's version now, where the entries' stamp is still the memo's; how many.

    The step's own calls replaced the version after the first memos were written, so without this the
    next run's skips would each ask for their entries' stamp once more. The version is read before the
    stamps (LedgerVersion says why); a memo written for other inputs, or whose entries changed, is left
    as it is, for the next skip to decide."""
    version = ledger_version(conn).token
    settled = 0
    for species, raw_path, memo_path in partitions:
        if not memo_path.is_file() or not raw_path.is_file():
            continue
        memo = _read_memo(memo_path, _memo_key(raw_path, species, service, salt))
        ledger = memo.get("ledger") if memo is not None else None
        if memo is None or not isinstance(ledger, dict) or ledger.get("version") == version:
            continue
        try:
            counts = _memo_key_counts(memo_path, memo)
        except _MemoStale:
            continue
        if ledger.get("stamp") != answers_stamp(conn, service, counts):
            continue
        _write_ledger(memo_path, memo, {**ledger, "version": version})
        settled += 1
    return settled


def _refresh_from_memo(
    conn: psycopg.Connection,
    memo: dict[str, Any],
    memo_path: Path,
    species: Species,
    raw_path: Path,
    geocoder: Geocoder,
    salt: str,
    run_id: str,
) -> GeocodedOutcome:
    """refresh_geocoded_localities for an unchanged snapshot: the job key from the memo and the ledger (every
    key answered, or the whole path geocodes the rest). When the ledger's version is still the memo's,
    nothing in the ledger has changed, and the job key is the memo's; otherwise the entries' stamp is
    asked (sending the species' keys), and the entries are read only when it is not the memo's (a skip of a
    5M-record download's species read 134,000 entries to learn they had not changed). A reload, which
    needs the records, parses them and checks they are the memo's."""
    loaded: list[dict[str, int]] = []

    def counts() -> dict[str, int]:
        """The keys and their record counts, read once and only when the ledger changed or rows are made."""
        if not loaded:
            loaded.append(_memo_key_counts(memo_path, memo))
        return loaded[0]

    ledger = memo.get("ledger")
    kept: dict[str, Any] = ledger if isinstance(ledger, dict) else {}
    service = geocoder.service
    used: dict[str, list[object]] = {}
    fresh: dict[str, Any] = {}

    def read_entries(connection: psycopg.Connection) -> dict[str, LedgerEntry]:
        entries = answers_for(connection, service, counts())
        if len(entries) != memo["keys"]:
            raise _MemoStale
        used.update({key: entry.as_list() for key, entry in entries.items()})
        return entries

    def kept_parts(connection: psycopg.Connection) -> JobKeyParts | None:
        """The parts from the memo's ledger checksum, when the ledger's version is still the memo's, or
        else the entries' stamp is (the version then read before it is kept for the next skip)."""
        if not isinstance(kept.get("checksum"), str):
            return None
        version = ledger_version(connection)
        parts = _parts_of_checksums(memo["records_sha256"], kept["checksum"], service)
        if kept.get("version") == version.token and not version.verifying:
            return parts
        stamp = answers_stamp(connection, service, counts())
        if kept.get("stamp") == stamp and stamp[0] == memo["keys"]:
            if kept.get("version") != version.token:
                fresh.update(stamp=stamp, checksum=kept["checksum"], version=version.token)
            return parts
        return None

    def parts(connection: psycopg.Connection) -> JobKeyParts:
        unchanged = kept_parts(connection)
        if unchanged is not None:
            return unchanged
        version = ledger_version(connection).token  # before the entries (LedgerVersion says why)
        checksum = entries_checksum(service, read_entries(connection))
        fresh.update(stamp=answers_stamp(connection, service, counts()), checksum=checksum, version=version)
        return _parts_of_checksums(memo["records_sha256"], checksum, service)

    def replace_rows(connection: psycopg.Connection) -> int:
        if not used and entries_checksum(service, read_entries(connection)) != kept.get("checksum"):
            raise _MemoStale  # the entries changed between their stamp and now
        records = localities_to_geocode(raw_path, species)
        keyed = [(r.id, ledger_key(salt, r.normalized)) for r in records]
        if _records_sha256(keyed) != memo["records_sha256"]:
            raise _MemoStale
        return _replace_rows(connection, species, keyed, used)

    outcome = refresh_partition(
        conn,
        target=GEOCODED_LOCALITIES,
        partition_key=species.slug,
        parts=parts,
        replace_rows=replace_rows,
        run_id=run_id,
        partition_value=species.species_id,
        # Read before any lock (the stamp takes none): a skip then takes one more statement, not a
        # transaction. Only on an autocommit connection, where the read opens no transaction.
        likely_parts=kept_parts(conn) if conn.autocommit else None,
    )
    if used:
        found = sum(count for key, count in counts().items() if used[key][1] == "found")
    else:
        found = int(kept.get("found", 0))
    if fresh:
        # The entries or their stamp were read (the ledger changed since the memo, or its entries did):
        # keep the version and stamp, so the next skip need not read either.
        _write_ledger(memo_path, memo, {**fresh, "found": found})
    return GeocodedOutcome(outcome, GeocodeRun(calls=0, reused=memo["keys"]), memo["records"], found)
