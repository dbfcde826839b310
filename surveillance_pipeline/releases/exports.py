"""Byte-identical exports: CSV, (Geo)Parquet and a manifest naming each file's sha256, rows and job key.

Every export states its order (``ORDER BY id``) and its formats, so a sha256 proves nothing changed. The
whole folder is built as ``<name>.staging`` beside the live one and swapped in (core.partition_files), so a
reader never sees half a file, a manifest never names a file that is not there, and no file of an earlier
export survives into a new one.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from surveillance_pipeline.core.keys import JobKeyParts, sha256_file, sha256_hex
from surveillance_pipeline.core.lazy_modules import LazyModule
from surveillance_pipeline.core.partition_files import (
    file_stamp,
    read_file_stamps,
    replace_partition_folder,
    write_file_durably,
    write_file_stamps,
)

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa
else:
    np = LazyModule("numpy")

EXPORT_FORMAT = 1
MANIFEST = "manifest.json"
CSV_FORMAT = "csv: header, comma, LF line ends, UTF-8, empty field for null, floats with 6 decimals"
PARQUET_COMPRESSION = "snappy"


@dataclass(frozen=True)
class ExportFile:
    name: str
    data: bytes
    rows: int
    format: str

    @property
    def sha256(self) -> str:
        return sha256_hex(self.data)


@dataclass(frozen=True)
class WrittenFile:
    """A file already written into the staging folder (streamed, never whole in memory)."""

    name: str
    sha256: str
    rows: int
    format: str


def _csv_field(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6f}"
    text = str(value)
    if any(c in text for c in ',"\n\r'):
        return '"' + text.replace('"', '""') + '"'
    return text


def csv_export(name: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> ExportFile:
    lines = [",".join(columns)] + [",".join(_csv_field(v) for v in row) for row in rows]
    return ExportFile(name, ("\n".join(lines) + "\n").encode("utf-8"), len(rows), CSV_FORMAT)


def geoparquet_export(name: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> ExportFile:
    """GeoParquet (EPSG:4326 points from ``longitude``/``latitude``), rows in the given (id) order."""
    # Imported here: geopandas takes most of a second, and every run of the CLI would pay it.
    import geopandas
    from shapely.geometry import Point

    records = [dict(zip(columns, row, strict=True)) for row in rows]
    geometry = [Point(r["longitude"], r["latitude"]) if r["longitude"] is not None else None for r in records]

    frame = geopandas.GeoDataFrame(records, columns=list(columns), geometry=geometry, crs="EPSG:4326")
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False, compression=PARQUET_COMPRESSION)
    return ExportFile(name, buffer.getvalue(), len(rows), f"geoparquet: EPSG:4326, {PARQUET_COMPRESSION}")


# ``.6f`` of a float whose value times 10**6 lies this close to a half is formatted by Python itself: only
# there could the product's own rounding pick the other neighbour. Masked coordinates, already rounded to
# 6 decimals, never come near it.
_HALF_MARGIN = 1e-6
# Beyond this, value * 10**6 is no longer an exact integer in a double; such values are formatted by Python.
_EXACT_MICROS = 2.0**52


def csv_export_columns(name: str, table: pa.Table) -> ExportFile:
    """``csv_export`` of a whole table, formatted column by column (Arrow kernels, no Python per row).

    The same bytes as ``csv_export`` of the table's rows: integers as ``str``, floats with 6 decimals (NaN
    or null as an empty field), text through ``_csv_field``.
    """

    header = (",".join(table.column_names) + "\n").encode("utf-8")
    return ExportFile(name, b"".join((header, _csv_lines(table))), table.num_rows, CSV_FORMAT)


def _csv_lines(table: pa.Table) -> memoryview | bytes:
    """The CSV lines (no header) of a table, each ending in LF."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if table.num_rows == 0:
        return b""
    fields = [_csv_column(table.column(index).combine_chunks()) for index in range(table.num_columns)]
    text = pa.large_string()
    # The line end joins the last field, a short one, so the long lines are built only once.
    fields[-1] = pc.binary_join_element_wise(fields[-1], pa.scalar("\n", text), pa.scalar("", text))
    return _string_values(pc.binary_join_element_wise(*fields, pa.scalar(",", text)))


class CsvStream:
    """``csv_export`` written part by part into a file: ``write`` each table (same columns, in order)."""

    def __init__(self, path: Path, columns: Sequence[str]) -> None:
        self._path = path
        self._handle = path.open("wb")
        self._hash = hashlib.sha256()
        self._rows = 0
        self._put((",".join(columns) + "\n").encode("utf-8"))

    def _put(self, data: memoryview | bytes) -> None:
        self._handle.write(data)
        self._hash.update(data)

    def write(self, table: pa.Table) -> None:
        self._put(_csv_lines(table))
        self._rows += table.num_rows

    def close(self) -> WrittenFile:
        self._handle.flush()
        os.fsync(self._handle.fileno())
        self._handle.close()
        return WrittenFile(self._path.name, self._hash.hexdigest(), self._rows, CSV_FORMAT)


def _string_values(array: pa.Array) -> memoryview:
    """The concatenated values of a (large) string array without nulls: a view of its data buffer."""
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int64)[array.offset : array.offset + len(array) + 1]
    return memoryview(array.buffers()[2])[int(offsets[0]) : int(offsets[-1])]


def _csv_column(column: pa.Array) -> pa.Array:
    """One column as the large strings ``_csv_field`` would write, nulls as empty fields."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = column.type
    if pa.types.is_floating(kind):
        return _fixed6(column.to_numpy(zero_copy_only=False).astype(float))
    if pa.types.is_integer(kind):
        return pc.fill_null(pc.cast(column, pa.large_string()), "")
    if pa.types.is_null(kind):
        return pa.array([""] * len(column), type=pa.large_string())
    # Text: few distinct values per column (a slug, a handful of licenses), so each is quoted once.
    encoded = pc.dictionary_encode(pc.cast(column, pa.large_string()))
    quoted = pa.array([_csv_field(v) for v in encoded.dictionary.to_pylist()], type=pa.large_string())
    return pc.fill_null(pc.take(quoted, encoded.indices), "")


def _fixed6(values: np.ndarray) -> pa.Array:
    """``f"{v:.6f}"`` of every float, empty for NaN: integer millionths, split and joined by Arrow."""
    import pyarrow as pa
    import pyarrow.compute as pc

    missing = np.isnan(values)
    finite = np.where(missing, 0.0, values)
    scaled = finite * 1e6
    micros = np.rint(scaled)
    # Where the product may have rounded across a half, or is too large to be exact, Python decides.
    doubtful = (np.abs(np.abs(scaled - np.trunc(scaled)) - 0.5) < _HALF_MARGIN) | (
        np.abs(scaled) >= _EXACT_MICROS
    )
    doubtful &= ~missing
    magnitude = np.abs(np.where(doubtful, 0.0, micros)).astype(np.int64)
    whole = pc.cast(pa.array(magnitude // 1_000_000), pa.large_string())
    fraction = pc.utf8_lpad(pc.cast(pa.array(magnitude % 1_000_000), pa.large_string()), 6, "0")
    # The sign of the value itself: -0.0000001 rounds to "-0.000000", as Python writes it.
    sign = pa.array(np.where(np.signbit(finite), "-", ""), type=pa.large_string())
    point, nothing = pa.scalar(".", pa.large_string()), pa.scalar("", pa.large_string())
    text = pc.binary_join_element_wise(sign, whole, point, fraction, nothing)
    if doubtful.any():
        positions = np.flatnonzero(doubtful)
        exact = pa.array([f"{float(values[i]):.6f}" for i in positions], type=pa.large_string())
        mask = pa.array(doubtful)
        text = pc.replace_with_mask(text, mask, exact)
    return pc.if_else(pa.array(missing), pa.scalar("", pa.large_string()), text)


# pyarrow's row group when none is asked for: a streamed file writes the groups a whole write would.
PARQUET_ROW_GROUP = 1024 * 1024
GEOPARQUET_FORMAT = f"geoparquet: EPSG:4326, {PARQUET_COMPRESSION}"
# geopandas' GeoParquet metadata version.
_GEOPARQUET_VERSION = "1.1.0"
# How pandas types each kind of column (pandas_type, numpy_type in pyarrow's pandas metadata).
_PANDAS_TYPES = {
    "int64": ("int64", "int64"),
    "float64": ("float64", "float64"),
    "str": ("object", "str"),
    "null": ("empty", "object"),
}


def geoparquet_kind(arrow_type: pa.DataType, nulls: int, rows: int) -> str:
    """The dtype pandas infers for a column of rows holding Python values and None (a ``_PANDAS_TYPES``
    key): an integer column with a null is float64, an all-null column holds nothing but None."""
    import pyarrow as pa

    if nulls == rows:
        return "null"
    if pa.types.is_integer(arrow_type):
        return "float64" if nulls else "int64"
    if pa.types.is_floating(arrow_type):
        return "float64"
    return "str"


def geoparquet_export_columns(name: str, table: pa.Table) -> ExportFile:
    """``geoparquet_export`` of a whole table (points from ``longitude``/``latitude``): the same bytes.

    A table with rows and some point is written by ``GeoParquetStream``; any other (empty, no point) goes
    through geopandas as ``geoparquet_export`` does, fed columns of the dtypes pandas infers from rows.
    """
    import pyarrow as pa

    longitude = _floats(table.column("longitude"))
    latitude = _floats(table.column("latitude"))
    missing = np.isnan(longitude)
    if not geoparquet_streamable(table.num_rows, longitude, latitude):
        data = _geopandas_geoparquet(table, longitude, latitude, missing)
        return ExportFile(name, data, table.num_rows, GEOPARQUET_FORMAT)
    kinds = {
        c: geoparquet_kind(table.column(c).type, _nulls(table.column(c)), table.num_rows)
        for c in table.column_names
    }
    sink = pa.BufferOutputStream()
    stream = GeoParquetStream(sink, kinds, point_bbox(longitude, latitude))
    stream.write(table)
    stream.close()
    return ExportFile(name, sink.getvalue().to_pybytes(), table.num_rows, GEOPARQUET_FORMAT)


def geoparquet_streamable(rows: int, longitude: np.ndarray, latitude: np.ndarray) -> bool:
    """Whether ``GeoParquetStream`` writes geopandas' bytes for these points: some point, none half."""
    missing = np.isnan(longitude)
    return rows > 0 and not bool(missing.all()) and not bool((~missing & np.isnan(latitude)).any())


def point_bbox(longitude: np.ndarray, latitude: np.ndarray) -> list[float]:
    """[min lon, min lat, max lon, max lat] of the points (NaN: no point), as GeoParquet's ``bbox``."""
    present = ~np.isnan(longitude)
    return [
        float(longitude[present].min()),
        float(latitude[present].min()),
        float(longitude[present].max()),
        float(latitude[present].max()),
    ]


def _floats(column: pa.ChunkedArray) -> np.ndarray:
    return column.to_numpy().astype(float)


def _nulls(column: pa.ChunkedArray) -> int:
    import pyarrow as pa

    if pa.types.is_floating(column.type):
        return int(np.isnan(_floats(column)).sum())
    return int(column.null_count)


def _geopandas_geoparquet(
    table: pa.Table, longitude: np.ndarray, latitude: np.ndarray, missing: np.ndarray
) -> bytes:
    import geopandas  # imported here, as in geoparquet_export
    import pandas as pd
    import shapely

    frame = pd.DataFrame({c: _pandas_column(table.column(c).combine_chunks()) for c in table.column_names})
    points = shapely.points(longitude, latitude)
    # geoparquet_export makes no point for a row without a longitude.
    points[missing] = None
    geo = geopandas.GeoDataFrame(frame, geometry=points, crs="EPSG:4326")
    buffer = io.BytesIO()
    geo.to_parquet(buffer, index=False, compression=PARQUET_COMPRESSION)
    return buffer.getvalue()


class GeoParquetStream:
    """What ``GeoDataFrame(rows).to_parquet`` writes, by pyarrow, a row group at a time.

    The bytes are geopandas' own (tests hold the two writers equal) for a file with some point: the
    columns typed as pandas would type them (``kinds``, known for the whole file before its first row), a
    WKB ``geometry`` column with geoarrow's field metadata, and the ``pandas`` and ``geo`` schema metadata
    (``bbox`` over every point) as pyarrow and geopandas write them. The metadata goes into the footer
    and into every row group's schema alike, so it must be whole before the first row is written.
    """

    def __init__(self, sink: Any, kinds: Mapping[str, str], bbox: Sequence[float]) -> None:
        import pyarrow.parquet as pq

        self._kinds = dict(kinds)
        self._schema = _geoparquet_schema(self._kinds, bbox)
        self._writer = pq.ParquetWriter(sink, self._schema, compression=PARQUET_COMPRESSION)
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self.rows = 0

    def write(self, table: pa.Table) -> None:
        """Rows of the release's columns (``longitude``/``latitude`` among them), in file order."""
        self._pending.append(self._file_columns(table))
        self._pending_rows += table.num_rows
        self.rows += table.num_rows
        while self._pending_rows >= PARQUET_ROW_GROUP:
            self._write_group(PARQUET_ROW_GROUP)

    def close(self) -> None:
        if self._pending_rows:
            self._write_group(self._pending_rows)
        self._writer.close()

    def _write_group(self, rows: int) -> None:
        import pyarrow as pa

        pending = pa.concat_tables(self._pending)
        # One contiguous chunk per column, as a whole table's: chunk edges could split pages elsewhere.
        self._writer.write_table(pending.slice(0, rows).combine_chunks(), row_group_size=PARQUET_ROW_GROUP)
        rest = pending.slice(rows)
        self._pending, self._pending_rows = ([rest] if rest.num_rows else []), rest.num_rows

    def _file_columns(self, table: pa.Table) -> pa.Table:
        import pyarrow as pa
        import pyarrow.compute as pc

        columns: list[pa.Array] = []
        for column_name, kind in self._kinds.items():
            column = table.column(column_name).combine_chunks()
            if kind == "int64":
                columns.append(pc.cast(column, pa.int64()))
            elif kind == "float64":
                columns.append(
                    pa.array(column.to_numpy(zero_copy_only=False).astype(float), from_pandas=True)
                )
            elif kind == "str":
                columns.append(pc.cast(column, pa.large_string()))
            else:
                columns.append(pa.nulls(len(column)))
        longitude = _floats(table.column("longitude"))
        latitude = _floats(table.column("latitude"))
        # WKB points, little-endian: byte order 1, geometry type 1 (Point), x, y; none without a longitude.
        wkb = np.zeros(len(longitude), dtype=[("order", "u1"), ("kind", "<u4"), ("x", "<f8"), ("y", "<f8")])
        wkb["order"], wkb["kind"], wkb["x"], wkb["y"] = 1, 1, longitude, latitude
        packed = pa.FixedSizeBinaryArray.from_buffers(
            pa.binary(wkb.itemsize), len(wkb), [None, pa.py_buffer(wkb.tobytes())]
        )
        missing = pa.array(np.isnan(longitude))
        columns.append(pc.if_else(missing, pa.scalar(None, pa.binary()), pc.cast(packed, pa.binary())))
        return pa.table(columns, schema=self._schema)


def _geoparquet_schema(kinds: Mapping[str, str], bbox: Sequence[float]) -> pa.Schema:
    import json
    from importlib.metadata import version

    import pyarrow as pa
    from pyproj import CRS

    arrow_types = {"int64": pa.int64(), "float64": pa.float64(), "str": pa.large_string(), "null": pa.null()}
    fields = [pa.field(c, arrow_types[kind]) for c, kind in kinds.items()]
    described = [_pandas_described(c, *_PANDAS_TYPES[kind]) for c, kind in kinds.items()]
    described.append(_pandas_described("geometry", *_PANDAS_TYPES["null"]))
    crs = CRS.from_epsg(4326).to_json_dict()
    # geopandas names the datum ensemble's members without their ids in the file's metadata.
    geo_crs = json.loads(json.dumps(crs))
    for member in geo_crs.get("datum_ensemble", {}).get("members", []):
        member.pop("id", None)
    pandas_metadata = {
        "index_columns": [],
        "column_indexes": [],
        "columns": described,
        "attributes": {},
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": version("pandas"),
    }
    geo_metadata = {
        "primary_column": "geometry",
        "columns": {
            "geometry": {"encoding": "WKB", "crs": geo_crs, "geometry_types": ["Point"], "bbox": list(bbox)}
        },
        "version": _GEOPARQUET_VERSION,
        "creator": {"library": "geopandas", "version": version("geopandas")},
    }
    geometry = pa.field("geometry", pa.binary()).with_metadata(
        {"ARROW:extension:name": "geoarrow.wkb", "ARROW:extension:metadata": json.dumps({"crs": crs})}
    )
    return pa.schema(
        [*fields, geometry], metadata={"pandas": json.dumps(pandas_metadata), "geo": json.dumps(geo_metadata)}
    )


def _pandas_described(name: str, pandas_type: str, numpy_type: str) -> dict[str, Any]:
    return {
        "name": name,
        "field_name": name,
        "pandas_type": pandas_type,
        "numpy_type": numpy_type,
        "metadata": None,
    }


def _pandas_column(column: pa.Array) -> np.ndarray:
    """The column as pandas would infer it from a list of row dicts holding Python values and None."""
    import pyarrow as pa

    nulls = column.null_count
    if pa.types.is_floating(column.type):
        values = column.to_numpy(zero_copy_only=False).astype(float)
        nulls = int(np.isnan(values).sum())
    if len(column) == 0 or nulls == len(column):
        return np.full(len(column), None, dtype=object)
    if pa.types.is_floating(column.type) or (pa.types.is_integer(column.type) and nulls):
        return column.to_numpy(zero_copy_only=False).astype(float)
    if pa.types.is_integer(column.type):
        return column.to_numpy().astype(np.int64)
    # Text: few distinct values, so each becomes a Python str once and is repeated by index.
    import pyarrow.compute as pc

    encoded = pc.dictionary_encode(column)
    distinct = np.array([*encoded.dictionary.to_pylist(), None], dtype=object)
    return distinct[pc.fill_null(encoded.indices, len(encoded.dictionary)).to_numpy()]


def parquet_export(
    name: str, columns: Sequence[str], types: Sequence[str], rows: Sequence[Sequence[Any]]
) -> ExportFile:
    """Plain Parquet for tables without geometry, with explicit column types (Arrow's names: ``int64``)."""
    # Imported here, as geopandas is: a run that exports nothing need not load Arrow.
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([pa.field(c, pa.type_for_alias(t)) for c, t in zip(columns, types, strict=True)])
    table = pa.Table.from_pylist([dict(zip(columns, row, strict=True)) for row in rows], schema=schema)
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression=PARQUET_COMPRESSION)
    return ExportFile(name, buffer.getvalue(), len(rows), f"parquet: {PARQUET_COMPRESSION}")


def manifest_bytes(
    files: Sequence[ExportFile | WrittenFile],
    parts: JobKeyParts,
    order: str,
    extra: Mapping[str, Any] | None = None,
) -> bytes:
    """The manifest; ``extra`` adds fields some releases carry (a masked release's logical run and key id)."""
    document = {
        **(extra or {}),
        "export_format": EXPORT_FORMAT,
        "job_key": parts.key,
        "job_key_parts": parts.as_dict(),
        "order": order,
        "files": {f.name: {"sha256": f.sha256, "rows": f.rows, "format": f.format} for f in files},
    }
    return (json.dumps(document, sort_keys=True, indent=1, ensure_ascii=False) + "\n").encode("utf-8")


def export_is_current(folder: Path, job_key: str, stamps: Path | None = None) -> bool:
    """True when the folder's manifest names ``job_key`` and every file it lists has its recorded sha256.

    With ``stamps`` (a memo written by ``remember_export_stamps``), a file whose stamp is the one kept
    for its sha256 is not read again; any other is hashed, and the stamps of a current export are kept.
    """
    try:
        manifest = json.loads((folder / MANIFEST).read_bytes())
    except (FileNotFoundError, json.JSONDecodeError):
        return False
    if manifest.get("job_key") != job_key:
        return False
    kept = read_file_stamps(stamps) if stamps is not None else {}
    seen: dict[str, list[Any]] = {}
    for name, entry in manifest.get("files", {}).items():
        path = folder / name
        if not path.is_file():
            return False
        stamp = [*file_stamp(path), entry["sha256"]]
        if kept.get(name) != stamp and sha256_file(path) != entry["sha256"]:
            return False
        seen[name] = stamp
    if stamps is not None and seen != kept:
        write_file_stamps(stamps, seen)
    return True


def remember_export_stamps(folder: Path, stamps: Path) -> None:
    """Keep the stamps of the export just published into ``folder``, with the sha256s its manifest gives
    (the bytes were hashed as they were written)."""
    manifest = json.loads((folder / MANIFEST).read_bytes())
    write_file_stamps(
        stamps,
        {name: [*file_stamp(folder / name), entry["sha256"]] for name, entry in manifest["files"].items()},
    )


def publish_export(
    folder: Path,
    files: Sequence[ExportFile],
    parts: JobKeyParts,
    order: str,
    extra: Mapping[str, Any] | None = None,
) -> bytes:
    """Replace the folder with these files and their manifest, swapped in whole; returns the manifest."""
    manifest = manifest_bytes(files, parts, order, extra)

    def write_into(staging: Path) -> None:
        for export in files:
            write_file_durably(staging / export.name, export.data)
        write_file_durably(staging / MANIFEST, manifest)

    replace_partition_folder(folder, write_into)
    return manifest


def publish_written_export(
    folder: Path,
    write_files: Callable[[Path], Sequence[WrittenFile]],
    parts: JobKeyParts,
    order: str,
    extra: Mapping[str, Any] | None = None,
) -> bytes:
    """``publish_export`` of files that ``write_files(staging)`` streams into the staging folder (durably)
    and describes; the manifest is written after them. Returns the manifest."""
    manifest = b""

    def write_into(staging: Path) -> None:
        nonlocal manifest
        manifest = manifest_bytes(write_files(staging), parts, order, extra)
        write_file_durably(staging / MANIFEST, manifest)

    replace_partition_folder(folder, write_into)
    return manifest


def manifest_rows(folder: Path) -> int:
    """Rows of an export in place, from its manifest (every file of one export holds the same rows)."""
    files = json.loads((folder / MANIFEST).read_bytes())["files"]
    return int(next(iter(files.values()))["rows"])
