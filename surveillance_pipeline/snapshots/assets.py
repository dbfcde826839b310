"""devil_delivery (observed) -> devil_snapshot, with the check that the table holds what was delivered."""

import dagster as dg

from surveillance_pipeline.core.errors import StaleInputError
from surveillance_pipeline.orchestration.outputs import outputs_metadata
from surveillance_pipeline.orchestration.reporting import PartitionEvents, outcome_report, report_asset
from surveillance_pipeline.orchestration.resources import DataPaths, Warehouse
from surveillance_pipeline.snapshots import devil
from surveillance_pipeline.snapshots.deliveries import Delivery, newest_delivery, read_delivery


def newest_devil_delivery(paths: DataPaths) -> Delivery:
    folder = paths.deliveries(devil.DEVIL_SLUG)
    path = newest_delivery(folder)
    if path is None:
        raise StaleInputError(f"{folder}: no delivery yet (write one, e.g. with the lab_deliveries command)")
    return read_delivery(path)


# An observable asset from specs (not @observable_source_asset, whose step output shows Dagster's own
# "__source_asset_observation__: true" in the UI): the step output carries the observation's metadata.
@dg.multi_observable_source_asset(
    specs=[
        dg.AssetSpec(
            "devil_delivery",
            group_name="snapshots",
            description="The newest file in data/deliveries/sarcophilus-harrisii/ (by name); "
            "data version = its sha256.",
        )
    ],
)
def devil_delivery(paths: DataPaths) -> dg.ObserveResult:
    path = newest_delivery(paths.deliveries(devil.DEVIL_SLUG))
    if path is None:
        return dg.ObserveResult(data_version=dg.DataVersion("none"), metadata={"file": "none"})
    delivery = read_delivery(path)
    return dg.ObserveResult(
        data_version=dg.DataVersion(delivery.sha256), metadata={"file": path.name, "rows": delivery.rows}
    )


class DevilSnapshotConfig(dg.Config):
    """What shapes devil_snapshot's rows (and so enters its job key)."""

    cap: int = devil.DEFAULT_CAP
    licenses: list[str] = list(devil.DEFAULT_LICENSES)

    def rules(self) -> devil.SnapshotRules:
        """The rules this config gives: what the asset loads under and the sensor computes keys with."""
        return devil.SnapshotRules(cap=self.cap, licenses=tuple(self.licenses))


@dg.asset(
    metadata=outputs_metadata(tables=["devil_snapshot"]),
    group_name="snapshots",
    deps=[devil_delivery],
    # Names the versions current at import; the job key reads them at run time.
    code_version=devil.DEVIL_SNAPSHOT.code_version,
    pool="devil_snapshot",
    description="The devil's newest delivery: the configured licenses, the first `cap` by md5(id::text) "
    "then id. Holds exactly one delivery under a job key; transform and schema versions are registries. "
    "With no delivery yet (a registry without the devil), it loads nothing and is not materialized.",
    # A registry without the devil has no delivery: the step then ends without an output, so make run (and
    # the whole-target job) succeeds, devil_snapshot_export is skipped, and the asset stays unmaterialized.
    output_required=False,
)
def devil_snapshot(
    context: dg.AssetExecutionContext, config: DevilSnapshotConfig, paths: DataPaths, warehouse: Warehouse
) -> PartitionEvents:
    folder = paths.deliveries(devil.DEVIL_SLUG)
    if newest_delivery(folder) is None:
        context.log.warning(
            f"devil_snapshot: {folder}: no delivery yet, so nothing to load (write one, e.g. with the "
            "lab_deliveries command)"
        )
        return
    delivery = newest_devil_delivery(paths)
    with warehouse.connect() as conn:
        outcome = devil.refresh_devil_snapshot(
            conn, delivery=delivery, rules=config.rules(), run_id=context.run.run_id
        )
    yield from report_asset(
        context, outcome_report(outcome, delivery=delivery.path.name, table="devil_snapshot")
    )


@dg.asset_check(
    asset=devil_snapshot,
    description="The table's rows equal what the newest delivery gives under the recorded transform "
    "and config.",
)
def devil_snapshot_holds(paths: DataPaths, warehouse: Warehouse) -> dg.AssetCheckResult:
    delivery = newest_devil_delivery(paths)
    with warehouse.connect() as conn:
        verdict = devil.snapshot_holds(conn, delivery)
    return dg.AssetCheckResult(passed=verdict.holds, metadata={"detail": verdict.detail})
