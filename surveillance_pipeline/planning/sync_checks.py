"""Unsynced at a glance: each species-partitioned asset has a check, ``partitions_in_sync``, that fails
listing the partitions the next run would load, with the plan's reasons (plan.py, what ``make plan``
prints): Unsynced (an input, the code or the config changed), Missing (never loaded) or edited outside the
pipeline. Dagster 1.13 shows a partitioned asset's Unsynced partitions only on each partition's page, and
"Materialize unsynced" offers unpartitioned assets only; a failed check shows on the asset's node in the
graph and in the catalog.

The checks run when launched (the asset's Checks tab), and the sensor ``report_partitions_in_sync``
evaluates them every two minutes, so nobody has to ask. The plan reads only (its transaction is rolled
back): 6 s on the lab's 71 species.
"""

from collections.abc import Iterator, Sequence
from typing import Any

import dagster as dg
import psycopg

from surveillance_pipeline.orchestration.check_reports import changed_check_reports
from surveillance_pipeline.orchestration.resources import (
    DataPaths,
    GeocoderSource,
    ReleaseMasking,
    Warehouse,
)
from surveillance_pipeline.planning.plan import LOAD, MAY_LOAD, Plan, make_plan

SYNC_CHECK = "partitions_in_sync"
SYNC_SENSOR = "report_partitions_in_sync"
SYNC_INTERVAL_S = 120
# The species-partitioned assets the plan decides (gbif_raw always asks GBIF, so it is never "in sync").
SYNCED_ASSETS = (
    "gbif_derived",
    "occurrences",
    "occurrence_quality",
    "occurrence_sample",
    "masked_release",
    "geocoded_localities",
    "region_assignment",
)
LISTED = 50
FIRST_LOAD = "first load"


def out_of_sync(plan: Plan) -> dict[str, list[tuple[str, str]]]:
    """Per asset, (partition, reason) of every partition the next run would or may load."""
    return {
        asset: sorted(
            (partition, step.describe())
            for partition, step in plan.steps.get(asset, {}).items()
            if step.action in (LOAD, MAY_LOAD)
        )
        for asset in SYNCED_ASSETS
    }


def current_plan(
    warehouse: Warehouse, paths: DataPaths, geocoder: GeocoderSource, masking: ReleaseMasking
) -> Plan:
    # A plain connection: no migration, and the plan's transaction is rolled back (plan.make_plan).
    with psycopg.connect(
        warehouse.database_url, autocommit=True, application_name="surveillance_pipeline plan"
    ) as conn:
        # Not reading the downloads (make_plan's reads_downloads): every two minutes, that would derive
        # each species a new download changes. A new download shows as gbif_downloads' new data version.
        return make_plan(conn, paths, geocoder, masking_key_id=masking.seed_key().id)


def sync_result(asset: str, rows: Sequence[Sequence[str]]) -> dict[str, Any]:
    """The check's result for these partitions: passed when none, else failed naming them and saying how
    to launch them."""
    if not rows:
        description = "every partition holds what the next run would make: nothing to load"
    else:
        # Loaded partitions out of sync first: a warehouse that loads a few species of many would list
        # its Missing ones before them otherwise.
        missing = [partition for partition, reason in rows if reason == FIRST_LOAD]
        stale = [(partition, reason) for partition, reason in rows if reason != FIRST_LOAD]
        parts = []
        if stale:
            listed = ", ".join(f"{partition} ({reason})" for partition, reason in stale[:LISTED])
            more = f" and {len(stale) - LISTED} more" if len(stale) > LISTED else ""
            parts.append(f"{len(stale)} unsynced or edited: {listed}{more}")
        if missing:
            more = f" and {len(missing) - LISTED} more" if len(missing) > LISTED else ""
            parts.append(f"{len(missing)} missing (never loaded): {', '.join(missing[:LISTED])}{more}")
        keys = ",".join(partition for partition, _ in rows)
        description = (
            f"{len(rows)} partition{'s' if len(rows) != 1 else ''} would load on the next run; "
            f"{'; '.join(parts)}. Launch {'them' if len(rows) != 1 else 'it'}: Materialize {asset} (or its "
            f"job species_assets) with the partition{'s' if len(rows) != 1 else ''} {keys}, or `make run`."
        )
    return {
        "asset_key": dg.AssetKey(asset),
        "check_name": SYNC_CHECK,
        "passed": not rows,
        "description": description,
        "metadata": {
            "partitions to load": len(rows),
            "partitions": dg.MetadataValue.text(",".join(partition for partition, _ in rows)),
        },
    }


@dg.multi_asset_check(
    specs=[
        dg.AssetCheckSpec(
            SYNC_CHECK,
            asset=dg.AssetKey(asset),
            blocking=False,
            description="Every partition holds what the next run would make (the plan, as `make plan` "
            "prints it); fails naming the Unsynced, Missing or edited partitions and their reasons.",
        )
        for asset in SYNCED_ASSETS
    ],
    can_subset=True,
    name="partitions_in_sync_checks",
)
def partitions_in_sync(
    context: dg.AssetCheckExecutionContext,
    warehouse: Warehouse,
    paths: DataPaths,
    geocoder: GeocoderSource,
    masking: ReleaseMasking,
) -> Iterator[dg.AssetCheckResult]:
    found = out_of_sync(current_plan(warehouse, paths, geocoder, masking))
    for key in context.selected_asset_check_keys:
        result = sync_result(key.asset_key.to_user_string(), found.get(key.asset_key.to_user_string(), []))
        yield dg.AssetCheckResult(**result)


@dg.sensor(
    name=SYNC_SENSOR,
    minimum_interval_seconds=SYNC_INTERVAL_S,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Evaluates each species-partitioned asset's partitions_in_sync check from the plan every "
    "two minutes: failed naming the partitions the next run would load, again after each newer "
    "materialization of the asset; passed once none is left. Reads only; launches nothing.",
)
def report_partitions_in_sync(
    context: dg.SensorEvaluationContext,
    warehouse: Warehouse,
    paths: DataPaths,
    geocoder: GeocoderSource,
    masking: ReleaseMasking,
) -> dg.SensorResult:
    found = out_of_sync(current_plan(warehouse, paths, geocoder, masking))
    return changed_check_reports(
        context,
        {(asset, SYNC_CHECK): rows for asset, rows in found.items()},
        lambda asset, _check, rows: dg.AssetCheckEvaluation(**sync_result(asset, rows)),
    )
