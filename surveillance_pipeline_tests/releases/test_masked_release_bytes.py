"""masked_release's files are the bytes the row-by-row writers made, pinned; the columnar writers equal them.

The sha256s below were first taken from the row-by-row build (rows as tuples, sorted in Python,
``csv_export`` and ``geoparquet_export`` via geopandas Points) before it became columnar, and taken again
from this build when MASKING_VERSION moved to 3 (the seed keyed by the tests' masking key: other draws, the
key's id in the manifest) and to 5 (each record's draw keyed by its id, DRAW_VERSION 1); the columnar
writers still write the row writers' bytes (a test below). They move only when a version constant
(MASKING_VERSION, DRAW_VERSION, EXPORT_FORMAT, occurrences') or a pinned library version in the lock moves.
"""

from __future__ import annotations

import io
import math
from dataclasses import replace

import geopandas
import numpy as np
import pyarrow as pa
import pytest
from shapely.geometry import Point

from surveillance_pipeline.core.keys import sha256_file
from surveillance_pipeline.core.refresh import ensure_state_tables
from surveillance_pipeline.occurrences.load import OccurrenceRules, load_occurrences
from surveillance_pipeline.quality.rules import POLICY_KEEP_ALL
from surveillance_pipeline.releases import exports, masking
from surveillance_pipeline.releases.exports import (
    GeoParquetStream,
    csv_export,
    csv_export_columns,
    geoparquet_export,
    geoparquet_export_columns,
    geoparquet_kind,
    point_bbox,
)
from surveillance_pipeline.releases.masking import (
    COLUMNS,
    MaskingRules,
    RecordDraws,
    build_masked_release,
)
from surveillance_pipeline_tests.support.pipeline import TEST_SEED_KEY
from surveillance_pipeline_tests.support.species import synthetic_species

SPECIES = synthetic_species(900_100, "pinned", "Pinnata exemplaris", "pinned")
HEADER = "id,year,longitude,latitude,license\n"
# Ids out of order, NULL years and licenses, rows without coordinates, the antimeridian and the poles,
# and a slug that needs quoting in the CSV.
EDGE = (
    HEADER
    + "905,2001,179.9999,-17.8,CC0 1.0\n3,,-179.99995,89.9999,\n17,1999,,,CC BY 4.0\n"
    + "12,2020,-0.000001,-89.99999,CC BY-NC 4.0\n1,,,,\n8,1850,180.0,0.0,CC BY 4.0\n"
    + "44,2024,-180.0,-45.5,CC0 1.0\n2,1970,147.123456789,-42.987654321,\n"
)
CASES = {
    "edge": ('edge,"q"', EDGE),
    "all-null": ("all-null", HEADER + "5,,10.5,20.25,\n6,,-10.5,-20.25,\n7,,,,\n"),
    "no-coord": ("no-coord", HEADER + "5,2000,,,CC0 1.0\n6,2001,,,CC BY 4.0\n"),
    "single": ("single", HEADER + "42,2000,146.5,-41.5,CC0 1.0\n"),
    "empty": ("empty", HEADER),
}
PINNED = {
    "edge": (
        "d50472c3a139d1ed2d8c98c3192a0204b3ee21b4c9aedeccbcf6e7113bcc8171",
        "d8df224d7fbd0f15d00b7e8ed31ee85ab53ee513ec17c03473dcb80265f99bc4",
        "4d8c1b00757364c983b5609cfa1e2f98fdef1bd1e3659072e47eca72d159e29a",
    ),
    "all-null": (
        "6c7bbe1120ef9f8c2f6e8c8866283111c893836dc7422523d7a875d54170e6b3",
        "6b1bbb53349900c6f8552a6f694848822f3d23a6090d6b3f4b67bf61f6589aaf",
        "b31a1e3f989c716646a43fabc40dd3db01f661e867f2c6a82a50efa520fa03ac",
    ),
    "no-coord": (
        "4514dfb9969a6ccb372f78c84b8d3c35e8106002fe635e3d066df11a6fcc32ce",
        "00b0be33465904e2183d810942db09e878741c2f54936806848fbacb4e0a83db",
        "e95b59a5eb4ab033b0feb2b40615830cd932abd5816d94673c2faf93941b0d4e",
    ),
    "single": (
        "a991e866971971bab88a3700bc0ee865856eefaa30761d92127546e767bbbac6",
        "0f7d6565c2c30b9d190fc5d1d04521bc23439ee0211d0c8eded4e353dd33c4ef",
        "6d3ef5f676c46c3878063a873b24a9be679c4c74b63e82e2d9272571939e3f29",
    ),
    "empty": (
        "3c55ee02c38b7eb96a672554e6d8d0c8e2eaebcdebb528cdbf6819efeb7e6f88",
        "6347e7752857fefd9c41c26abc1f0330f09bb0ad19cf4ca994671c95fb32a63d",
        "e8531549b4f071436ba05b0514296e36dbe7001110cb5857b16589e4a2b0f37f",
    ),
}


@pytest.mark.db
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_masked_release_is_the_pinned_bytes_of_the_row_by_row_build(db, tmp_path, case):
    slug, derived = CASES[case]
    order = sorted(CASES).index(case)
    species = replace(SPECIES, species_id=SPECIES.species_id + order, slug=slug)
    path = tmp_path / f"{case}.csv"
    path.write_text(derived, encoding="utf-8")
    ensure_state_tables(db)
    load_occurrences(db, species=species, derived=path, rules=OccurrenceRules(), run_id="pinned")
    folder = tmp_path / "release"
    # Every record released (the policy over quality flags is tested in the quality tests): the same draws.
    build_masked_release(db, slug, MaskingRules(policy=POLICY_KEEP_ALL), folder, key=TEST_SEED_KEY)
    hashes = (
        sha256_file(folder / f"{slug}.csv"),
        sha256_file(folder / f"{slug}.parquet"),
        sha256_file(folder / "manifest.json"),
    )
    assert hashes == PINNED[case]


@pytest.mark.db
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_release_counted_by_the_warehouse_and_read_twice_is_the_same_bytes(db, tmp_path, monkeypatch, case):
    # Every species read twice, as one larger than a row group is: counted by the warehouse first.
    monkeypatch.setattr(masking, "READ_ONCE_UP_TO_ROWS", 0)
    test_a_masked_release_is_the_pinned_bytes_of_the_row_by_row_build(db, tmp_path, case)


def _rows_and_table(count: int, seed: int, *, null_share: float) -> tuple[list[tuple], pa.Table]:
    """Release-shaped rows (Python values, None for null) and the same rows as Arrow columns."""
    draw = np.random.Generator(np.random.PCG64(seed))
    ids = np.sort(draw.choice(10**12, size=count, replace=False)).astype(np.int64)
    years = draw.integers(1800, 2030, count)
    no_year = draw.random(count) < null_share
    lon = np.round(draw.uniform(-180, 180, count), 6)
    lat = np.round(draw.uniform(-90, 90, count), 6)
    no_point = draw.random(count) < null_share
    # Values that round to a signed zero and sit at the edges.
    lon[: min(count, 4)] = [-0.0000004, 180.0, -180.0, 0.0][: min(count, 4)]
    lon[no_point], lat[no_point] = np.nan, np.nan
    licenses = np.array(["CC0 1.0", "CC BY 4.0", 'odd, "quoted"\nlicense', ""], dtype=object)
    license_values = [None if draw.random() < null_share else licenses[i % 4] for i in range(count)]
    rows = [
        (
            int(ids[i]),
            "spec,ies",
            None if no_year[i] else int(years[i]),
            None if math.isnan(lon[i]) else float(np.round(lon[i], 6)),
            None if math.isnan(lat[i]) else float(lat[i]),
            license_values[i],
        )
        for i in range(count)
    ]
    table = pa.table(
        {
            "id": pa.array(ids),
            "species": pa.array(["spec,ies"] * count, pa.large_string()),
            "year": pa.array([row[2] for row in rows], pa.int64()),
            "longitude": pa.array(np.round(lon, 6), from_pandas=True),
            "latitude": pa.array(lat, from_pandas=True),
            "license": pa.array(license_values, pa.large_string()),
        }
    )
    return rows, table


@pytest.mark.parametrize(
    ("count", "seed", "null_share"),
    [(1, 1, 0.0), (7, 2, 0.5), (500, 3, 0.05), (2_000, 4, 0.0), (300, 5, 1.0), (0, 6, 0.1)],
)
def test_the_columnar_writers_write_the_bytes_of_the_row_writers(count, seed, null_share):
    rows, table = _rows_and_table(count, seed, null_share=null_share)
    assert table.column_names == list(COLUMNS)
    assert csv_export_columns("x.csv", table).data == csv_export("x.csv", COLUMNS, rows).data
    assert (
        geoparquet_export_columns("x.parquet", table).data
        == geoparquet_export("x.parquet", COLUMNS, rows).data
    )


@pytest.mark.db
@pytest.mark.parametrize("read_once_up_to", [0, 1_000])
@pytest.mark.parametrize("page_rows", [1, 3, 7])
def test_a_release_read_a_few_rows_at_a_time_is_the_same_bytes(
    db, tmp_path, monkeypatch, page_rows, read_once_up_to
):
    # Pages of a few rows: the draws, the CSV and the Parquet's row group are carried across pages, whether
    # the masked pages are kept from the first read or the rows are read again.
    monkeypatch.setattr(masking, "PAGE_ROWS", page_rows)
    monkeypatch.setattr(masking, "READ_ONCE_UP_TO_ROWS", read_once_up_to)
    test_a_masked_release_is_the_pinned_bytes_of_the_row_by_row_build(db, tmp_path, "edge")


@pytest.mark.parametrize("count", [0, 1, 5, 1_000])
def test_draws_handed_out_by_page_are_the_draws_of_the_whole(count):
    draws = RecordDraws(TEST_SEED_KEY, MaskingRules(min_m=10.0, max_m=250.0))
    ids = np.arange(count, dtype=np.int64) * 31 + 5
    radius, azimuth = draws.of(ids)
    pages = [draws.of(ids[start : start + 3]) for start in range(0, count, 3)]
    assert np.array_equal(np.concatenate([r for r, _ in pages] or [np.empty(0)]), radius)
    assert np.array_equal(np.concatenate([a for _, a in pages] or [np.empty(0)]), azimuth)
    assert ((radius >= 10.0) & (radius <= 250.0)).all() and ((azimuth >= 0) & (azimuth < 360)).all()


def test_a_geoparquet_written_by_row_groups_is_what_geopandas_writes(monkeypatch):
    # Row groups of 1,000 rows instead of 1,048,576: the groups pyarrow cuts a whole write into.
    monkeypatch.setattr(exports, "PARQUET_ROW_GROUP", 1_000)
    rows, table = _rows_and_table(3_500, 7, null_share=0.1)
    sink = pa.BufferOutputStream()
    kinds = {
        c: geoparquet_kind(table.column(c).type, table.column(c).null_count, table.num_rows)
        for c in table.column_names
    }
    longitude = table.column("longitude").to_numpy()
    stream = GeoParquetStream(sink, kinds, point_bbox(longitude, table.column("latitude").to_numpy()))
    for start in range(0, table.num_rows, 700):
        stream.write(table.slice(start, 700))
    stream.close()
    records = [dict(zip(COLUMNS, row, strict=True)) for row in rows]
    points = [Point(r["longitude"], r["latitude"]) if r["longitude"] is not None else None for r in records]
    frame = geopandas.GeoDataFrame(records, columns=list(COLUMNS), geometry=points, crs="EPSG:4326")
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False, compression="snappy", row_group_size=1_000)
    assert sink.getvalue().to_pybytes() == buffer.getvalue()
