"""GBIF downloads at real scale: streamed, indexed once per version, and correct on what real downloads hold.

Every download here is generated in the test (a user's clone has no big files): GBIF-shaped DwC-A zips
with GBIF's keys, EML metadata of the 2014 and the 2020 shapes, and as many records as a case needs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import dagster as dg
import pytest

from surveillance_pipeline.core.errors import InputError, StaleInputError
from surveillance_pipeline.definitions import assemble
from surveillance_pipeline.gbif import download_index
from surveillance_pipeline.gbif.download_columns import ColumnarUnavailable, read_column_batches
from surveillance_pipeline.gbif.download_index import ensure_index, load_index, open_downloads
from surveillance_pipeline.gbif.downloads import describe_download, read_records
from surveillance_pipeline.gbif.ingest import ingest_species_from_downloads
from surveillance_pipeline.gbif.raw_snapshots import read_raw_snapshot
from surveillance_pipeline.gbif.records import (
    DECIMAL_TERMS,
    INTEGER_TERMS,
    RECORD_COLUMNS,
    TEXT_TERMS,
    RecordsWriter,
    iter_record_lines,
    iter_records_without_coordinates,
    record_from_fields,
)
from surveillance_pipeline.gbif.registry import species_by_slug
from surveillance_pipeline.lab.resources import LabGbifSource
from surveillance_pipeline.occurrences.derive import derive_to_file
from surveillance_pipeline.orchestration.resources import GbifSource
from surveillance_pipeline_tests.support.pipeline import DEVIL, SPINE, metadata, resources

DEVIL_SPECIES = species_by_slug(DEVIL)
TERMS = (
    "gbifID",
    "species",
    "taxonKey",
    "countryCode",
    "stateProvince",
    "decimalLatitude",
    "decimalLongitude",
    "year",
    "license",
    "issue",
    "occurrenceStatus",
)
CC_BY = "http://creativecommons.org/licenses/by/4.0/legalcode"
TERM_URIS = {
    "gbifID": "http://rs.gbif.org/terms/1.0/gbifID",
    "taxonKey": "http://rs.gbif.org/terms/1.0/taxonKey",
    "license": "http://purl.org/dc/terms/license",
    "issue": "http://rs.gbif.org/terms/1.0/issue",
}


def meta_xml(terms: tuple[str, ...]) -> str:
    fields = "\n".join(
        f'    <field index="{i}" term="{TERM_URIS.get(t, "http://rs.tdwg.org/dwc/terms/" + t)}"/>'
        for i, t in enumerate(terms)
    )
    return (
        '<archive xmlns="http://rs.tdwg.org/dwc/text/" metadata="metadata.xml">\n'
        '  <core encoding="UTF-8" fieldsTerminatedBy="\\t" linesTerminatedBy="\\n" fieldsEnclosedBy=""'
        ' ignoreHeaderLines="1" rowType="http://rs.tdwg.org/dwc/terms/Occurrence">\n'
        "    <files><location>occurrence.txt</location></files>\n"
        '    <id index="0"/>\n'
        f"{fields}\n  </core>\n</archive>\n"
    )


def metadata_2020(key: str, doi: str) -> str:
    """GBIF's EML of 2020: the key in alternateIdentifier, the DOI in packageId and the citation, and an
    abstract with no <br/> before the list of constituent datasets."""
    return textwrap.dedent(
        f"""\
        <eml:eml xmlns:eml="eml://ecoinformatics.org/eml-2.1.1" packageId="{doi}" system="http://gbif.org">
        <dataset><alternateIdentifier>{key}</alternateIdentifier>
        <title>GBIF Occurrence Download {key}</title>
        <abstract><para>A dataset containing all occurrences available in GBIF matching the query: \
        {{"TaxonKey":"5219404"}} The dataset includes records from the following constituent datasets. \
        The full metadata for each constituent is also included in this archive: 7 records from Atlas.</para>
        </abstract></dataset>
        <additionalMetadata><metadata><gbif>
        <citation identifier="https://doi.org/{doi}">GBIF.org GBIF Occurrence Download {doi}</citation>
        </gbif></metadata></additionalMetadata></eml:eml>
        """
    )


def devil_row(gbif_id: int, year: int | str = 2001, latitude: str = "-42.5", status: str = "PRESENT") -> str:
    return (
        f"{gbif_id}\tSarcophilus harrisii\t{DEVIL_SPECIES.taxon_key or ''}\tAU\tTasmania\t{latitude}\t147.1\t"
        f"{year}\t{CC_BY}\t\t{status}\n"
    )


# Every member's time in the zip: the same rows make the same bytes, whenever the test writes them (the
# clock's time differed between two zips written in different two-second windows, and so did their bytes).
MEMBER_TIME = (2026, 11, 30, 12, 0, 0)


def _member(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=MEMBER_TIME)
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


def write_download(path: Path, rows, metadata: str | None = None, terms: tuple[str, ...] = TERMS) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(_member("meta.xml"), meta_xml(terms))
        if metadata is not None:
            archive.writestr(_member("metadata.xml"), metadata)
        with archive.open(_member("occurrence.txt"), "w", force_zip64=True) as member:
            member.write(("\t".join(terms) + "\n").encode())
            for row in rows:
                member.write(row.encode())
    return path


def test_the_2020_metadata_gives_the_doi_and_a_query_cut_before_the_datasets(tmp_path):
    path = write_download(
        tmp_path / "0022697-200613084148143.zip",
        [devil_row(1)],
        metadata_2020("0022697-200613084148143", "10.15468/dl.abcd12"),
    )
    download = describe_download(path)
    assert (download.key, download.doi) == ("0022697-200613084148143", "10.15468/dl.abcd12")
    assert download.query == '{"TaxonKey":"5219404"}'
    assert download.created == "2020-06-13T08:41:48Z"


def test_a_record_in_two_downloads_is_taken_from_the_newer_by_creation_time(tmp_path):
    # Sorted as strings, 0009886-… (2025) comes before 0022697-… (2020): the older reading would win.
    older = write_download(
        tmp_path / "0022697-200613084148143.zip",
        [devil_row(7, year=1999), devil_row(8)],
        metadata_2020("0022697-200613084148143", "10.15468/dl.old"),
    )
    newer = write_download(tmp_path / "0009886-250127130748423.zip", [devil_row(7, year=2024)])
    indexes = [
        ensure_index(describe_download(p), tmp_path / "index", [DEVIL_SPECIES]) for p in (newer, older)
    ]
    raw = tmp_path / "raw" / f"{DEVIL}.json"
    outcome = ingest_species_from_downloads(indexes, DEVIL_SPECIES, raw)
    assert outcome is not None and outcome.records == 2
    snapshot = read_raw_snapshot(raw)
    years = {record["key"]: record["year"] for record in snapshot.iter_records(raw)}
    assert years == {7: 2024, 8: 2001}
    # The newest download's creation time, whatever order the folder lists them in.
    assert snapshot.retrieved == "2025-01-27T13:07:48Z"
    assert [d["key"] for d in snapshot.request["downloads"]] == [
        "0022697-200613084148143",
        "0009886-250127130748423",
    ]


def test_the_same_downloads_give_the_same_raw_bytes_in_two_fresh_folders(tmp_path):
    # A zip whose name holds no key: its time comes from the zip itself, never from the clock.
    rows = [devil_row(i) for i in range(1, 50)]
    digests = []
    for name in ("first", "second"):
        folder = tmp_path / name
        zip_path = write_download(folder / "downloads" / "my-devils.zip", rows)
        os.utime(zip_path, (1_000_000_000 + len(digests), 1_000_000_000 + len(digests)))
        [index] = open_downloads(folder / "downloads", folder / "index", [DEVIL_SPECIES], build=True).indexes
        assert index is not None
        raw = folder / "raw" / f"{DEVIL}.json"
        ingest_species_from_downloads([index], DEVIL_SPECIES, raw)
        digests.append((raw.read_bytes(), raw.with_name(f"{DEVIL}.records.tsv.gz").read_bytes()))
    assert digests[0] == digests[1]


def test_a_corrupt_member_is_an_input_error_naming_zip_member_and_line(tmp_path):
    path = write_download(tmp_path / "0001111-261129000000000.zip", [devil_row(i) for i in range(1, 20_000)])
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("occurrence.txt")
    data = bytearray(path.read_bytes())
    # Bad deflate data in the middle of the member; the directory stays intact.
    middle = info.header_offset + 30 + len(info.filename) + info.compress_size // 2
    data[middle : middle + 64] = bytes(64)
    path.write_bytes(bytes(data))
    with pytest.raises(InputError) as caught:
        ensure_index(describe_download(path), tmp_path / "index", [DEVIL_SPECIES])
    assert caught.value.path == str(path)
    assert caught.value.where.startswith("occurrence.txt line ")
    assert not (tmp_path / "index" / describe_download(path).sha256).exists() or not any(
        (tmp_path / "index").rglob("index.json")
    )


@pytest.mark.parametrize("reader", ["columnar", "rows"])
def test_absent_records_reach_no_species_as_search_would_leave_them_out(tmp_path, monkeypatch, reader):
    if reader == "rows":
        monkeypatch.setattr(download_index, "read_column_batches", _rows_only)
    rows = [
        devil_row(1),
        devil_row(2, status="ABSENT"),
        devil_row(3, status="absent"),
        devil_row(4, status=""),
    ]
    path = write_download(tmp_path / "0001111-261129000000000.zip", rows)
    index = ensure_index(describe_download(path), tmp_path / "index", [DEVIL_SPECIES])
    raw = tmp_path / "raw" / f"{DEVIL}.json"
    ingest_species_from_downloads([index], DEVIL_SPECIES, raw)
    assert [r["key"] for r in read_raw_snapshot(raw).iter_records(raw)] == [1, 4]
    assert index.counts["records"] == 4


def _rows_only(info):
    raise ColumnarUnavailable("forced: read row by row")


# What these lines' records file has always been, byte for byte (once written through a TextIOWrapper,
# whose close flushed the gzip stream): raw snapshots name their records files by sha256, so other bytes
# for the same lines would give every species of every warehouse a new key, and a reload.
RECORDS_FILE_LINES = [f"{key}\tHUMAN_OBSERVATION\tAU\tline {key}\n" for key in (5001, 5002, 123456789)]
RECORDS_FILE_SHA256 = "44c6d49f95fd958316048240c25365688b71b80c37bf6ec614f96ceb2d02d75d"


def test_a_records_file_has_the_same_bytes_written_by_lines_or_by_blocks(tmp_path):
    with RecordsWriter(tmp_path / "by-lines.tsv.gz") as writer:
        writer.write_lines(RECORDS_FILE_LINES)
        by_lines = writer.commit()
    with RecordsWriter(tmp_path / "by-blocks.tsv.gz") as writer:
        writer.write_block("".join(RECORDS_FILE_LINES[:2]).encode("utf-8"), 2)
        writer.write_block(memoryview(RECORDS_FILE_LINES[2].encode("utf-8")), 1)
        by_blocks = writer.commit()
        assert writer.rows == 3
    assert by_lines == by_blocks == RECORDS_FILE_SHA256


def test_the_records_without_coordinates_are_those_a_line_by_line_reading_finds(tmp_path):
    """Found by a pattern over blocks of the inflated file: lines across blocks, empty fields beside the
    coordinates, one coordinate of the two, and a last line without its newline."""
    latitude, longitude = RECORD_COLUMNS.index("decimalLatitude"), RECORD_COLUMNS.index("decimalLongitude")
    chosen = random.Random(20261207)
    # Each column's values, empty ones often: text with an escaped tab, whole numbers, decimals.
    values = {name: ["", "a\\tb é"] for name in TEXT_TERMS}
    values.update({name: ["", "7"] for name in INTEGER_TERMS})
    values.update({name: ["", "", "-41.5"] for name in ("decimalLatitude", "decimalLongitude")})
    values.update({name: ["", "0.01"] for name in DECIMAL_TERMS})
    values["issues"] = ["", "ZERO_COORDINATE;COUNTRY_COORDINATE_MISMATCH"]
    lines = [
        "\t".join([str(key)] + [chosen.choice(values[name]) for name in RECORD_COLUMNS[1:]]) + "\n"
        for key in range(1, 40_001)
    ]
    lines[-1] = lines[-1].rstrip("\n")
    path = tmp_path / "part.tsv.gz"
    with RecordsWriter(path) as writer:
        writer.write_lines(lines)
        sha256 = writer.commit()
    assert path.stat().st_size > 0 and sum(map(len, lines)) > 2 * (1 << 20)  # several of its blocks

    expected = []
    for line in iter_record_lines(path, sha256):
        fields = line.split("\t")
        if not fields[latitude] and not fields[longitude]:
            expected.append(record_from_fields(fields))
    found = list(iter_records_without_coordinates(path, sha256))
    assert found == expected
    assert 10_000 < len(found) < 30_000  # four in nine: the test sees both kinds of line
    with pytest.raises(StaleInputError):
        list(iter_records_without_coordinates(path, "0" * 64))
    # A line the pattern finds that is not a record: named with its file and line.
    broken = lines[:5] + ["not-a-key" + "\t" * (len(RECORD_COLUMNS) - 1) + "\n"]
    path = tmp_path / "broken.tsv.gz"
    with RecordsWriter(path) as writer:
        writer.write_lines(broken)
        writer.commit()
    with pytest.raises(InputError) as caught:
        list(iter_records_without_coordinates(path))
    assert (caught.value.path, caught.value.where) == (str(path), "line 6")


# Damage near the start breaks the deflate stream itself (zlib's "invalid distance"); in the middle, the
# stream still inflates and its CRC fails.
@pytest.mark.parametrize("damage_at", [0.0, 0.5])
def test_a_records_file_reads_back_its_lines_and_a_damaged_one_is_an_input_error_naming_it(
    tmp_path, damage_at
):
    lines = [f"{key}\tHUMAN_OBSERVATION\tAU\tline {key} {'x' * (key % 97)}\n" for key in range(1, 30_000)]
    path = tmp_path / "part.tsv.gz"
    with RecordsWriter(path) as writer:
        writer.write_lines(lines)
        sha256 = writer.commit()
    assert [line + "\n" for line in iter_record_lines(path, sha256)] == lines
    data = bytearray(path.read_bytes())
    at = max(100, int(len(data) * damage_at))
    data[at : at + 64] = bytes(64)
    damaged = tmp_path / "damaged.tsv.gz"
    damaged.write_bytes(bytes(data))
    for read in (iter_record_lines, iter_records_without_coordinates):
        with pytest.raises(InputError) as caught:
            list(read(damaged))
        assert caught.value.path == str(damaged)
        assert "not a readable records file" in str(caught.value)


@pytest.mark.parametrize(("sort_bytes", "sample_every"), [(200, 1), (200, 32), (600, 2)])
def test_a_part_sorts_by_id_alike_in_memory_and_split_by_id_ranges(
    tmp_path, monkeypatch, sort_bytes, sample_every
):
    # Ids of different lengths, shuffled: a part is sorted by the number, never by the text ("9" after
    # "10"), whether the spill is sorted at once or split into files by id range, each sorted alone (a
    # few lines a range; ranges split again, and ranges the sample could not cut).
    ids = [9, 10, 99, 100, 5001, 123456789, 1000000000, 4999999999, 7, 70, 700, 123456789012345678]
    shuffled = [ids[(i * 5) % len(ids)] for i in range(len(ids))]
    assert sorted(shuffled) == sorted(ids) and shuffled != sorted(ids)
    path = write_download(tmp_path / "0001113-261129000000000.zip", [devil_row(i) for i in shuffled])
    at_once = ensure_index(describe_download(path), tmp_path / "at-once", [DEVIL_SPECIES])
    monkeypatch.setattr(download_index, "SORT_BYTES", sort_bytes)
    monkeypatch.setattr(download_index, "ID_SAMPLE_EVERY", sample_every)
    in_ranges = ensure_index(describe_download(path), tmp_path / "in-ranges", [DEVIL_SPECIES])
    assert at_once.parts[DEVIL].sha256 == in_ranges.parts[DEVIL].sha256
    lines = list(iter_record_lines(at_once.parts[DEVIL].path, at_once.parts[DEVIL].sha256))
    assert [int(line.split("\t", 1)[0]) for line in lines] == sorted(ids)
    assert not list((tmp_path / "in-ranges").rglob(".ranges"))  # the range files were scratch


@pytest.mark.parametrize(("sort_bytes", "sample_every"), [(4096, 32), (4096, 400), (65536, 1)])
def test_a_long_spill_split_by_id_ranges_gives_every_line_once_in_a_stable_sort(
    tmp_path, monkeypatch, sort_bytes, sample_every
):
    # 4,000 lines (170 KB) with ids of 1 to 18 digits, some repeated (their lines then keep the spill's
    # order), sorted a few KB at a time: ranges cut from samples of every size, some split again.
    generator = random.Random(27)
    ids = [generator.randrange(10 ** generator.randint(1, 18)) for _ in range(3_900)]
    ids += generator.sample(ids, 100)
    lines = [
        f"{gbif_id}\tline {number}\t{'x' * generator.randint(0, 40)}\n" for number, gbif_id in enumerate(ids)
    ]
    spill = tmp_path / "species.tsv"
    spill.write_text("".join(lines), encoding="utf-8")
    monkeypatch.setattr(download_index, "SORT_BYTES", sort_bytes)
    monkeypatch.setattr(download_index, "ID_SAMPLE_EVERY", sample_every)
    blocks = list(download_index._sorted_blocks(spill, tmp_path / ".ranges"))
    assert b"".join(bytes(block) for block, _ in blocks).decode("utf-8") == "".join(
        sorted(lines, key=lambda line: int(line.split("\t", 1)[0]))
    )
    assert sum(count for _, count in blocks) == len(lines)
    assert len(blocks) > 1  # split by range (in memory it would be one block)
    assert not list((tmp_path / ".ranges").iterdir())


def test_both_readers_escape_a_backslash_alike_and_refuse_a_nul_byte(tmp_path, monkeypatch):
    # The columnar reader looks for both in the joined lines, not column by column: a backslash in text
    # must still be escaped as the row reader escapes it, and a NUL byte still sends the download to the
    # row reader, which names its line.
    backslash = devil_row(2).replace(f"{CC_BY}\t\t", f"{CC_BY}\tA\\B;ZERO_COORDINATE\t")
    path = write_download(tmp_path / "0001111-261129000000000.zip", [devil_row(1), backslash])
    columnar = ensure_index(describe_download(path), tmp_path / "columnar", [DEVIL_SPECIES])
    with monkeypatch.context() as forced:
        forced.setattr(download_index, "read_column_batches", _rows_only)
        by_rows = ensure_index(describe_download(path), tmp_path / "rows", [DEVIL_SPECIES])
    assert columnar.parts[DEVIL].sha256 == by_rows.parts[DEVIL].sha256
    lines = list(iter_record_lines(columnar.parts[DEVIL].path))
    assert len(lines) == 2 and lines[1].endswith("\tA\\\\B;ZERO_COORDINATE"), lines
    assert columnar.counts["zero_coordinates"] == 1

    nul = devil_row(3).replace(f"{CC_BY}\t\t", f"{CC_BY}\tA\x00B\t")
    path = write_download(tmp_path / "0001112-261129000000000.zip", [devil_row(1), nul])
    with pytest.raises(ColumnarUnavailable):
        list(read_column_batches(describe_download(path)))
    with pytest.raises(InputError) as refused:
        ensure_index(describe_download(path), tmp_path / "nul", [DEVIL_SPECIES])
    assert (refused.value.path, refused.value.where) == (str(path), "occurrence.txt line 3")


# The quality terms a records file keeps, after the columns of TERMS (and the two taxon keys TERMS lacks).
QUALITY = (
    "establishmentMeans",
    "institutionCode",
    "individualCount",
    "coordinateUncertaintyInMeters",
    "coordinatePrecision",
)
QUALITY_TERMS = (*TERMS, "speciesKey", "acceptedTaxonKey", *QUALITY)


def quality_row(
    gbif_id: int,
    latitude: str = "-42.5",
    species_key: str = "",
    accepted_key: str = "",
    **quality: str,
) -> str:
    """A devil_row with the columns QUALITY_TERMS adds; ``quality``: their values by term (else empty)."""
    added = [species_key, accepted_key, *(quality.pop(term, "") for term in QUALITY)]
    assert not quality, quality
    return devil_row(gbif_id, latitude=latitude).rstrip("\n") + "\t" + "\t".join(added) + "\n"


def _lines_by_reader(path: Path) -> tuple[dict[int, str], dict[int, str]]:
    """Every records-file line of the download by gbifID, from the row reader and from the columnar one
    (which must take the file: it raises ColumnarUnavailable otherwise)."""
    info = describe_download(path)
    rows = {record.key: record.text for record in read_records(info)}
    columns: dict[int, str] = {}
    for batch in read_column_batches(info):
        columns.update(zip(batch.keys.to_pylist(), batch.lines.to_pylist(), strict=True))
    return rows, columns


def _quality(line: str) -> dict[str, object]:
    record = record_from_fields(line.rstrip("\n").split("\t"))
    return {term: record[term] for term in QUALITY if term in record}


def test_both_readers_write_the_quality_terms_alike_and_decimals_in_their_shortest_form(
    tmp_path, monkeypatch
):
    """Long because each row is one way a download writes a number (canonical, padded, Java's 1.0E-4,
    a leading zero), and the values both readers must agree on are spelled out beside it."""
    rows = [
        quality_row(
            1,
            establishmentMeans="INTRODUCED",
            institutionCode="TMAG",
            individualCount="3",
            coordinateUncertaintyInMeters="30.0",
            coordinatePrecision="0.0001",
        ),
        # Trimmed like text; Java's notation of a small double.
        quality_row(
            2,
            establishmentMeans=" NATIVE ",
            institutionCode=" UTAS",
            individualCount=" 12 ",
            coordinateUncertaintyInMeters=" 7071.07 ",
            coordinatePrecision="1.0E-4",
        ),
        # Written as int() and repr(float()) write them: leading zeros, whole numbers, a trailing zero.
        quality_row(
            3,
            latitude="-42",
            species_key="007",
            accepted_key="-0",
            individualCount="007",
            coordinateUncertaintyInMeters="30",
            coordinatePrecision="1",
        ),
        quality_row(
            4,
            latitude="-42.50",
            individualCount="0",
            coordinateUncertaintyInMeters="1.0E7",
            coordinatePrecision="0.00001",
        ),
        quality_row(5),
    ]
    path = write_download(tmp_path / "0001111-261129000000000.zip", rows, terms=QUALITY_TERMS)
    by_rows, by_columns = _lines_by_reader(path)
    assert by_rows == by_columns
    quality = {key: _quality(line) for key, line in by_rows.items()}
    assert quality == {
        1: {
            "establishmentMeans": "INTRODUCED",
            "institutionCode": "TMAG",
            "individualCount": 3,
            "coordinateUncertaintyInMeters": 30.0,
            "coordinatePrecision": 0.0001,
        },
        2: {
            "establishmentMeans": "NATIVE",
            "institutionCode": "UTAS",
            "individualCount": 12,
            "coordinateUncertaintyInMeters": 7071.07,
            "coordinatePrecision": 0.0001,
        },
        3: {"individualCount": 7, "coordinateUncertaintyInMeters": 30.0, "coordinatePrecision": 1.0},
        4: {"individualCount": 0, "coordinateUncertaintyInMeters": 1e7, "coordinatePrecision": 1e-05},
        5: {},
    }
    fields = {
        key: dict(zip(RECORD_COLUMNS, line.rstrip("\n").split("\t"), strict=True))
        for key, line in by_rows.items()
    }
    assert (fields[2]["coordinatePrecision"], fields[4]["coordinatePrecision"]) == ("0.0001", "1e-05")
    assert fields[4]["coordinateUncertaintyInMeters"] == "10000000.0"
    assert [fields[3][term] for term in ("speciesKey", "acceptedTaxonKey", "decimalLatitude")] == [
        "7",
        "0",
        "-42.0",
    ]
    assert fields[4]["decimalLatitude"] == "-42.5"
    # The species' records file is the same bytes whichever reader built the index.
    columnar = ensure_index(describe_download(path), tmp_path / "columnar", [DEVIL_SPECIES])
    monkeypatch.setattr(download_index, "read_column_batches", _rows_only)
    by_row_reader = ensure_index(describe_download(path), tmp_path / "rows", [DEVIL_SPECIES])
    assert columnar.parts[DEVIL].sha256 == by_row_reader.parts[DEVIL].sha256
    assert columnar.parts[DEVIL].records == 5


def test_a_download_without_the_quality_columns_gives_them_empty(tmp_path):
    path = write_download(tmp_path / "0001111-261129000000000.zip", [devil_row(1), devil_row(2)])
    by_rows, by_columns = _lines_by_reader(path)
    assert by_rows == by_columns
    for line in by_rows.values():
        fields = dict(zip(RECORD_COLUMNS, line.rstrip("\n").split("\t"), strict=True))
        assert [fields[term] for term in (*QUALITY, "speciesKey", "acceptedTaxonKey")] == [""] * 7
        assert _quality(line) == {}


BAD_QUALITY = {
    "count not whole": ({"individualCount": "2.5"}, "individualCount"),
    "count negative": ({"individualCount": "-1"}, "individualCount"),
    "count not a number": ({"individualCount": "several"}, "individualCount"),
    "uncertainty negative": ({"coordinateUncertaintyInMeters": "-30.0"}, "coordinateUncertaintyInMeters"),
    "uncertainty not finite": (
        {"coordinateUncertaintyInMeters": "Infinity"},
        "coordinateUncertaintyInMeters",
    ),
    "precision negative": ({"coordinatePrecision": "-1.0E-4"}, "coordinatePrecision"),
    "precision not a number": ({"coordinatePrecision": "0.1 deg"}, "coordinatePrecision"),
}


@pytest.mark.parametrize("case", sorted(BAD_QUALITY))
def test_a_bad_quality_value_is_refused_by_both_readers_naming_line_and_term(tmp_path, monkeypatch, case):
    # The columnar reader gives such a download to the row reader, which names the line and the term.
    quality, term = BAD_QUALITY[case]
    rows = [quality_row(1, individualCount="2"), quality_row(2, **quality), quality_row(3)]
    path = write_download(tmp_path / "0001111-261129000000000.zip", rows, terms=QUALITY_TERMS)
    with pytest.raises(ColumnarUnavailable, match=term):
        list(read_column_batches(describe_download(path)))
    for reader in ("columnar", "rows"):
        if reader == "rows":
            monkeypatch.setattr(download_index, "read_column_batches", _rows_only)
        with pytest.raises(InputError) as refused:
            ensure_index(describe_download(path), tmp_path / reader, [DEVIL_SPECIES])
        assert (refused.value.path, refused.value.where, refused.value.field) == (
            str(path),
            "occurrence.txt line 3",
            term,
        )
        assert not list((tmp_path / reader).rglob("index.json"))


# Records of the shared downloads, with what their files hold for the quality terms (looked up in the zips'
# own core files). The 2014 DwC-A's interpreted occurrence.txt has no coordinateUncertaintyInMeters or
# coordinatePrecision column (only its verbatim.txt has): those come through empty, as from any download
# that lacks a column; both downloads leave establishmentMeans (and the simple CSV coordinatePrecision)
# empty in every record.
SHARED_QUALITY = {
    "gbif/simplecsv-0009886-delphinium/0009886-250127130748423.zip": {
        883438647: {"institutionCode": "JBB", "individualCount": 957, "coordinateUncertaintyInMeters": 1.0},
        1851364838: {"institutionCode": "LEB", "individualCount": 1, "coordinateUncertaintyInMeters": 7071.0},
        998478875: {"institutionCode": "MAGRAMA", "coordinateUncertaintyInMeters": 7071.0},
    },
    "gbif/dwca-0000066-elevation/0000066-140928181241064.zip": {
        911596181: {"institutionCode": "KU"},
        441881672: {"institutionCode": "UWBM"},
    },
}


@pytest.mark.parametrize("name", sorted(SHARED_QUALITY))
def test_the_shared_downloads_give_the_quality_terms_their_files_hold(shared_data, name):
    by_rows, by_columns = _lines_by_reader(shared_data / name)
    assert by_rows.keys() == by_columns.keys()
    for key, expected in SHARED_QUALITY[name].items():
        assert _quality(by_rows[key]) == _quality(by_columns[key]) == expected, key
    # Every record reads back the same from either reader's line.
    assert {key: record_from_fields(line.rstrip("\n").split("\t")) for key, line in by_rows.items()} == {
        key: record_from_fields(line.rstrip("\n").split("\t")) for key, line in by_columns.items()
    }


def test_an_index_or_a_raw_header_of_the_former_columns_is_built_again_not_misread(tmp_path, monkeypatch):
    former_columns = tuple(
        term for term in RECORD_COLUMNS if term not in (*QUALITY, "establishmentMeans", "institutionCode")
    )
    path = write_download(tmp_path / "0001111-261129000000000.zip", [devil_row(1), devil_row(2)])
    info = describe_download(path)
    with monkeypatch.context() as former:
        former.setattr(download_index, "RECORDS_FORMAT", 1)
        former.setattr(download_index, "RECORD_COLUMNS", former_columns)
        old = ensure_index(info, tmp_path / "index", [DEVIL_SPECIES])
    # Another records format is another index folder: the old one is not loaded, and pruned.
    assert load_index(info, tmp_path / "index", [DEVIL_SPECIES]) is None
    index = ensure_index(info, tmp_path / "index", [DEVIL_SPECIES])
    assert index.folder != old.folder
    download_index.prune_indexes(tmp_path / "index", [info.sha256], [DEVIL_SPECIES])
    assert not old.folder.exists()
    # An index whose document names other columns is not trusted, whatever its folder.
    document_path = index.folder / "index.json"
    document = json.loads(document_path.read_text(encoding="utf-8"))
    document_path.write_text(json.dumps({**document, "columns": list(former_columns)}), encoding="utf-8")
    assert load_index(info, tmp_path / "index", [DEVIL_SPECIES]) is None
    index = ensure_index(info, tmp_path / "index", [DEVIL_SPECIES])
    # A raw snapshot header naming the former columns is refused, and ingest writes it again.
    raw = tmp_path / "raw" / f"{DEVIL}.json"
    ingest_species_from_downloads([index], DEVIL_SPECIES, raw)
    header = json.loads(raw.read_text(encoding="utf-8"))
    raw.write_text(json.dumps({**header, "columns": list(former_columns)}), encoding="utf-8")
    with pytest.raises(InputError, match="not the columns this code writes"):
        read_raw_snapshot(raw)
    outcome = ingest_species_from_downloads([index], DEVIL_SPECIES, raw)
    assert outcome is not None and outcome.written
    assert [record["key"] for record in read_raw_snapshot(raw).iter_records(raw)] == [1, 2]


def test_a_download_is_indexed_once_per_version_and_a_registry_change_makes_a_new_index(tmp_path):
    path = write_download(tmp_path / "0001111-261129000000000.zip", [devil_row(i) for i in range(1, 10)])
    info = describe_download(path)
    first = ensure_index(info, tmp_path / "index", [DEVIL_SPECIES])
    stamp = (first.folder / "index.json").stat().st_mtime_ns
    assert ensure_index(info, tmp_path / "index", [DEVIL_SPECIES]).folder == first.folder
    assert (first.folder / "index.json").stat().st_mtime_ns == stamp
    elsewhere = dataclasses.replace(DEVIL_SPECIES, state_province="Victoria")
    other = ensure_index(info, tmp_path / "index", [elsewhere])
    assert other.folder != first.folder
    # The registry's area means for a download what it means for a search: Victoria holds none of these.
    assert first.part(DEVIL) is not None and first.part(DEVIL).records == 9
    assert other.part(DEVIL) is None


GENERATE = """
import sys, zipfile
path, count = sys.argv[1], int(sys.argv[2])
terms = {terms!r}
filler = ["verbatim%d" % i for i in range(120)]
with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
    archive.writestr("meta.xml", {meta!r})
    with archive.open("occurrence.txt", "w", force_zip64=True) as member:
        member.write(("\\t".join(terms + tuple(filler)) + "\\n").encode())
        tail = "\\t".join("some verbatim text %d" % i for i in range(120)) + "\\n"
        block = []
        for i in range(1, count + 1):
            gbif_id = (i * 7919) % (count * 10) + 1
            place = "AU\\tTasmania\\t-42.%d\\t147.%d" % (i % 997, i % 991)
            fields = (gbif_id, "Sarcophilus harrisii", "{key}", place, 2001, "{cc}", "", "PRESENT", tail)
            block.append("\\t".join(str(field) for field in fields))
            if len(block) == 5000:
                member.write("".join(block).encode()); block = []
        member.write("".join(block).encode())
"""

IMPORT = """
import resource, sys
from pathlib import Path
limit = int(sys.argv[3]) << 20
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
from surveillance_pipeline.gbif.download_index import ensure_index
from surveillance_pipeline.gbif.downloads import describe_download
from surveillance_pipeline.gbif.registry import species_by_slug
devil = species_by_slug("sarcophilus-harrisii")
index = ensure_index(describe_download(Path(sys.argv[1])), Path(sys.argv[2]), [devil])
print(index.counts["records"], index.part("sarcophilus-harrisii").records)
"""
RECORDS = 300_000
# Address space for the whole child, Python and numpy included: the 300k-record member alone is about
# 800 MB of text, so a reader that holds it (as the one before this did: read, then decoded) cannot fit.
ADDRESS_SPACE_MB = 900


def test_a_download_is_indexed_in_bounded_memory(tmp_path):
    zip_path = tmp_path / "0002222-261129000000000.zip"
    columns = TERMS + tuple(f"verbatim{i}" for i in range(120))
    script = GENERATE.format(terms=TERMS, meta=meta_xml(columns), key=DEVIL_SPECIES.taxon_key or "", cc=CC_BY)
    subprocess.run([sys.executable, "-c", script, str(zip_path), str(RECORDS)], check=True)
    with zipfile.ZipFile(zip_path) as archive:
        assert archive.getinfo("occurrence.txt").file_size > 780 << 20
    result = subprocess.run(
        [sys.executable, "-c", IMPORT, str(zip_path), str(tmp_path / "index"), str(ADDRESS_SPACE_MB)],
        capture_output=True,
        text=True,
        # The cap is on address space, and glibc reserves 64 MB of it for each malloc arena it opens for a
        # new thread (up to 8 per core): how many Arrow's reader threads open varies from run to run, and
        # once in three fresh clones that alone passed the cap (MemoryError in the index build). Two
        # arenas make the cap measure the reader's memory, not the thread schedule.
        env={**os.environ, "MALLOC_ARENA_MAX": "2"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == [str(RECORDS), str(RECORDS)]


@pytest.mark.db
@pytest.mark.dagster
def test_species_no_download_holds_come_from_search_and_others_from_the_download(database_url, data_dir):
    """Mixed sources: the devil from a download, the next species from the (lab) search, both loaded."""
    write_download(data_dir / "downloads" / "0001234-261129000000000.zip", [devil_row(i) for i in (5, 6, 7)])
    (data_dir / "downloads" / "README.txt").write_text("my notes\n", encoding="utf-8")
    mixed = {**resources(database_url, data_dir), "gbif": LabGbifSource(source="download", fallback="lab")}
    other = species_by_slug("thylacinus-cynocephalus")
    with dg.instance_for_test() as instance:
        for slug in (DEVIL, other.slug):
            run = dg.materialize(SPINE, instance=instance, partition_key=slug, resources=mixed)
            assert run.success
            raw = json.loads((data_dir / "raw" / f"{slug}.json").read_text())
            if slug == DEVIL:
                assert raw["source"] == "download" and metadata(run, "occurrences")["rows"] == 3
            else:
                assert raw["source"] == "lab" and metadata(run, "occurrences")["rows"] == other.lab_records


@pytest.mark.db
def test_the_sensor_reports_a_bad_zip_once_and_never_parses_a_download(database_url, data_dir):
    definitions = assemble({**resources(database_url, data_dir), "gbif": GbifSource(source="download")})
    sensor = definitions.resolve_sensor_def("downloads_sensor")
    with dg.instance_for_test() as instance:

        def tick(cursor):
            context = dg.build_sensor_context(
                instance=instance, cursor=cursor, resources=definitions.resources
            )
            return sensor.evaluate_tick(context)

        (data_dir / "downloads").mkdir(parents=True)
        (data_dir / "downloads" / "broken.zip").write_bytes(b"not a zip at all")
        (data_dir / "downloads" / "notes.txt").write_text("x", encoding="utf-8")
        first = tick(None)
        assert first.run_requests == [] and "broken.zip" in first.skip_message
        assert "not a zip, not read: notes.txt" in first.skip_message
        # The same bad file again (touched, same bytes): not reported as new, nothing launched.
        os.utime(data_dir / "downloads" / "broken.zip")
        again = tick(first.cursor)
        assert again.run_requests == [] and "not a readable zip" not in again.skip_message
        (data_dir / "downloads" / "broken.zip").unlink()
        write_download(data_dir / "downloads" / "0001234-261129000000000.zip", [devil_row(1)])
        fixed = tick(again.cursor)
        assert len(fixed.run_requests) == 1
        # A tick reads no record: the download is indexed by gbif_raw, not by the sensor.
        assert not (data_dir / "download_index").exists()


SHARED_ZIPS = (
    "gbif/simplecsv-0009886-delphinium/0009886-250127130748423.zip",
    "gbif/dwca-0000066-elevation/0000066-140928181241064.zip",
)
# sha256 over the sorted (species, sha256 of its derived CSV) pairs of every species in the two shared
# downloads, as the reader before streaming derived them (whole-member read, JSON raw snapshots): the
# streamed import must give the same derived files, byte for byte.
DERIVED_BEFORE_STREAMING = "73dd4069ce4e6c7a1cb5e7cd77de9c41ea0a8b65bf84d0a0e23a5a1d7f6fc244"


def _derived_digests(shared_data: Path, work: Path) -> dict[str, str]:
    names = sorted(
        {
            record["species"]
            for name in SHARED_ZIPS
            for record in _every_record(shared_data / name)
            if "species" in record
        }
    )
    registry = [
        dataclasses.replace(
            DEVIL_SPECIES,
            species_id=9000 + i,
            slug=name.lower().replace(" ", "-"),
            scientific_name=name,
            taxon_key=None,
            country="",
            state_province="",
        )
        for i, name in enumerate(names)
    ]
    indexes = [
        ensure_index(describe_download(shared_data / name), work / "index", registry) for name in SHARED_ZIPS
    ]
    digests = {}
    for species in registry:
        raw = work / "raw" / f"{species.slug}.json"
        ingest_species_from_downloads(indexes, species, raw)
        digests[species.scientific_name] = derive_to_file(raw, species, None).sha256
    return digests


def _every_record(path: Path) -> list[dict]:
    return [
        record_from_fields(record.text.rstrip("\n").split("\t"))
        for record in read_records(describe_download(path))
    ]


def test_the_shared_downloads_derive_byte_for_byte_as_before_streaming(shared_data, tmp_path):
    digests = _derived_digests(shared_data, tmp_path)
    assert len(digests) == 129
    combined = hashlib.sha256(json.dumps(sorted(digests.items())).encode()).hexdigest()
    assert combined == DERIVED_BEFORE_STREAMING


def test_the_row_reader_and_the_columnar_reader_derive_the_same_files(shared_data, tmp_path, monkeypatch):
    columnar = _derived_digests(shared_data, tmp_path / "columnar")

    monkeypatch.setattr(download_index, "read_column_batches", _rows_only)
    assert _derived_digests(shared_data, tmp_path / "rows") == columnar
