"""sample_export and devil_snapshot_export: the same bytes on every re-run, with a sha256 manifest."""

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dagster as dg
import psycopg

from surveillance_pipeline.automation import REFRESH_WHEN_INPUTS_CHANGE
from surveillance_pipeline.core.keys import JobKeyParts, sha256_file
from surveillance_pipeline.core.refresh import WHOLE_TARGET, report_derived_output
from surveillance_pipeline.releases.build import (
    EXPORT_VERSION,
    BuiltExport,
    build_devil_snapshot_export,
    build_sample_export,
    devil_snapshot_export_parts,
    export_if_changed,
    sample_export_parts,
)
from surveillance_pipeline.releases.exports import EXPORT_FORMAT, MANIFEST
from surveillance_pipeline.reporting import materialize_result
from surveillance_pipeline.resources import DataPaths, Warehouse
from surveillance_pipeline.samples.assets import occurrence_sample_summary
from surveillance_pipeline.snapshots.assets import devil_snapshot


def _export(
    context: dg.AssetExecutionContext,
    warehouse: Warehouse,
    paths: DataPaths,
    name: str,
    parts_of: Callable[[psycopg.Connection], JobKeyParts],
    build: Callable[[psycopg.Connection], BuiltExport],
) -> dg.MaterializeResult:
    folder = paths.exports(name)
    with warehouse.connect() as conn:
        parts, built = export_if_changed(conn, folder, parts_of, build)
        rows = built.files[0].rows if built else _manifest_rows(folder)
        outcome = report_derived_output(
            conn,
            asset=f"{name}_export",
            partition_key=WHOLE_TARGET,
            parts=parts,
            rows=rows,
            run_id=context.run.run_id,
            unchanged=built is None,
        )
    return materialize_result(
        outcome, folder=str(folder), manifest_sha256=sha256_file(folder / MANIFEST), order="ORDER BY id"
    )


def _manifest_rows(folder: Path) -> int:
    """Rows of an export already in place (every file of one export holds the same rows)."""
    files = json.loads((folder / MANIFEST).read_bytes())["files"]
    return next(iter(files.values()))["rows"]


EXPORT_ASSET: dict[str, Any] = {
    "group_name": "releases",
    "code_version": f"export-v{EXPORT_VERSION}.format-v{EXPORT_FORMAT}",
    "automation_condition": REFRESH_WHEN_INPUTS_CHANGE,
}


@dg.asset(
    **EXPORT_ASSET,
    deps=[occurrence_sample_summary],
    pool="sample_export",
    description="data/exports/sample/: sample.csv and sample.parquet (GeoParquet) ordered by id, and "
    "manifest.json with each file's sha256, rows and the job key they came from.",
)
def sample_export(
    context: dg.AssetExecutionContext, warehouse: Warehouse, paths: DataPaths
) -> dg.MaterializeResult:
    return _export(context, warehouse, paths, "sample", sample_export_parts, build_sample_export)


@dg.asset(
    **EXPORT_ASSET,
    deps=[devil_snapshot],
    pool="devil_snapshot_export",
    description="data/exports/devil_snapshot/: devil_snapshot.csv and .parquet ordered by id, "
    "and manifest.json.",
)
def devil_snapshot_export(
    context: dg.AssetExecutionContext, warehouse: Warehouse, paths: DataPaths
) -> dg.MaterializeResult:
    return _export(
        context, warehouse, paths, "devil_snapshot", devil_snapshot_export_parts, build_devil_snapshot_export
    )
