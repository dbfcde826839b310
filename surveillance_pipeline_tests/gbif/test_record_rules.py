"""One record rule, every reader, table-driven.

The same text in a gbifID, a year or a coordinate gets the same verdict from every reader of records: the
columnar download reader, the row download reader, the batch feed and the delivery reader (which has no
coordinates). The same file name gets the same verdict as a day file from the one rule in
``core.day_files``, the batch feed, ``make run`` and the batches sensor. A refusal names the file, the line
and the field, each reader in its own words.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import dagster as dg
import pytest

from surveillance_pipeline.commands.run import batch_days_present
from surveillance_pipeline.core.day_files import is_day_file_name
from surveillance_pipeline.core.errors import InputError
from surveillance_pipeline.core.keys import sha256_file
from surveillance_pipeline.definitions import assemble
from surveillance_pipeline.gbif.download_columns import ColumnarUnavailable, read_column_batches
from surveillance_pipeline.gbif.downloads import describe_download, read_records
from surveillance_pipeline.gbif.licenses import LICENSES
from surveillance_pipeline.gbif.registry import partition_keys
from surveillance_pipeline.gbif.rules import MAX_GBIF_ID
from surveillance_pipeline.ledger.feed import BATCH_HEADER, read_batch
from surveillance_pipeline.ledger.sensors import batches_sensor
from surveillance_pipeline.snapshots.deliveries import DELIVERY_HEADER, read_delivery
from surveillance_pipeline_tests.support.pipeline import resources

ACCEPTED = "accepted"
REFUSED = "refused"

# What float(), int() or date.fromisoformat() take and the rules do not, and a few the rules take.
NOT_A_NUMBER = (
    "1_0",
    " 1",
    "1 ",
    " ",
    "nan",
    "NaN",
    "inf",
    "-Infinity",
    "1e400",
    "1e-400",
    "0x10",
    "+1",
    "1.",
    ".5",
    "١٢",  # Arabic-Indic digits: float() and int() read 12
    "1" * 20,
)
GBIF_IDS = {
    **dict.fromkeys(NOT_A_NUMBER, REFUSED),
    "": REFUSED,
    "0": REFUSED,
    "-1": REFUSED,
    "5001": ACCEPTED,
    str(MAX_GBIF_ID): ACCEPTED,
    str(MAX_GBIF_ID + 1): REFUSED,
}
YEARS = {
    **dict.fromkeys(NOT_A_NUMBER, REFUSED),
    "": ACCEPTED,
    "2001": ACCEPTED,
    "-5": REFUSED,
    "12345": REFUSED,
    "2001.0": REFUSED,
}
# One coordinate's text, the other one valid. GBIF writes Java doubles: "-41.5", "147.123456", "1.0E-4".
COORDINATES = {
    **dict.fromkeys(NOT_A_NUMBER, REFUSED),
    "": REFUSED,  # one coordinate without the other
    "-41.5": ACCEPTED,
    "45.123456": ACCEPTED,
    "0": ACCEPTED,
    "-0.0": ACCEPTED,
    "1.0E-4": ACCEPTED,
    "4.5e1": ACCEPTED,
    "-90": ACCEPTED,
    "181": REFUSED,
    "1e-99": ACCEPTED,
    "1e-100": REFUSED,  # three exponent digits: the rule stops at two
}
CASES = [
    *((field, value, verdict) for value, verdict in GBIF_IDS.items() for field in ("gbifID",)),
    *(("year", value, verdict) for value, verdict in YEARS.items()),
    *(
        (field, value, verdict)
        for value, verdict in COORDINATES.items()
        for field in ("decimalLatitude", "decimalLongitude")
    ),
]
GOOD = {"gbifID": "5001", "year": "2001", "decimalLatitude": "-42.7", "decimalLongitude": "147.3"}
# Each reader's name for the field.
FEED_FIELDS = {"gbifID": "id", "year": "year", "decimalLatitude": "latitude", "decimalLongitude": "longitude"}
DELIVERY_FIELDS = {"gbifID": "id", "year": "year"}


# ---------------------------------------------------------------- the readers, one record each

# GBIF's own layout: tab-separated, unquoted UTF-8, which the columnar reader takes.
META_XML = """<archive xmlns="http://rs.tdwg.org/dwc/text/" metadata="metadata.xml">
  <core encoding="UTF-8" fieldsTerminatedBy="\\t" linesTerminatedBy="\\n" fieldsEnclosedBy=""
        ignoreHeaderLines="1" rowType="http://rs.tdwg.org/dwc/terms/Occurrence">
    <files><location>occurrence.txt</location></files>
    <id index="0"/>
    <field index="0" term="http://rs.gbif.org/terms/1.0/gbifID"/>
    <field index="1" term="http://rs.tdwg.org/dwc/terms/species"/>
    <field index="2" term="http://rs.tdwg.org/dwc/terms/year"/>
    <field index="3" term="http://rs.tdwg.org/dwc/terms/decimalLatitude"/>
    <field index="4" term="http://rs.tdwg.org/dwc/terms/decimalLongitude"/>
  </core>
</archive>
"""
METADATA_XML = """<eml:eml xmlns:eml="eml://ecoinformatics.org/eml-2.1.1"><dataset>
<alternateIdentifier>0001234-261129000000000</alternateIdentifier></dataset></eml:eml>
"""


def record_values(field: str, value: str) -> dict[str, str]:
    return {**GOOD, field: value}


def write_download(folder: Path, values: dict[str, str]) -> Path:
    path = folder / "0001234-261129000000000.zip"
    row = [values["gbifID"], "Sarcophilus harrisii", values["year"], values["decimalLatitude"]]
    row.append(values["decimalLongitude"])
    text = "gbifID\tspecies\tyear\tdecimalLatitude\tdecimalLongitude\n" + "\t".join(row) + "\n"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("meta.xml", META_XML)
        archive.writestr("metadata.xml", METADATA_XML)
        archive.writestr("occurrence.txt", text.encode("utf-8"))
    return path


def columnar_verdict(path: Path, field: str) -> str:
    """The columnar reader refuses by handing the download to the row reader, which names the value."""
    try:
        list(read_column_batches(describe_download(path)))
    except ColumnarUnavailable:
        return REFUSED
    return ACCEPTED


def refusal(call, path: Path, where: str, field: str | None) -> str:
    """REFUSED when ``call`` raises an InputError naming ``path``, ``where`` and ``field``."""
    try:
        call()
    except InputError as error:
        assert (error.path, error.where, error.field) == (str(path), where, field), error
        assert str(path) in str(error) and where in str(error)
        return REFUSED
    return ACCEPTED


def row_verdict(path: Path, field: str) -> str:
    return refusal(lambda: list(read_records(describe_download(path))), path, "occurrence.txt line 2", field)


def feed_verdict(folder: Path, values: dict[str, str], field: str) -> str:
    path = folder / "2026-10-02.csv"
    row = [values["gbifID"], partition_keys()[0], values["year"]]
    row += [values["decimalLongitude"], values["decimalLatitude"], LICENSES[0]]
    path.write_text(f"{BATCH_HEADER}\n{','.join(row)}\n", encoding="utf-8")
    return refusal(lambda: read_batch(path), path, "line 2", FEED_FIELDS[field])


def delivery_verdict(folder: Path, values: dict[str, str], field: str) -> str:
    path = folder / "2026-11-02.csv"
    path.write_text(
        f"{DELIVERY_HEADER}\n{values['gbifID']},{values['year']},{LICENSES[0]}\n", encoding="utf-8"
    )
    return refusal(lambda: read_delivery(path), path, "line 2", DELIVERY_FIELDS[field])


def verdicts(folder: Path, field: str, value: str) -> dict[str, str]:
    values = record_values(field, value)
    download = write_download(folder, values)
    found = {
        "columnar download reader": columnar_verdict(download, field),
        "row download reader": row_verdict(download, field),
        "batch feed": feed_verdict(folder, values, field),
    }
    if field in DELIVERY_FIELDS:
        found["delivery reader"] = delivery_verdict(folder, values, field)
    return found


@pytest.mark.parametrize(("field", "value", "verdict"), CASES, ids=[f"{f}={v!r}" for f, v, _ in CASES])
def test_every_reader_gives_a_value_the_same_verdict(tmp_path, field, value, verdict):
    found = verdicts(tmp_path, field, value)
    assert found == dict.fromkeys(found, verdict)


def test_the_good_record_reads_the_same_through_both_download_readers(tmp_path):
    download = write_download(tmp_path, GOOD)
    [batch] = list(read_column_batches(describe_download(download)))
    [record] = list(read_records(describe_download(download)))
    assert batch.lines.to_pylist() == [record.text]


def test_a_download_leaves_the_year_range_to_derive(tmp_path):
    """The one deliberate difference: a year of four digits outside 1600..2100 is refused by derive, for
    the species holding it, not by the download readers for the whole download (GBIF's years start at
    1500). The batch feed and the delivery reader have no later step, and refuse it."""
    found = verdicts(tmp_path, "year", "1599")
    assert found == {
        "columnar download reader": ACCEPTED,
        "row download reader": ACCEPTED,
        "batch feed": REFUSED,
        "delivery reader": REFUSED,
    }


# ---------------------------------------------------------------- day files

DAY_FILE_NAMES = {
    "2026-11-02.csv": ACCEPTED,
    "2024-02-29.csv": ACCEPTED,
    "20261102.csv": REFUSED,  # date.fromisoformat reads it on Python 3.11
    "2026-W44-1.csv": REFUSED,  # an ISO week date, ten characters long
    "2026-13-01.csv": REFUSED,
    "2026-02-30.csv": REFUSED,
    "2025-02-29.csv": REFUSED,
    "2026-11-2.csv": REFUSED,
    "٢٠٢٦-١١-٠٢.csv": REFUSED,
    " 2026-11-02.csv": REFUSED,
    "2026-11-02 .csv": REFUSED,
    "2026-11-02.csv.csv": REFUSED,
    "2026-11-02.txt": REFUSED,
    "2026-11-02.CSV": REFUSED,
    "0000-01-01.csv": REFUSED,
}


def write_batches(folder: Path, names: list[str]) -> dict[str, Path]:
    """A valid batch under each name, each with its own gbifID (so its own sha256)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name in names:
        line = (
            f"{5001 + list(DAY_FILE_NAMES).index(name)},{partition_keys()[0]},2001,147.3,-42.7,{LICENSES[0]}"
        )
        paths[name] = folder / name
        paths[name].write_text(f"{BATCH_HEADER}\n{line}\n", encoding="utf-8")
    return paths


def batch_file_verdict(path: Path) -> str:
    return refusal(lambda: read_batch(path), path, "file name", None)


@pytest.mark.parametrize(("name", "verdict"), DAY_FILE_NAMES.items(), ids=list(DAY_FILE_NAMES))
def test_a_day_file_name_gets_the_same_verdict_from_the_rule_the_feed_and_make_run(tmp_path, name, verdict):
    [path] = write_batches(tmp_path / "batches", [name]).values()
    found = {
        "is_day_file_name": ACCEPTED if is_day_file_name(name) else REFUSED,
        "batch feed": batch_file_verdict(path),
        "make run": ACCEPTED if Path(name).stem in batch_days_present(tmp_path) else REFUSED,
    }
    assert found == dict.fromkeys(found, verdict)


@pytest.mark.db
def test_the_batches_sensor_takes_exactly_the_day_file_names(db, database_url, data_dir):
    paths = write_batches(data_dir / "batches", list(DAY_FILE_NAMES))
    definitions = assemble(resources(database_url, data_dir))
    with dg.instance_for_test() as instance:
        context = dg.build_sensor_context(
            instance=instance,
            instance_ref=instance.get_ref(),
            definitions=definitions,
            resources=definitions.resources,
        )
        result = batches_sensor.evaluate_tick(context)
    # The run key is the day and the file's sha256: which file each request is for.
    requested = {request.run_key for request in result.run_requests}
    found = {
        name: ACCEPTED if f"{path.stem}|{sha256_file(path)}" in requested else REFUSED
        for name, path in paths.items()
    }
    assert found == DAY_FILE_NAMES
    assert len(requested) == list(DAY_FILE_NAMES.values()).count(ACCEPTED)
