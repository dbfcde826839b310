"""Build the sample and devil-snapshot exports from PostGIS (Dagster-free)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psycopg

from surveillance_pipeline.core.keys import JobKeyParts
from surveillance_pipeline.core.partition_files import recover_partition_folder
from surveillance_pipeline.core.refresh import WHOLE_TARGET, refuse_edited_targets, upstream_job_key
from surveillance_pipeline.core.sql_files import load_sql
from surveillance_pipeline.occurrences.load import OCCURRENCES
from surveillance_pipeline.releases.exports import (
    EXPORT_FORMAT,
    ExportFile,
    csv_export,
    export_is_current,
    geoparquet_export,
    parquet_export,
    publish_export,
)
from surveillance_pipeline.samples.load import OCCURRENCE_SAMPLE, sample_state_digest
from surveillance_pipeline.snapshots.devil import DEVIL_SNAPSHOT

PACKAGE = "surveillance_pipeline.releases"
EXPORT_VERSION = 1
ORDER = "ORDER BY id"
SAMPLE_COLUMNS = ("id", "species", "pick", "year", "longitude", "latitude", "license")
DEVIL_COLUMNS = ("id", "year", "license", "pick")
DEVIL_TYPES = ("int64", "int32", "string", "int32")


@dataclass(frozen=True)
class BuiltExport:
    parts: JobKeyParts
    files: list[ExportFile]


def export_parts(input_checksum: str) -> JobKeyParts:
    """An export's job key parts: what it was made from, the export's version and its format."""
    return JobKeyParts(input=input_checksum, transform=EXPORT_VERSION, config={}, schema=EXPORT_FORMAT)


def sample_export_parts(conn: psycopg.Connection) -> JobKeyParts:
    return export_parts(sample_state_digest(conn))


def devil_snapshot_export_parts(conn: psycopg.Connection) -> JobKeyParts:
    return export_parts(upstream_job_key(conn, DEVIL_SNAPSHOT.name, WHOLE_TARGET))


def build_sample_export(conn: psycopg.Connection) -> BuiltExport:
    """The whole md5 sample as CSV and GeoParquet, read in one snapshot with the state it came from."""
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        parts = sample_export_parts(conn)
        # Rows edited outside the pipeline are not what the sample's keys name: never release them.
        refuse_edited_targets(conn, OCCURRENCE_SAMPLE.name, OCCURRENCES.name)
        rows = conn.execute(load_sql(PACKAGE, "select_sample_export_rows")).fetchall()
    return BuiltExport(
        parts,
        [
            csv_export("sample.csv", SAMPLE_COLUMNS, rows),
            geoparquet_export("sample.parquet", SAMPLE_COLUMNS, rows),
        ],
    )


def build_devil_snapshot_export(conn: psycopg.Connection) -> BuiltExport:
    with conn.transaction():
        parts = devil_snapshot_export_parts(conn)  # share-locks the state row: rows cannot move under us
        rows = conn.execute(load_sql(PACKAGE, "select_devil_snapshot_export_rows")).fetchall()
    return BuiltExport(
        parts,
        [
            csv_export("devil_snapshot.csv", DEVIL_COLUMNS, rows),
            parquet_export("devil_snapshot.parquet", DEVIL_COLUMNS, DEVIL_TYPES, rows),
        ],
    )


def export_if_changed(
    conn: psycopg.Connection,
    folder: Path,
    parts_of: Callable[[psycopg.Connection], JobKeyParts],
    build: Callable[[psycopg.Connection], BuiltExport],
) -> tuple[JobKeyParts, BuiltExport | None]:
    """Publish a fresh build unless the folder already holds this job key (files as in its manifest).

    The key is cheap (state rows only); the rows are read and the files built only when it changed.
    """
    # First, whatever a killed run left (a stale staging folder) goes, even when this run then skips.
    recover_partition_folder(folder)
    parts = parts_of(conn)
    if export_is_current(folder, parts.key):
        return parts, None
    built = build(conn)
    publish_export(folder, built.files, built.parts, ORDER)
    return built.parts, built
