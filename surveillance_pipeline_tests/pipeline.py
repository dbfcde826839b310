"""Test helpers: run the real assets through a real Dagster instance against the test database."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import dagster as dg
import psycopg

from surveillance_pipeline.gbif.client import GbifClient
from surveillance_pipeline.gbif.lab import LabGbifClient
from surveillance_pipeline.occurrences.assets import gbif_derived, gbif_raw, occurrences
from surveillance_pipeline.resources import DataPaths, GbifSource, Warehouse

SPINE = [gbif_raw, gbif_derived, occurrences]
DEVIL = "sarcophilus-harrisii"

RecordEdit = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]


class EditedLabClient(LabGbifClient):
    """The lab source with the records of every search passed through ``edit`` (GBIF's data changed)."""

    def __init__(self, edit: RecordEdit) -> None:
        self.edit = edit

    def search_occurrences(self, params, *, offset, limit):
        everything = super().search_occurrences(params, offset=0, limit=10**9)
        records = self.edit(copy.deepcopy(everything["results"]))
        page = records[offset : offset + limit]
        return {
            **everything,
            "count": len(records),
            "offset": offset,
            "limit": limit,
            "results": page,
            "endOfRecords": offset + len(page) >= len(records),
        }


class EditedGbifSource(GbifSource):
    """A GbifSource whose client edits the lab records; the edit is picked by name from EDITS."""

    edit: str = "none"

    def client(self) -> GbifClient:
        return EditedLabClient(EDITS[self.edit])


def drop_lowest_id(records):
    return sorted(records, key=lambda r: r["key"])[1:]


EDITS: dict[str, RecordEdit] = {"none": lambda records: records, "drop_lowest_id": drop_lowest_id}


def resources(database_url: str, data_dir: Path, edit: str = "none") -> dict[str, Any]:
    return {
        "warehouse": Warehouse(database_url=database_url),
        "paths": DataPaths(root=str(data_dir)),
        "gbif": EditedGbifSource(edit=edit),
    }


def materialize(
    instance: dg.DagsterInstance,
    database_url: str,
    data_dir: Path,
    partition: str = DEVIL,
    *,
    assets: list | None = None,
    edit: str = "none",
    occurrences_config: Mapping[str, Any] | None = None,
    raise_on_error: bool = True,
) -> dg.ExecuteInProcessResult:
    selected = assets or SPINE
    run_config = {}
    if occurrences_config is not None:
        run_config = {"ops": {"occurrences": {"config": dict(occurrences_config)}}}
    return dg.materialize(
        selected,
        instance=instance,
        partition_key=partition,
        resources=resources(database_url, data_dir, edit),
        run_config=run_config,
        raise_on_error=raise_on_error,
    )


def metadata(result: dg.ExecuteInProcessResult, asset: str) -> dict[str, Any]:
    events = [e for e in result.get_asset_materialization_events() if e.asset_key == dg.AssetKey(asset)]
    assert len(events) == 1, f"expected one materialization of {asset}, got {len(events)}"
    return {name: value.value for name, value in events[0].materialization.metadata.items()}


def data_version(instance: dg.DagsterInstance, asset: str, partition: str = DEVIL) -> str | None:
    record = instance.get_latest_data_version_record(dg.AssetKey(asset), partition_key=partition)
    if record is None:
        return None
    return record.asset_materialization.tags.get("dagster/data_version")


def table_md5(conn: psycopg.Connection, species_id: int | None = None) -> str:
    """md5 of the occurrences rows in key order (all columns, geometry as EWKT)."""
    row = conn.execute(
        "SELECT md5(coalesce(string_agg(concat_ws('|', id, species_id, year, longitude, latitude, license,"
        " ST_AsEWKT(geom)), E'\\n' ORDER BY id), '')) FROM occurrences"
        " WHERE %(species_id)s::int IS NULL OR species_id = %(species_id)s",
        {"species_id": species_id},
    ).fetchone()
    return row[0]


def state_row(conn: psycopg.Connection, job: str = "occurrences", partition: str = DEVIL):
    return conn.execute(
        "SELECT job_key, parts, rows FROM job_state WHERE job = %s AND partition_key = %s", [job, partition]
    ).fetchone()
