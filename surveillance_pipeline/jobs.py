"""Jobs over the asset graph: one per partitioning, so one run can cover every partition of its assets."""

import dagster as dg
from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition

from surveillance_pipeline.occurrences.partitions import species_partitions


def species_assets_job(asset_graph_assets: list[dg.AssetsDefinition]) -> UnresolvedAssetJobDefinition:
    """Every asset partitioned by species (ingest to samples): what `make run` and the weekly refresh run."""
    keys = [a.key for a in asset_graph_assets if a.partitions_def == species_partitions]
    return dg.define_asset_job("species_assets", selection=dg.AssetSelection.assets(*keys))


def whole_target_assets_job(asset_graph_assets: list[dg.AssetsDefinition]) -> UnresolvedAssetJobDefinition:
    """Every unpartitioned asset (summaries, snapshots, exports), with their checks."""
    keys = [a.key for a in asset_graph_assets if a.partitions_def is None]
    return dg.define_asset_job("whole_target_assets", selection=dg.AssetSelection.assets(*keys))
