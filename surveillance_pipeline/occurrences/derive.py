"""Derive: raw snapshot in, clean CSV out. Pure: no client, no clock, nothing but the raw file's bytes.

The CSV is ``id,year,longitude,latitude,license`` sorted by id, ``\\n`` line ends, an empty field for null,
coordinates in Python's shortest round-trip form and licenses as short names. A derive of the same raw
bytes is the same CSV bytes, which is what lets ``occurrences`` refuse a derived file that was edited.
"""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

import psycopg

from surveillance_pipeline.core.errors import InputError, StaleInputError
from surveillance_pipeline.core.keys import (
    JobKeyParts,
    canonical_json,
    sha256_file,
    sha256_hex,
)
from surveillance_pipeline.core.partition_files import (
    delete_stale_staging_file,
    keep_file_stamps,
    sha256_file_stamped,
    staging_file,
)
from surveillance_pipeline.core.recent import RecentValues
from surveillance_pipeline.core.refresh import (
    RecordedOutput,
    RefreshOutcome,
    last_recorded_output,
    report_derived_output,
)
from surveillance_pipeline.gbif.licenses import normalize_license
from surveillance_pipeline.gbif.raw_snapshots import RawSnapshot, parse_raw_snapshot, read_raw_bytes
from surveillance_pipeline.gbif.records import iter_records
from surveillance_pipeline.gbif.registry import DOWNLOAD_ENDPOINT, Species
from surveillance_pipeline.gbif.rules import (
    COORDINATE_TERMS,
    MAX_GBIF_ID,
    coordinate_problem,
    published_at_zero,
    valid_gbif_id,
    year_problem,
)
from surveillance_pipeline.occurrences.derive_columns import ColumnarUnavailable, derived_blocks

T = TypeVar("T")
DERIVE_VERSION = 1
DERIVED_COLUMNS = ("id", "year", "longitude", "latitude", "license")
ZERO = ("", "")  # identity-compared marker: coordinates dropped because they were 0,0
# How much derived output one process keeps for derive_raw_file (a species is a few hundred bytes to
# tens of megabytes of CSV); the oldest entries go first.
RECENT_DERIVES_BYTES = 128 * 2**20


@dataclass(frozen=True)
class DerivedFile:
    data: bytes
    rows: int
    counts: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class RawDerive:
    """A raw file's sha256 and the derive of exactly those bytes."""

    raw_sha256: str
    derived: DerivedFile


# Derive is pure: the same raw bytes, species and code give the same CSV. gbif_derived derives every
# partition and occurrences then checks the derived file against a fresh derive; in one process (one
# `make run`, one backfill run) the second derive of the same bytes would redo the first one exactly. So
# the results are kept, keyed by the raw bytes' sha256, the species and DERIVE_VERSION.
_recent_derives: RecentValues[tuple[str, Species, int], DerivedFile] = RecentValues(RECENT_DERIVES_BYTES)


def derive_raw_file(raw_path: Path, species: Species) -> RawDerive:
    """Derive the raw file at ``raw_path``; a derive this process already did of the same bytes is reused."""
    raw = read_raw_bytes(raw_path)
    raw_sha256 = sha256_hex(raw)
    key = (raw_sha256, species, DERIVE_VERSION)
    derived = _recent_derives.get(key)
    if derived is None:
        derived = derive_occurrences(parse_raw_snapshot(raw_path, raw, raw_sha256), species, raw_path)
        _recent_derives.put(key, derived, len(derived.data))
    return RawDerive(raw_sha256, derived)


def memo_holds(
    raw_path: Path,
    memo: RecordedOutput,
    derived_path: Path,
    stamps: Path | None = None,
    *,
    keep_stamps: bool = True,
) -> bool:
    """Whether a recorded derive (``memo``, gbif_derived's last provenance row) still stands for these
    files, without deriving again.

    Derive is pure: the same raw bytes and DERIVE_VERSION give the same CSV. So a recorded derive of
    this raw file (its key: the raw file's sha256 and the version) whose output sha256 is the derived
    file's is as good as a fresh one. A header snapshot's records file must still be the one it names:
    the derive records which (``raw_records``, None for a search snapshot, whose records are inside it), so
    the raw file is parsed only for a record written before it did.

    ``stamps``: gbif_derived's stamp memo of the records and derived files, so that files unchanged since
    they were last hashed are not read again (``sha256_file_stamped``; ``keep_stamps`` False: read it,
    never write it). None: both files are hashed (make plan, make repair).
    """
    memo_sha256 = memo.detail.get("derived_sha256")
    if memo_sha256 is None or not derived_path.is_file() or not raw_path.is_file():
        return False
    raw = read_raw_bytes(raw_path)
    if derive_parts(sha256_hex(raw)).key != memo.job_key:
        return False
    if RAW_RECORDS in memo.detail:
        named = memo.detail[RAW_RECORDS]
        records_file = named.get("file") if isinstance(named, dict) else None
        records_sha256 = named.get("sha256") if isinstance(named, dict) else None
    else:
        snapshot = parse_raw_snapshot(raw_path, raw)
        records_file, records_sha256 = snapshot.records_file, snapshot.records_sha256
    if records_file is not None:
        records = raw_path.with_name(records_file)
        if not records.is_file() or sha256_file_stamped(records, stamps, keep=keep_stamps) != records_sha256:
            return False
    return sha256_file_stamped(derived_path, stamps, keep=keep_stamps) == memo_sha256


# The derive's provenance detail names the raw snapshot's records file under this, with its sha256 (None
# for a search snapshot): the same bytes always name the same file, so a skip need not parse them to learn.
RAW_RECORDS = "raw_records"


def raw_records_detail(snapshot: RawSnapshot) -> dict[str, str] | None:
    if snapshot.records_file is None or snapshot.records_sha256 is None:
        return None
    return {"file": snapshot.records_file, "sha256": snapshot.records_sha256}


def derive_parts(raw_sha256: str) -> JobKeyParts:
    """gbif_derived's key: the raw file's bytes and the derive code's version."""
    return JobKeyParts(input=raw_sha256, transform=DERIVE_VERSION, config={}, schema=len(DERIVED_COLUMNS))


def check_request(snapshot: RawSnapshot, species: Species, path: Path | str) -> None:
    """Refuse a raw snapshot fetched with another request than the registry would send now."""
    wanted = expected_request(snapshot, species)
    if canonical_json(snapshot.request) == canonical_json(wanted):
        return
    differences = _differences(snapshot.request, wanted)
    raise StaleInputError(
        f"{path}: the raw snapshot of {species.slug} ({species.scientific_name}) was fetched with another "
        f"request than the registry sends now ({'; '.join(differences)}); materialize gbif_raw again"
    )


def expected_request(snapshot: RawSnapshot, species: Species) -> dict[str, Any]:
    """The request the registry would make now for the snapshot's kind of source.

    A snapshot read from GBIF downloads names the downloads that held the species; which downloads lie in
    the folder is gbif_raw's business (their sha256 is its input). What derive can check is that the taxon
    is still the one the registry asks for.
    """
    if snapshot.request.get("endpoint") == DOWNLOAD_ENDPOINT:
        area = {"country": species.country, "stateProvince": species.state_province}
        return {**snapshot.request, "area": area, "taxon": species.taxon_filter()}
    return species.request()


def _differences(recorded: Any, wanted: Any, prefix: str = "") -> list[str]:
    if isinstance(recorded, dict) and isinstance(wanted, dict):
        lines: list[str] = []
        for name in sorted(set(recorded) | set(wanted)):
            lines += _differences(recorded.get(name), wanted.get(name), f"{prefix}{name}.")
        return lines
    if canonical_json(recorded) == canonical_json(wanted):
        return []
    return [f"{prefix.rstrip('.')}: recorded {recorded!r}, now {wanted!r}"]


def derive_occurrences(snapshot: RawSnapshot, species: Species, path: Path | str) -> DerivedFile:
    """The derived CSV for one species' raw snapshot (held in memory: a search answer's size at most);
    raises InputError naming record and field."""
    check_request(snapshot, species, path)
    rows: list[tuple[int, str, str, str, str]] = []
    counts = _empty_counts()
    seen: dict[int, int] = {}
    for index, record in enumerate(snapshot.records):
        row = _row(record, index, species, path, counts)
        if row[0] in seen:
            where = f"record {index} (key {row[0]})"
            raise InputError(path, where, "key", f"duplicate id, first seen at record {seen[row[0]]}")
        seen[row[0]] = index
        rows.append(row)
    rows.sort(key=lambda row: row[0])
    return DerivedFile(_to_csv(rows), len(rows), counts)


@dataclass(frozen=True)
class StreamedDerive:
    """A derive written as it went: the CSV's sha256, its rows and counts, and the raw file's sha256."""

    raw_sha256: str
    sha256: str
    rows: int
    counts: dict[str, int]
    # The raw snapshot's records file and its sha256 (raw_records_detail); None for a search snapshot.
    raw_records: dict[str, str] | None = None


def derive_to_file(raw_path: Path, species: Species, target: Path | None) -> StreamedDerive:
    """Derive the raw snapshot at ``raw_path`` into ``target`` (replaced only when its bytes change), or
    only hash the result when ``target`` is None. A header snapshot's records are streamed, so memory
    does not grow with the species; a search snapshot is derived in memory as before."""
    raw = read_raw_bytes(raw_path)
    raw_sha256 = sha256_hex(raw)
    snapshot = parse_raw_snapshot(raw_path, raw, raw_sha256)
    if snapshot.records_file is None:
        derived = derive_raw_file(raw_path, species).derived
        sha256 = sha256_hex(derived.data)
        if target is not None and not (target.is_file() and sha256_file(target) == sha256):
            _replace(target, [derived.data])
        return StreamedDerive(raw_sha256, sha256, derived.rows, derived.counts)
    check_request(snapshot, species, raw_path)
    records = raw_path.with_name(snapshot.records_file)
    counts: dict[str, int] = {}

    def written(blocks: Iterable[bytes]) -> str:
        return _hash_blocks(blocks) if target is None else _replace(target, blocks, keep_if_equal=True)

    sha256 = derive_records_file(records, snapshot.records_sha256, species, counts, written, raw_path)
    return StreamedDerive(raw_sha256, sha256, counts.pop("rows"), counts, raw_records_detail(snapshot))


def derive_records_file(
    records: Path,
    records_sha256: str | None,
    species: Species,
    counts: dict[str, int],
    consume: Callable[[Iterable[bytes]], T],
    named_as: Path | None = None,
) -> T:
    """What ``consume`` makes of the derived CSV's bytes (header first, block by block) of a records
    file; fills ``counts`` (with ``counts["rows"]``). ``named_as``: the path an error names (the raw
    snapshot's header; else the records file).

    Whole columns are derived a block at a time; where that cannot give the row derive's bytes
    (ColumnarUnavailable), the row derive starts again, naming the record and field of a bad value.
    """
    counts.clear()
    counts.update(_empty_counts())
    try:
        return consume(derived_blocks(records, records_sha256, species, counts))
    except ColumnarUnavailable:
        counts.clear()
        counts.update(_empty_counts())
        path = named_as or records
        lines = _streamed_lines(iter_records(records, records_sha256), species, path, counts)
        return consume(_blocks(lines))


def _hash_blocks(blocks: Iterable[bytes]) -> str:
    digest = hashlib.sha256()
    for block in blocks:
        digest.update(block)
    return digest.hexdigest()


def _streamed_lines(
    records: Iterable[dict[str, Any]], species: Species, path: Path, counts: dict[str, int]
) -> Iterator[str]:
    yield ",".join(DERIVED_COLUMNS) + "\n"
    previous = 0
    rows = 0
    for index, record in enumerate(records):
        gbif_id, year, longitude, latitude, license_name = _row(record, index, species, path, counts)
        if gbif_id <= previous:
            problem = "duplicate id" if gbif_id == previous else f"not in key order (after {previous})"
            raise InputError(path, f"record {index} (key {gbif_id})", "key", problem)
        previous = gbif_id
        rows += 1
        yield f"{gbif_id},{year},{longitude},{latitude},{license_name}\n"
    counts["rows"] = rows


def _blocks(lines: Iterable[str], size: int = 1 << 20) -> Iterator[bytes]:
    buffer: list[str] = []
    length = 0
    for line in lines:
        buffer.append(line)
        length += len(line)
        if length >= size:
            yield "".join(buffer).encode("utf-8")
            buffer, length = [], 0
    if buffer:
        yield "".join(buffer).encode("utf-8")


def _replace(target: Path, blocks: Iterable[bytes], keep_if_equal: bool = False) -> str:
    """Write ``blocks`` beside ``target`` and rename over it (kept as it is when already equal)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = staging_file(target)
    digest = hashlib.sha256()
    try:
        with partial.open("wb") as handle:
            for block in blocks:
                digest.update(block)
                handle.write(block)
            _durable(handle)
        sha256 = digest.hexdigest()
        if keep_if_equal and target.is_file() and sha256_file(target) == sha256:
            return sha256
        os.replace(partial, target)
        return sha256
    finally:
        partial.unlink(missing_ok=True)


def _durable(handle: IO[bytes]) -> None:
    handle.flush()
    os.fsync(handle.fileno())


def _empty_counts() -> dict[str, int]:
    return {"no_year": 0, "no_coordinates": 0, "zero_coordinates": 0, "no_license": 0}


def _row(
    record: Any, index: int, species: Species, path: Path | str, counts: dict[str, int]
) -> tuple[int, str, str, str, str]:
    """One record as a derived row, counting what it lacks; InputError names the record and field."""
    if not isinstance(record, dict):
        raise InputError(path, f"record {index}", None, "expected a JSON object")
    gbif_id = _gbif_id(record, index, path)
    where = f"record {index} (key {gbif_id})"
    _check_taxon(record, species, where, path)
    year = _year(record, where, path)
    coordinates = _coordinates(record, where, path)
    if coordinates is None:
        counts["no_coordinates"] += 1
    elif coordinates is ZERO:
        counts["zero_coordinates"] += 1
    try:
        license_name = normalize_license(record.get("license"))
    except ValueError as error:
        raise InputError(path, where, "license", str(error)) from None
    counts["no_year"] += year is None
    counts["no_license"] += license_name is None
    longitude, latitude = coordinates if coordinates is not None else ("", "")
    return (gbif_id, "" if year is None else str(year), longitude, latitude, license_name or "")


def _to_csv(rows: list[tuple[int, str, str, str, str]]) -> bytes:
    # None of the fields can hold a comma, quote or newline (ids, numbers, three fixed license names),
    # so plain joining is exact CSV and needs no quoting rules to stay stable.
    out = io.StringIO()
    out.write(",".join(DERIVED_COLUMNS) + "\n")
    for gbif_id, year, longitude, latitude, license_name in rows:
        out.write(f"{gbif_id},{year},{longitude},{latitude},{license_name}\n")
    return out.getvalue().encode("utf-8")


def _gbif_id(record: dict[str, Any], index: int, path: Path | str) -> int:
    key = record.get("key")
    if isinstance(key, bool) or not isinstance(key, int):
        raise InputError(path, f"record {index}", "key", f"expected an integer gbifID, got {key!r}")
    if not valid_gbif_id(key):
        raise InputError(path, f"record {index}", "key", f"gbifID {key} is outside 1..{MAX_GBIF_ID}")
    return key


def _check_taxon(record: dict[str, Any], species: Species, where: str, path: Path | str) -> None:
    if species.matches(record):
        return
    if species.taxon_key is not None:
        field_name, asked = "taxonKey", f"{species.taxon_key} ({species.scientific_name})"
    else:
        field_name, asked = "species", species.scientific_name
    raise InputError(
        path,
        where,
        field_name,
        f"record is {record.get(field_name)!r} ({record.get('scientificName')!r}), "
        f"but the request asked for {asked}",
    )


def _year(record: dict[str, Any], where: str, path: Path | str) -> int | None:
    year = record.get("year")
    if year is None:
        return None
    if isinstance(year, bool) or not isinstance(year, int):
        raise InputError(path, where, "year", f"expected a whole number, got {year!r}")
    problem = year_problem(year)
    if problem:
        raise InputError(path, where, "year", problem)
    return year


def _coordinates(record: dict[str, Any], where: str, path: Path | str) -> tuple[str, str] | None:
    """(longitude, latitude) as text; None when absent; ZERO for a record published at 0,0."""
    latitude: Any = record.get("decimalLatitude")
    longitude: Any = record.get("decimalLongitude")
    if latitude is None and longitude is None:
        return None
    for (name, limit), value in zip(COORDINATE_TERMS, (latitude, longitude), strict=True):
        if value is None:
            raise InputError(path, where, name, "missing while the other coordinate is present")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InputError(path, where, name, f"expected a number, got {value!r}")
        problem = coordinate_problem(value, limit)
        if problem:
            raise InputError(path, where, name, problem)
    if published_at_zero(latitude, longitude, record.get("issues") or []):
        return ZERO
    return repr(float(longitude)), repr(float(latitude))


# The asset whose provenance rows name each derive (and hold its memo: the derived file's sha256, counts).
DERIVED_ASSET = "gbif_derived"


@dataclass(frozen=True)
class DeriveResult:
    outcome: RefreshOutcome
    derived_sha256: str
    counts: dict[str, int]


def refresh_derived_file(
    conn: psycopg.Connection,
    *,
    species: Species,
    raw_path: Path,
    derived_path: Path,
    run_id: str,
    stamps: Path | None = None,
) -> DeriveResult:
    """Derive one species' raw snapshot into its CSV, unless the derive recorded for these raw bytes still
    stands (then nothing is read but checksums, or the files' stamps: ``memo_holds``); record provenance
    either way."""
    delete_stale_staging_file(derived_path)
    memo = last_recorded_output(conn, DERIVED_ASSET, species.slug)
    if memo is not None and memo_holds(raw_path, memo, derived_path, stamps):
        parts = derive_parts(sha256_file(raw_path))
        derived_sha256 = str(memo.detail["derived_sha256"])
        counts = dict(memo.detail.get("counts", {}))
        raw_records = (
            memo.detail[RAW_RECORDS]
            if RAW_RECORDS in memo.detail
            else raw_records_detail(parse_raw_snapshot(raw_path, read_raw_bytes(raw_path)))
        )
        rows, unchanged = memo.rows, True
    else:
        before = sha256_file(derived_path) if derived_path.is_file() else None
        fresh = derive_to_file(raw_path, species, derived_path)
        parts = derive_parts(fresh.raw_sha256)
        derived_sha256, counts, rows = fresh.sha256, fresh.counts, fresh.rows
        raw_records = fresh.raw_records
        unchanged = before == fresh.sha256
        if stamps is not None:
            # Both files' bytes were just hashed (the records' checked against the header as they were
            # read): their stamps spare the next skip reading them.
            written = {derived_path: derived_sha256}
            if isinstance(raw_records, dict) and isinstance(raw_records.get("file"), str):
                written[raw_path.with_name(raw_records["file"])] = str(raw_records["sha256"])
            keep_file_stamps(stamps, written)
    outcome = report_derived_output(
        conn,
        asset=DERIVED_ASSET,
        partition_key=species.slug,
        parts=parts,
        rows=rows,
        run_id=run_id,
        unchanged=unchanged,
        detail={"derived_sha256": derived_sha256, "counts": counts, RAW_RECORDS: raw_records},
    )
    return DeriveResult(outcome, derived_sha256, counts)
