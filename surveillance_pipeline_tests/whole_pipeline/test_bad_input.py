"""Bad input, table-driven: every case is refused naming file, place and field, or normalized as documented,
and no target's rows or state change.

Good files are loaded once per module (the devil's occurrences, devil delivery A, every lab batch); each
case then puts one bad file where the pipeline reads it and runs the same calls the assets make. After each
case the fingerprint of every target (rows md5 in key order, state rows, the batch ledger) must be as
before. Categories: raw snapshots, derived files, deliveries, batches. GBIF downloads are not covered here
yet (they were being built at the same time).

Documented normalizations: a raw snapshot is JSON, so CRLF line ends and unknown extra fields (in the
document or a record) derive the same CSV, and the load skips.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql

from surveillance_pipeline.core.errors import InputError, StaleInputError
from surveillance_pipeline.core.partition_files import replace_file
from surveillance_pipeline.core.refresh import SKIPPED, ensure_state_tables
from surveillance_pipeline.gbif.raw_snapshots import read_raw_snapshot
from surveillance_pipeline.lab.batches import lab_batch, write_lab_batches
from surveillance_pipeline.ledger.feed import apply_batch, read_batch
from surveillance_pipeline.occurrences import load
from surveillance_pipeline.occurrences.derive import derive_occurrences
from surveillance_pipeline.orchestration.resources import DataPaths
from surveillance_pipeline.snapshots import devil
from surveillance_pipeline.snapshots.assets import newest_devil_delivery
from surveillance_pipeline.snapshots.deliveries import read_delivery
from surveillance_pipeline_tests.support.faults.harness import OCCURRENCES_MD5, SPECIES, prepare_snapshots
from surveillance_pipeline_tests.support.pipeline import DEVIL

pytestmark = pytest.mark.db

TEN_MB = 10 * 1024 * 1024
SQL_LICENSE = "CC0 1.0'); DROP TABLE occurrences; --"
FEED_MD5 = (
    "SELECT count(*), md5(string_agg(concat_ws('|', id, species_slug, year, longitude, latitude, license,"
    " batch_date), E'\\n' ORDER BY id)) FROM occurrence_feed"
)
BATCH_DAY = "2026-10-02"
NORMALIZED = "normalized"


# ---------------------------------------------------------------- the good state and its fingerprint


@pytest.fixture(scope="module")
def good(database_url, tmp_path_factory):
    """(connection, good data folder) with every target loaded from good files."""
    folder = prepare_snapshots(tmp_path_factory.mktemp("bad_input") / "data").a
    write_lab_batches(folder)
    with psycopg.connect(database_url, autocommit=True) as conn:
        for (table,) in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'spatial_ref_sys'"
        ).fetchall():
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {} CASCADE").format(sql.Identifier(table)))
        ensure_state_tables(conn)
        occurrences_path(conn, folder)
        delivery_path(conn, folder)
        for path in sorted((folder / "batches").glob("*.csv")):
            apply_batch(conn, read_batch(path))
        yield conn, folder


def fingerprint(conn: psycopg.Connection) -> tuple:
    return (
        conn.execute(OCCURRENCES_MD5, [SPECIES.species_id]).fetchone(),
        devil.table_fingerprint(conn, devil.DEVIL_SNAPSHOT.name),
        conn.execute(FEED_MD5).fetchone(),
        conn.execute(
            "SELECT target, partition_key, job_key, parts::text, rows FROM target_state"
            " ORDER BY target, partition_key"
        ).fetchall(),
        conn.execute(
            "SELECT count(*), md5(string_agg(checksum, ',' ORDER BY checksum)) FROM batch_ledger"
        ).fetchone(),
    )


# ---------------------------------------------------------------- the real paths, as the assets call them


def raw_path(folder: Path) -> Path:
    return folder / "raw" / f"{DEVIL}.json"


def derived_path(folder: Path) -> Path:
    return folder / "derived" / f"{DEVIL}.csv"


def occurrences_path(conn: psycopg.Connection, folder: Path):
    """occurrences: verify the derived file against a fresh derive, then load (the occurrences asset)."""
    derived = load.verified_derived_file(conn, SPECIES, raw_path(folder), derived_path(folder))
    return load.load_occurrences(
        conn, species=SPECIES, derived=derived, rules=load.OccurrenceRules(), run_id="bad-input"
    )


def raw_then_occurrences(conn: psycopg.Connection, folder: Path):
    """gbif_derived (read and derive the raw snapshot, write the CSV), then occurrences."""
    raw = raw_path(folder)
    derived = derive_occurrences(read_raw_snapshot(raw), SPECIES, raw)
    replace_file(derived_path(folder), derived.data)
    return occurrences_path(conn, folder)


def delivery_path(conn: psycopg.Connection, folder: Path):
    """devil_snapshot: the newest delivery, checked, then the refresh."""
    delivery = newest_devil_delivery(DataPaths(root=str(folder)))
    return devil.refresh_devil_snapshot(
        conn, delivery=delivery, rules=devil.SnapshotRules(), run_id="bad-input"
    )


def batch_path(conn: psycopg.Connection, folder: Path, path: Path):
    return apply_batch(conn, read_batch(path))


# ---------------------------------------------------------------- cases


@dataclass(frozen=True)
class Case:
    name: str
    # Writes the bad input into the case's copy of the good folder; returns the path that should be named.
    write: Callable[[Path], Path]
    # Expected InputError.where prefix (or text in a StaleInputError), or NORMALIZED.
    where: str
    field: str | None = None

    def __str__(self) -> str:
        return self.name


def raw_case(name: str, edit: Callable[[dict], object], where: str, field: str | None = None) -> Case:
    """A raw snapshot with its parsed document edited (``edit`` may return bytes to write instead)."""

    def write(folder: Path) -> Path:
        path = raw_path(folder)
        document = json.loads(path.read_bytes())
        result = edit(document)
        if isinstance(result, bytes):
            path.write_bytes(result)
        else:
            text = json.dumps(document, sort_keys=True, indent=1, ensure_ascii=False, allow_nan=True) + "\n"
            path.write_bytes(text.encode("utf-8"))
        return path

    return Case(f"raw: {name}", write, where, field)


def raw_bytes_case(name: str, edit: Callable[[bytes], bytes], where: str, field: str | None = None) -> Case:
    def write(folder: Path) -> Path:
        path = raw_path(folder)
        path.write_bytes(edit(path.read_bytes()))
        return path

    return Case(f"raw: {name}", write, where, field)


def record(index: int, **changes: object) -> Callable[[dict], None]:
    def edit(document: dict) -> None:
        document["records"][index].update(changes)

    return edit


def without(*names: str, index: int | None = None) -> Callable[[dict], None]:
    def edit(document: dict) -> None:
        target = document if index is None else document["records"][index]
        for name in names:
            target.pop(name, None)

    return edit


def duplicate_key(document: dict) -> None:
    document["records"][1]["key"] = document["records"][0]["key"]


def huge_key(document: dict) -> bytes:
    document["records"][0]["key"] = 424242424242
    text = json.dumps(document, sort_keys=True, indent=1)
    return text.replace("424242424242", "9" * TEN_MB, 1).encode()


RAW_CASES = [
    raw_case("non-numeric id", record(0, key="abc"), "record 0", "key"),
    raw_case("negative id", record(0, key=-5), "record 0", "key"),
    raw_case("id over bigint", record(0, key=2**63), "record 0", "key"),
    raw_case("fractional id", record(0, key=1.5), "record 0", "key"),
    raw_case("missing id", without("key", index=0), "record 0", "key"),
    raw_case("duplicate id", duplicate_key, "record 1", "key"),
    raw_case("10 MB of digits as id", huge_key, "document"),
    raw_bytes_case("empty file", lambda data: b"", "line 1"),
    raw_case("no records (header only)", without("records"), "document", "records"),
    raw_case("missing request", without("request"), "document", "request"),
    raw_case("record not an object", lambda d: d["records"].__setitem__(0, "x"), "record 0"),
    raw_case("extra field in a record", record(0, unexpectedField="x"), NORMALIZED),
    raw_case("extra document field", lambda d: d.__setitem__("comment", "x"), NORMALIZED),
    raw_bytes_case("CRLF line ends", lambda data: data.replace(b"\n", b"\r\n"), NORMALIZED),
    raw_bytes_case("UTF-8 BOM", lambda data: b"\xef\xbb\xbf" + data, "line 1"),
    raw_bytes_case(
        "invalid UTF-8", lambda data: data.replace(b'"license": "', b'"license": "\xff', 1), "line "
    ),
    raw_bytes_case(
        "raw NUL byte", lambda data: data.replace(b'"license": "', b'"license": "\x00', 1), "line "
    ),
    raw_case("escaped NUL in license", record(0, license="CC0 1.0\x00"), "record 0", "license"),
    raw_case("10 MB license", record(0, license="x" * TEN_MB), "record 0", "license"),
    raw_case("year 0", record(0, year=0), "record 0", "year"),
    raw_case("year 3000", record(0, year=3000), "record 0", "year"),
    raw_case("year as text", record(0, year="2020"), "record 0", "year"),
    raw_case(
        "latitude 91", record(0, decimalLatitude=91, decimalLongitude=147.0), "record 0", "decimalLatitude"
    ),
    raw_case(
        "longitude NaN",
        record(0, decimalLatitude=-42.0, decimalLongitude=float("nan")),
        "record 0",
        "decimalLongitude",
    ),
    raw_case(
        "longitude Infinity",
        record(0, decimalLatitude=-42.0, decimalLongitude=float("inf")),
        "record 0",
        "decimalLongitude",
    ),
    raw_case("unknown license", record(0, license="All rights reserved"), "record 0", "license"),
    raw_case("license with SQL", record(0, license=SQL_LICENSE), "record 0", "license"),
    raw_case("another species", record(0, species="Canis lupus"), "record 0", "species"),
]


def derived_case(
    name: str, edit: Callable[[bytes], bytes | None], where: str, field: str | None = None
) -> Case:
    def write(folder: Path) -> Path:
        path = derived_path(folder)
        data = edit(path.read_bytes())
        if data is None:
            path.unlink()
        else:
            path.write_bytes(data)
        return path

    return Case(f"derived: {name}", write, where, field)


def edit_year_of_line_3(data: bytes) -> bytes:
    lines = data.split(b"\n")
    fields = lines[2].split(b",")
    fields[1] = b"1999" if fields[1] != b"1999" else b"1998"
    lines[2] = b",".join(fields)
    return b"\n".join(lines)


DERIVED_CASES = [
    derived_case("missing file", lambda data: None, "file"),
    derived_case("empty file", lambda data: b"", "first at line 1, field 'id'"),
    derived_case("header only", lambda data: data.split(b"\n", 1)[0] + b"\n", "first at line 2, field 'id'"),
    derived_case(
        "CRLF line ends", lambda data: data.replace(b"\n", b"\r\n"), "first at line 1, field 'license'"
    ),
    derived_case("UTF-8 BOM", lambda data: b"\xef\xbb\xbf" + data, "first at line 1, field 'id'"),
    derived_case("an edited year", edit_year_of_line_3, "first at line 3, field 'year'"),
    derived_case(
        "extra column", lambda data: data.replace(b"license\n", b"license,extra\n", 1), "first at line 1"
    ),
]


def text_case(
    category: str,
    name: str,
    edit: Callable[[list[bytes]], list[bytes] | bytes],
    where: str,
    field: str | None,
    file_name: str,
    folder_of: Callable[[Path], Path],
    good_bytes: Callable[[Path], bytes],
) -> Case:
    """A CSV input whose lines (header first, no final empty line) are edited by ``edit``."""

    def write(folder: Path) -> Path:
        lines = good_bytes(folder).rstrip(b"\n").split(b"\n")
        result = edit(lines)
        data = result if isinstance(result, bytes) else b"\n".join(result) + b"\n"
        path = folder_of(folder) / file_name
        path.write_bytes(data)
        return path

    return Case(f"{category}: {name}", write, where, field)


def deliveries_folder(folder: Path) -> Path:
    return folder / "deliveries" / DEVIL


def good_delivery(folder: Path) -> bytes:
    return (deliveries_folder(folder) / "2026-11-02.csv").read_bytes()


def set_field(index: int, value: bytes, line: int = 1) -> Callable[[list[bytes]], list[bytes]]:
    def edit(lines: list[bytes]) -> list[bytes]:
        fields = lines[line].split(b",")
        fields[index] = value
        lines[line] = b",".join(fields)
        return lines

    return edit


def copy_line(lines: list[bytes]) -> list[bytes]:
    return [lines[0], lines[1], lines[1], *lines[2:]]


def delivery(name: str, edit, where: str, field: str | None = None) -> Case:
    return text_case("delivery", name, edit, where, field, "2026-11-09.csv", deliveries_folder, good_delivery)


def not_a_file(kind: str, category: str, folder_of: Callable[[Path], Path], name: str, source: str) -> Case:
    def write(folder: Path) -> Path:
        path = folder_of(folder) / name
        if path.exists():
            path.unlink()
        if kind == "directory":
            path.mkdir()
        else:
            path.symlink_to(folder_of(folder) / source)
        return path

    return Case(f"{category}: a {kind}", write, "file")


DELIVERY_CASES = [
    delivery("non-numeric id", set_field(0, b"abc"), "line 2", "id"),
    delivery("negative id", set_field(0, b"-5"), "line 2", "id"),
    delivery("id over bigint", set_field(0, str(2**63).encode()), "line 2", "id"),
    delivery("id with a space", set_field(0, b" 12"), "line 2", "id"),
    delivery("10 MB of digits as id", set_field(0, b"9" * TEN_MB), "line 2", "id"),
    delivery("duplicate id", copy_line, "line 3", "id"),
    delivery("empty file", lambda lines: b"", "line 1"),
    delivery("header only", lambda lines: lines[:1], "line 2"),
    delivery("missing column", lambda lines: [lines[0], lines[1].rsplit(b",", 1)[0], *lines[2:]], "line 2"),
    delivery("extra column", lambda lines: [lines[0], lines[1] + b",x", *lines[2:]], "line 2"),
    delivery("extra header column", lambda lines: [lines[0] + b",x", *lines[1:]], "line 1"),
    delivery("CRLF line ends", lambda lines: b"\r\n".join(lines) + b"\r\n", "line 1", "license"),
    delivery("UTF-8 BOM", lambda lines: b"\xef\xbb\xbf" + b"\n".join(lines) + b"\n", "line 1"),
    delivery("invalid UTF-8", set_field(2, b"CC0 1.0\xff"), "line 2"),
    delivery("NUL byte", set_field(2, b"CC0\x001.0"), "line 2", "license"),
    delivery("10 MB license", set_field(2, b"x" * TEN_MB), "line 2", "license"),
    delivery("year 0", set_field(1, b"0"), "line 2", "year"),
    delivery("year 3000", set_field(1, b"3000"), "line 2", "year"),
    delivery("unknown license", set_field(2, b"All rights reserved"), "line 2", "license"),
    delivery("license with SQL", set_field(2, SQL_LICENSE.replace(",", "").encode()), "line 2", "license"),
    not_a_file("directory", "delivery", deliveries_folder, "2026-11-09.csv", "2026-11-02.csv"),
    not_a_file("symlink", "delivery", deliveries_folder, "2026-11-09.csv", "2026-11-02.csv"),
]


def batches_folder(folder: Path) -> Path:
    return folder / "batches"


def good_batch(folder: Path) -> bytes:
    return lab_batch(1)


def batch(name: str, edit, where: str, field: str | None = None, file_name: str = f"{BATCH_DAY}.csv") -> Case:
    return text_case("batch", name, edit, where, field, file_name, batches_folder, good_batch)


def coordinates(longitude: bytes, latitude: bytes) -> Callable[[list[bytes]], list[bytes]]:
    def edit(lines: list[bytes]) -> list[bytes]:
        return set_field(4, latitude)(set_field(3, longitude)(lines))

    return edit


BATCH_CASES = [
    batch("non-numeric id", set_field(0, b"abc"), "line 2", "id"),
    batch("negative id", set_field(0, b"-5"), "line 2", "id"),
    batch("id over bigint", set_field(0, str(2**63).encode()), "line 2", "id"),
    batch("duplicate id", copy_line, "line 3", "id"),
    batch("empty file", lambda lines: b"", "line 1"),
    batch("header only", lambda lines: lines[:1], "line 2"),
    batch("missing column", lambda lines: [lines[0], lines[1].rsplit(b",", 1)[0], *lines[2:]], "line 2"),
    batch("extra column", lambda lines: [lines[0], lines[1] + b",x", *lines[2:]], "line 2"),
    batch("CRLF line ends", lambda lines: b"\r\n".join(lines) + b"\r\n", "line 1", "license"),
    batch("UTF-8 BOM", lambda lines: b"\xef\xbb\xbf" + b"\n".join(lines) + b"\n", "line 1"),
    batch("invalid UTF-8", set_field(1, b"\xfe\xff"), "line 2"),
    batch("NUL byte", set_field(1, b"sarcophilus\x00harrisii"), "line 2", "species"),
    batch("10 MB species", set_field(1, b"x" * TEN_MB), "line 2", "species"),
    batch("10 MB of digits as year", set_field(2, b"2" * TEN_MB), "line 2", "year"),
    batch("year 0", set_field(2, b"0"), "line 2", "year"),
    batch("year 3000", set_field(2, b"3000"), "line 2", "year"),
    batch("latitude 91", coordinates(b"147.0", b"91"), "line 2", "latitude"),
    batch("longitude NaN", coordinates(b"NaN", b"-42.0"), "line 2", "longitude"),
    batch("longitude Infinity", coordinates(b"Infinity", b"-42.0"), "line 2", "longitude"),
    batch("longitude with an underscore", coordinates(b"14_7", b"-42.0"), "line 2", "longitude"),
    batch("only one coordinate", coordinates(b"147.0", b""), "line 2", "latitude"),
    batch("unknown license", set_field(5, b"All rights reserved"), "line 2", "license"),
    batch("license with SQL", set_field(5, SQL_LICENSE.replace(",", "").encode()), "line 2", "license"),
    batch("species with SQL", set_field(1, b"x'); DELETE FROM batch_ledger; --"), "line 2", "species"),
    batch("renamed to 2026-02-30", lambda lines: lines, "file name", file_name="2026-02-30.csv"),
    not_a_file("directory", "batch", batches_folder, f"{BATCH_DAY}.csv", "2026-10-01.csv"),
    not_a_file("symlink", "batch", batches_folder, f"{BATCH_DAY}.csv", "2026-10-01.csv"),
]

PATHS = {"raw": raw_then_occurrences, "derived": occurrences_path, "delivery": delivery_path}


def test_there_are_at_least_forty_cases():
    cases = RAW_CASES + DERIVED_CASES + DELIVERY_CASES + BATCH_CASES
    assert len(cases) >= 40 and len({case.name for case in cases}) == len(cases)


@pytest.mark.parametrize("case", RAW_CASES + DERIVED_CASES + DELIVERY_CASES + BATCH_CASES, ids=str)
def test_bad_input_is_named_or_normalized_and_changes_nothing(good, tmp_path, case):
    conn, good_folder = good
    folder = tmp_path / "data"
    shutil.copytree(good_folder, folder, symlinks=True)
    before = fingerprint(conn)
    bad = case.write(folder)
    category = case.name.split(":")[0]

    def run():
        if category == "batch":
            return batch_path(conn, folder, bad)
        return PATHS[category](conn, folder)

    if case.where == NORMALIZED:
        assert run().action == SKIPPED
    elif category == "derived" and case.where != "file":
        with pytest.raises(StaleInputError) as stale:
            run()
        assert str(bad) in str(stale.value) and f"({case.where})" in str(stale.value)
    else:
        with pytest.raises(InputError) as error:
            run()
        assert error.value.path == str(bad)
        assert error.value.where.startswith(case.where), error.value.where
        assert error.value.field == case.field
        # Clear: short enough to read even when the input holds a 10 MB field.
        assert len(str(error.value)) < 1000
    assert fingerprint(conn) == before


# ---------------------------------------------------------------- generated rows: the checks cover Postgres

FIELD = st.one_of(
    st.integers(min_value=-(2**64), max_value=2**64).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["", "CC0 1.0", "CC BY 4.0", "nan", "1e5", "0x10", "1_0", " 7", "२०२०", "'", "\\N"]),
    st.text(alphabet=st.characters(codec="utf-8", exclude_characters=",\n"), max_size=12),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fields=st.tuples(FIELD, FIELD, FIELD))
def test_a_delivery_row_either_is_refused_at_its_line_or_loads(good, tmp_path, fields):
    """Whatever read_delivery accepts, PostgreSQL accepts too: no bad row gets as far as COPY."""
    conn, good_folder = good
    path = tmp_path / "2026-11-09.csv"
    path.write_bytes(("id,year,license\n" + ",".join(fields) + "\n").encode("utf-8"))
    try:
        checked = read_delivery(path)
    except InputError as error:
        assert error.where.startswith(("line 2", "line 1")) and error.path == str(path)
        return
    with conn.transaction(force_rollback=True):
        devil.refresh_devil_snapshot(conn, delivery=checked, rules=devil.SnapshotRules(), run_id="hypothesis")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    fields=st.tuples(
        FIELD, st.one_of(st.just(DEVIL), FIELD), FIELD, FIELD, FIELD, st.one_of(st.just("CC0 1.0"), FIELD)
    )
)
def test_a_batch_row_either_is_refused_at_its_line_or_applies(good, tmp_path, fields):
    """Whatever read_batch accepts, the upsert accepts too."""
    conn, _ = good
    path = tmp_path / f"{BATCH_DAY}.csv"
    path.write_bytes(("id,species,year,longitude,latitude,license\n" + ",".join(fields) + "\n").encode())
    try:
        checked = read_batch(path)
    except InputError as error:
        assert error.where.startswith(("line 2", "line 1")) and error.path == str(path)
        return
    with conn.transaction(force_rollback=True):
        apply_batch(conn, checked)
