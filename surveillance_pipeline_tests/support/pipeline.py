"""Test helpers: run the real assets through a real Dagster instance against the test database."""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import dagster as dg
import psycopg
from psycopg import sql

from surveillance_pipeline.commands.run import WORKSPACE_FILE, prepare_lab_inputs, run_plan
from surveillance_pipeline.core.seeds import SeedKey
from surveillance_pipeline.core.settings import CODE_LOCATION_ATTRIBUTE, CODE_LOCATION_MODULE
from surveillance_pipeline.gbif.client import GbifClient
from surveillance_pipeline.gbif.registry import partition_keys
from surveillance_pipeline.lab.districts import lab_layer_path
from surveillance_pipeline.lab.gbif_client import LabGbifClient
from surveillance_pipeline.lab.resources import LabGeocoderSource
from surveillance_pipeline.occurrences.assets import gbif_derived, gbif_raw, occurrences
from surveillance_pipeline.orchestration.dagster_internals import execute_in_code_location
from surveillance_pipeline.orchestration.reporting import recorded_data_version
from surveillance_pipeline.orchestration.resources import (
    DataPaths,
    GbifAccount,
    GbifSource,
    ReleaseMasking,
    Warehouse,
)
from surveillance_pipeline.orchestration.run_config import QUIET_CONSOLE
from surveillance_pipeline.samples.assets import (
    occurrence_sample,
    occurrence_sample_summary,
    sample_engines_agree,
)
from surveillance_pipeline.samples.rules import md5_text
from surveillance_pipeline_tests.support.quality_probes import (
    _at,
    canberra,
    planted_records,
    scattered_on_coasts,
)

SPINE = [gbif_raw, gbif_derived, occurrences]
SAMPLED = [*SPINE, occurrence_sample]
SUMMARIZED = [*SAMPLED, occurrence_sample_summary, sample_engines_agree]
DEVIL = "sarcophilus-harrisii"
# The tests' ledger salt (deployments read GEOCODER_LEDGER_SALT); a test checks it is never stored.
TEST_LEDGER_SALT = "test-salt-6f1c9a52e0d34b7d"
# The tests' release masking key (deployments read RELEASE_MASKING_KEY), and the key as the masking reads it.
TEST_MASKING_KEY = "test-masking-key-0b7e41c95d2a48f3"
TEST_SEED_KEY = SeedKey(TEST_MASKING_KEY, "RELEASE_MASKING_KEY")

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


def add_record_before_the_100th_pick(records):
    """One new record whose md5(id) sorts before the current 100th pick's (the course's case)."""
    ordered = sorted(records, key=lambda r: (md5_text(r["key"]), r["key"]))
    hundredth = ordered[99]
    existing = {r["key"] for r in records}
    candidate = max(existing) + 1
    while candidate in existing or (md5_text(candidate), candidate) >= (
        md5_text(hundredth["key"]),
        hundredth["key"],
    ):
        candidate += 1
    new = {**copy.deepcopy(hundredth), "key": candidate, "gbifID": str(candidate)}
    return records + [new]


def shuffle(records):
    """The same records in another order (a fixed seed: the test must fail the same way every time)."""
    shuffled = list(records)
    random.Random(20261129).shuffle(shuffled)
    return shuffled


def bad_individual_count(records):
    """The record with the lowest id counts "many" individuals: not a number GBIF would serve."""
    edited = sorted(records, key=lambda r: r["key"])
    edited[0] = {**edited[0], "individualCount": "many"}
    return edited


def published_at_zero(records):
    """Two records GBIF would serve as published at 0,0: one at 0,0 itself, one elsewhere but flagged
    ZERO_COORDINATE. occurrences keeps both without a point; their terms keep the coordinates."""
    edited = sorted(records, key=lambda r: r["key"])
    edited[5] = {**edited[5], "decimalLatitude": 0.0, "decimalLongitude": 0.0}
    edited[6] = {**edited[6], "issues": sorted({*edited[6].get("issues", []), "ZERO_COORDINATE"})}
    return edited


def month_later(records):
    """The same query a month later: the two lowest gbifIDs gone; four records edited (one re-identified
    as a fossil, one moved 0.01° north, one moved to Canberra, one given a 20 km uncertainty); three new (one
    at another record's point and dataset, one in 1850, one in the sea off Tasmania's east coast)."""
    ordered = sorted(records, key=lambda r: r["key"])[2:]
    placed = [r for r in ordered if r.get("decimalLatitude") is not None]
    placed[0]["basisOfRecord"] = "FOSSIL_SPECIMEN"
    placed[1]["decimalLatitude"] = round(placed[1]["decimalLatitude"] + 0.01, 6)
    placed[2].update(_at(canberra()))
    placed[3]["coordinateUncertaintyInMeters"] = 20000.0
    first_new = max(r["key"] for r in records) + 1
    news = [copy.deepcopy(placed[10]), copy.deepcopy(placed[11]), copy.deepcopy(placed[12])]
    news[1].update(year=1850, eventDate="1850-01-01")
    news[2].update(decimalLongitude=148.9, decimalLatitude=-42.1)
    for offset, record in enumerate(news):
        record.update(key=first_new + offset, gbifID=str(first_new + offset))
    return ordered + news


def neighbours_changed(records):
    """A month later whose changes reach records that did not change: the first record (lowest gbifID) of
    a duplicates group gone, so the next one there is no longer a duplicate; and 500 new records on the
    mainland's south coast (0.01 degree apart), which move every site's mean distance and so the outliers
    test's limit: Canberra's record is no outlier any more (a site by site search, 2026-12-06)."""
    ordered = sorted(records, key=lambda r: r["key"])
    groups: dict[tuple[Any, Any, Any], list[int]] = {}
    for record in ordered:
        if record.get("decimalLatitude") is not None:
            point = (record.get("datasetKey"), record["decimalLongitude"], record["decimalLatitude"])
            groups.setdefault(point, []).append(record["key"])
    first_of_a_group = min(keys[0] for keys in groups.values() if len(keys) > 1)
    kept = [record for record in ordered if record["key"] != first_of_a_group]
    first_new = max(r["key"] for r in records) + 1
    template = next(r for r in ordered if r.get("decimalLatitude") is not None and not r.get("issues"))
    news = []
    for offset in range(500):
        record = copy.deepcopy(template)
        record.update(
            key=first_new + offset,
            gbifID=str(first_new + offset),
            decimalLongitude=round(150.0 + (offset % 30) * 0.01, 6),
            decimalLatitude=round(-36.0 - (offset // 30) * 0.01, 6),
            countryCode="AU",
        )
        news.append(record)
    return kept + news


EDITS: dict[str, RecordEdit] = {
    "none": lambda records: records,
    "drop_lowest_id": drop_lowest_id,
    "reverse": lambda records: list(reversed(records)),
    "shuffle": shuffle,
    "add_record_before_the_100th_pick": add_record_before_the_100th_pick,
    "quality_probes": planted_records,
    "scattered_on_coasts": scattered_on_coasts,
    "bad_individual_count": bad_individual_count,
    "published_at_zero": published_at_zero,
    "month_later": month_later,
    "neighbours_changed": neighbours_changed,
}


def resources(database_url: str, data_dir: Path, edit: str = "none") -> dict[str, Any]:
    return {
        "warehouse": Warehouse(database_url=database_url),
        "paths": DataPaths(root=str(data_dir), region_layer=str(lab_layer_path())),
        "gbif": EditedGbifSource(edit=edit),
        # Only derived_dataset_registration reads it; test_registration binds one with a fake GBIF.
        "gbif_account": GbifAccount(user="tester", password="not-a-real-password"),
        "geocoder": LabGeocoderSource(ledger_salt=TEST_LEDGER_SALT),
        "masking": ReleaseMasking(key=TEST_MASKING_KEY),
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
    sample_config: Mapping[str, Any] | None = None,
    raise_on_error: bool = True,
) -> dg.ExecuteInProcessResult:
    selected = assets or SPINE
    ops: dict[str, Any] = {}
    if occurrences_config is not None:
        ops["occurrences"] = {"config": dict(occurrences_config)}
    if sample_config is not None:
        ops["occurrence_sample"] = {"config": dict(sample_config)}
    run_config = {"ops": ops} if ops else {}
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
    return {name: plain(value) for name, value in events[0].materialization.metadata.items()}


def plain(value: Any) -> Any:
    """A metadata value as plain data; a table as its rows (dicts)."""
    if isinstance(value, dg.TableMetadataValue):
        return [dict(record.data) for record in value.records]
    return value.value


def data_version(instance: dg.DagsterInstance, asset: str, partition: str = DEVIL) -> str | None:
    return recorded_data_version(instance, dg.AssetKey(asset), partition)


def observe(
    sources: list[Any], instance: dg.DagsterInstance, resources: dict[str, Any] | None = None
) -> dg.ExecuteInProcessResult:
    """Observe ``sources`` in a job run, as the observe_sources job does in a deployment."""
    job = dg.define_asset_job("observe", selection=dg.AssetSelection.assets(*(s.key for s in sources)))
    defs = dg.Definitions(assets=sources, jobs=[job], resources=resources or {})
    return defs.resolve_job_def("observe").execute_in_process(instance=instance)


def partitions_in_status(
    instance: dg.DagsterInstance,
    key: dg.AssetKey,
    partitions: dg.PartitionsDefinition,
    status: dg.AssetPartitionStatus,
) -> set[str]:
    """The asset's partitions Dagster shows in ``status`` (the UI's partition bar: one status each)."""
    every = partitions.get_partition_keys(dynamic_partitions_store=instance)
    by_partition = instance.get_status_by_partition(key, every, partitions)
    assert by_partition is not None, f"{key.to_user_string()}: no partition status"
    return {partition for partition, shown in by_partition.items() if shown == status}


def table_md5(conn: psycopg.Connection, species_id: int | None = None) -> str:
    """md5 of the occurrences rows in key order (all columns, geometry as EWKT)."""
    row = conn.execute(
        "SELECT md5(coalesce(string_agg(concat_ws('|', id, species_id, year, longitude, latitude, license,"
        " ST_AsEWKT(geom)), E'\\n' ORDER BY id), '')) FROM occurrences"
        " WHERE %(species_id)s::int IS NULL OR species_id = %(species_id)s",
        {"species_id": species_id},
    ).fetchone()
    return row[0]


def state_row(conn: psycopg.Connection, target: str = "occurrences", partition: str = DEVIL):
    return conn.execute(
        "SELECT job_key, parts, rows FROM target_state WHERE target = %s AND partition_key = %s",
        [target, partition],
    ).fetchone()


def execute_as_launched(
    instance: dg.DagsterInstance,
    job: dg.JobDefinition,
    tags: Mapping[str, str] | None = None,
    run_config: Mapping[str, Any] | None = None,
) -> dg.DagsterRun:
    """Run ``job`` with its own executor, as a launched run does (``materialize`` and
    ``execute_in_process`` replace the executor, and with it the rule that a step runs once its upstream
    handed on its output, even when that upstream then failed some partitions)."""
    return execute_in_code_location(
        instance,
        job,
        workspace_file=WORKSPACE_FILE,
        module_name=CODE_LOCATION_MODULE,
        attribute=CODE_LOCATION_ATTRIBUTE,
        run_config={**(run_config or {}), **QUIET_CONSOLE},
        tags=dict(tags or {}),
    )


def materialized_in_run(instance: dg.DagsterInstance, run_id: str) -> set[dg.AssetKey]:
    records = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION).records
    return {e.asset_key for r in records if (e := r.event_log_entry.asset_materialization) is not None}


def check_evaluations(instance: dg.DagsterInstance, run_id: str) -> dict[str, bool]:
    """Each asset check the run evaluated, and whether it passed."""
    kind = dg.DagsterEventType.ASSET_CHECK_EVALUATION
    evaluations = {}
    for record in instance.get_records_for_run(run_id, of_type=kind).records:
        event = record.event_log_entry.dagster_event
        if event is not None:
            evaluations[event.event_specific_data.check_name] = event.event_specific_data.passed
    return evaluations


def materializations_in_run(instance: dg.DagsterInstance, run_id: str, asset: str) -> dict[str | None, Any]:
    """Each partition's materialization in the run (None: unpartitioned), by the run's event log."""
    records = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION).records
    events = [r.event_log_entry.asset_materialization for r in records]
    return {e.partition: e for e in events if e is not None and e.asset_key == dg.AssetKey(asset)}


# Columns that name the Dagster run that wrote a row (random by design): a log, not content.
RUN_RECORD_COLUMNS = {"run_id"}


def rows_md5(conn: psycopg.Connection, table: str) -> str:
    """md5 of a table's rows (timestamptz and run_id columns left out) in primary-key order."""
    columns = [
        name
        for name, kind in conn.execute(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = 'public' AND table_name = %s ORDER BY ordinal_position",
            [table],
        ).fetchall()
        if kind != "timestamp with time zone" and name not in RUN_RECORD_COLUMNS
    ]
    assert columns, f"table {table} is not there"
    key = [
        row[0]
        for row in conn.execute(
            "SELECT attribute.attname FROM pg_index AS index "
            "JOIN pg_attribute AS attribute ON attribute.attrelid = index.indrelid "
            "AND attribute.attnum = ANY(index.indkey) "
            "WHERE index.indrelid = to_regclass(%s) AND index.indisprimary ORDER BY attribute.attnum",
            [table],
        ).fetchall()
    ]
    row_text = sql.SQL("ROW({})::text").format(sql.SQL(", ").join(map(sql.Identifier, columns)))
    order = sql.SQL(", ").join(map(sql.Identifier, key)) if key else row_text
    statement = sql.SQL(
        "SELECT md5(coalesce(string_agg({row}, E'\\n' ORDER BY {order}), '')) FROM {table}"
    ).format(row=row_text, order=order, table=sql.Identifier(table))
    result = conn.execute(statement).fetchone()
    assert result is not None
    return result[0]


# make run's plan over the first SPECIES_COUNT species of the registry, not all 71, to keep the suite's
# time modest (test_every_asset_idempotent, test_target_verification).
SPECIES_COUNT = 6


def run_everything(defs: dg.Definitions, instance: dg.DagsterInstance, root: Path) -> set[dg.AssetKey]:
    """make run's plan over the first SPECIES_COUNT species; returns the assets it materialized."""
    prepare_lab_inputs(root)
    materialized: set[dg.AssetKey] = set()
    for job, tags in run_plan(instance, root, species=partition_keys()[:SPECIES_COUNT]):
        run = execute_as_launched(instance, defs.resolve_job_def(job), tags=tags)
        assert run.status == dg.DagsterRunStatus.SUCCESS, job
        materialized |= set(materialized_in_run(instance, run.run_id))
        checks = check_evaluations(instance, run.run_id)
        assert all(checks.values()), checks
    return materialized


def keep_all(*exports: str) -> dict[str, Any]:
    """Run config under which these exports release every record: for tests of the exports' own
    mechanics, which make no quality flags (the default policy reads them)."""
    return {"ops": {name: {"config": {"policy": "keep_all"}} for name in exports}}
