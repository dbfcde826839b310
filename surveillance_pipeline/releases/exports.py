"""Byte-identical exports: CSV, (Geo)Parquet and a manifest naming each file's sha256, rows and job key.

Every export states its order (``ORDER BY id``) and its formats, so a sha256 proves nothing changed. The
whole folder is built as ``<name>.staging`` beside the live one and swapped in (core.partition_files), so a
reader never sees half a file, a manifest never names a file that is not there, and no file of an earlier
export survives into a new one.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shapely.geometry import Point

from surveillance_pipeline.core.keys import JobKeyParts, sha256_file, sha256_hex
from surveillance_pipeline.core.partition_files import replace_partition_folder, write_file_durably

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
    records = [dict(zip(columns, row, strict=True)) for row in rows]
    geometry = [Point(r["longitude"], r["latitude"]) if r["longitude"] is not None else None for r in records]
    import geopandas  # imported here: it takes most of a second, and every run of the CLI would pay it

    frame = geopandas.GeoDataFrame(records, columns=list(columns), geometry=geometry, crs="EPSG:4326")
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False, compression=PARQUET_COMPRESSION)
    return ExportFile(name, buffer.getvalue(), len(rows), f"geoparquet: EPSG:4326, {PARQUET_COMPRESSION}")


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
    files: Sequence[ExportFile], parts: JobKeyParts, order: str, extra: Mapping[str, Any] | None = None
) -> bytes:
    """The manifest; ``extra`` adds fields some releases carry (a masked release's seed)."""
    document = {
        **(extra or {}),
        "export_format": EXPORT_FORMAT,
        "job_key": parts.key,
        "job_key_parts": parts.as_dict(),
        "order": order,
        "files": {f.name: {"sha256": sha256_hex(f.data), "rows": f.rows, "format": f.format} for f in files},
    }
    return (json.dumps(document, sort_keys=True, indent=1, ensure_ascii=False) + "\n").encode("utf-8")


def export_is_current(folder: Path, job_key: str) -> bool:
    """True when the folder's manifest names ``job_key`` and every file it lists has its recorded sha256."""
    try:
        manifest = json.loads((folder / MANIFEST).read_bytes())
    except (FileNotFoundError, json.JSONDecodeError):
        return False
    if manifest.get("job_key") != job_key:
        return False
    return all(
        (folder / name).is_file() and sha256_file(folder / name) == entry["sha256"]
        for name, entry in manifest.get("files", {}).items()
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


def manifest_rows(folder: Path) -> int:
    """Rows of an export in place, from its manifest (every file of one export holds the same rows)."""
    files = json.loads((folder / MANIFEST).read_bytes())["files"]
    return int(next(iter(files.values()))["rows"])
