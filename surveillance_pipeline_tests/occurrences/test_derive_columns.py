"""The columnar derive of a records file writes the row derive's bytes, or gives way to it."""

import pytest

from surveillance_pipeline.core.errors import InputError
from surveillance_pipeline.gbif.raw_snapshots import RawSnapshot, records_path
from surveillance_pipeline.gbif.records import RECORD_COLUMNS, RecordsWriter
from surveillance_pipeline.gbif.registry import DOWNLOAD_ENDPOINT, species_by_slug
from surveillance_pipeline.occurrences import derive, derive_columns

DEVIL = species_by_slug("sarcophilus-harrisii")
CC_BY_URI = "http://creativecommons.org/licenses/by/4.0/legalcode"


def _line(key, *, year="2001", latitude="-41.5", longitude="147.25", license=CC_BY_URI, issues="", **more):
    """A records-file line, its fields given by column name (the columns the derive does not read, like
    the quality terms in ``more``, empty unless given)."""
    fields = dict.fromkeys(RECORD_COLUMNS, "")
    fields.update(
        key=str(key),
        license=license,
        species=DEVIL.scientific_name,
        countryCode=DEVIL.country,
        year=year,
        taxonKey=str(DEVIL.taxon_key or ""),
        decimalLatitude=latitude,
        decimalLongitude=longitude,
        issues=issues,
        **more,
    )
    assert len(fields) == len(RECORD_COLUMNS)
    return "\t".join(fields.values()) + "\n"


def _snapshot(tmp_path, lines):
    header = tmp_path / "raw" / f"{DEVIL.slug}.json"
    records = records_path(header)
    with RecordsWriter(records) as writer:
        writer.write_lines(lines)
        rows = writer.rows
        sha256 = writer.commit()
    area = {"country": DEVIL.country, "stateProvince": DEVIL.state_province}
    request = {"endpoint": DOWNLOAD_ENDPOINT, "downloads": [], "area": area, "taxon": DEVIL.taxon_filter()}
    snapshot = RawSnapshot(request, "2026-01-01T00:00:00Z", "download", [], records.name, sha256, rows)
    header.write_bytes(snapshot.to_bytes())
    return header


def _row_derive(header):
    snapshot = derive.parse_raw_snapshot(header, header.read_bytes())
    counts = derive._empty_counts()
    lines = derive._streamed_lines(snapshot.iter_records(header), DEVIL, header, counts)
    data = b"".join(derive._blocks(lines))
    return data, counts.pop("rows"), counts


ODD = [
    _line(1),
    _line(2, year="", license=""),
    _line(3, latitude="-42", longitude="147"),  # whole numbers: repr writes "-42.0"
    _line(4, latitude="0.00001", longitude="1.0E-4"),  # repr writes "1e-05"
    _line(5, latitude="0", longitude="0.0"),  # 0,0: kept without coordinates
    _line(6, issues="COORDINATE_ROUNDED; ZERO_COORDINATE "),  # flagged: kept without coordinates
    _line(7, issues="ZERO_COORDINATE_NOT_REALLY"),
    _line(8, latitude="", longitude=""),
    _line(9, license="CC_BY_NC_4_0", year="1999"),
    _line(10, latitude="-41.50", longitude="147.123456789012345678"),
    # The quality terms, which the derive does not read, wherever their columns sit.
    _line(
        11,
        establishmentMeans="INTRODUCED",
        institutionCode="TMAG",
        individualCount="3",
        coordinatePrecision="0.0001",
        coordinateUncertaintyInMeters="30.0",
    ),
    _line(12, license="http://creativecommons.org/publicdomain/zero/1.0/"),
]


def test_the_columnar_derive_writes_the_row_derives_bytes_and_counts(tmp_path):
    header = _snapshot(tmp_path, ODD)
    data, rows, counts = _row_derive(header)
    target = tmp_path / "derived.csv"
    streamed = derive.derive_to_file(header, DEVIL, target)
    assert target.read_bytes() == data
    assert (streamed.rows, streamed.counts) == (rows, counts) == (len(ODD), streamed.counts)
    assert counts == {"no_year": 1, "no_coordinates": 1, "zero_coordinates": 2, "no_license": 1}
    # Taken by the columnar derive itself, not by the fallback.
    blocks = derive_columns.derived_blocks(records_path(header), None, DEVIL, derive._empty_counts())
    assert b"".join(blocks) == data
    assert b"\n3,2001,147.0,-42.0,CC BY 4.0\n4,2001,0.0001,1e-05,CC BY 4.0\n" in data


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (_line(13, year="1500"), "year"),
        (_line(13, latitude="91"), "coordinate"),
        (_line(13, license="All rights reserved"), "license"),
        (_line(13, license="CC\\\\BY"), "license"),
        (_line(1), "order"),
    ],
)
def test_a_value_the_columnar_derive_refuses_goes_to_the_row_derive_which_names_it(tmp_path, line, reason):
    header = _snapshot(tmp_path, [*ODD, line])
    with pytest.raises(derive_columns.ColumnarUnavailable):
        list(derive_columns.derived_blocks(records_path(header), None, DEVIL, derive._empty_counts()))
    with pytest.raises(InputError, match="record 12"):
        derive.derive_to_file(header, DEVIL, tmp_path / "derived.csv")
    assert not (tmp_path / "derived.csv").exists()


def test_a_backslash_the_columnar_derive_leaves_to_the_row_derive_still_derives(tmp_path):
    header = _snapshot(tmp_path, [*ODD, _line(13, issues="ZERO\\\\COORDINATE")])
    data, _, _ = _row_derive(header)
    target = tmp_path / "derived.csv"
    derive.derive_to_file(header, DEVIL, target)
    assert target.read_bytes() == data
