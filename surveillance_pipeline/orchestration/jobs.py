"""Jobs over the asset graph, one per partitioning, so one run can cover every partition of its assets."""

from collections.abc import Sequence

import dagster as dg

from surveillance_pipeline.orchestration.dagster_internals import UnresolvedAssetJobDefinition
from surveillance_pipeline.orchestration.partitions import batch_days, species_partitions
from surveillance_pipeline.orchestration.run_config import run_config_for

SPECIES_ASSETS_JOB = "species_assets"
WHOLE_TARGET_ASSETS_JOB = "whole_target_assets"
BATCH_DAYS_JOB = "batch_days"
OBSERVE_SOURCES_JOB = "observe_sources"


def _job(
    name: str,
    assets: list[dg.AssetsDefinition],
    partitions: dg.PartitionsDefinition | None,
    what: str,
    checks_left_out: Sequence[dg.AssetChecksDefinition],
) -> UnresolvedAssetJobDefinition:
    # Publishing is no asset to select: derived_dataset_registration is external, reported by the
    # register_derived_dataset job (releases/assets.py), so none of these jobs can include it.
    keys = [a.key for a in assets if a.partitions_def == partitions]
    return dg.define_asset_job(
        name,
        selection=dg.AssetSelection.assets(*keys) - dg.AssetSelection.checks(*checks_left_out),
        description=what,
        # The checked-in row-shaping settings, shown (and editable) in the launchpad.
        config=run_config_for(key.to_user_string() for key in keys),
    )


def jobs_for(
    assets: list[dg.AssetsDefinition],
    sources: list[dg.AssetKey],
    checks_left_out: Sequence[dg.AssetChecksDefinition] = (),
) -> list[UnresolvedAssetJobDefinition]:
    """The jobs over ``assets``, and one that observes the observable ``sources``. The asset jobs run the
    assets' checks, less ``checks_left_out``: those that scan whole tables run on their own schedule,
    so that a run that skips everything stays as cheap as its skips."""
    return [
        dg.define_asset_job(
            OBSERVE_SOURCES_JOB,
            selection=dg.AssetSelection.assets(*sources),
            description="Observe the source assets (GBIF downloads, the devil's deliveries): their data "
            "versions are what the loads record as their inputs.",
        ),
        _job(
            SPECIES_ASSETS_JOB,
            assets,
            species_partitions,
            "Every species-partitioned asset, ingest to samples.",
            checks_left_out,
        ),
        _job(
            WHOLE_TARGET_ASSETS_JOB,
            assets,
            None,
            "Every unpartitioned asset: summaries, snapshots, exports.",
            checks_left_out,
        ),
        _job(
            BATCH_DAYS_JOB,
            assets,
            batch_days,
            "Every asset partitioned by batch day: the batch feed.",
            checks_left_out,
        ),
    ]
