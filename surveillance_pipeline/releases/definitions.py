"""What the releases domain gives the code location."""

import dagster as dg

from surveillance_pipeline.releases.assets import (
    derived_dataset_registration,
    devil_snapshot_export,
    masked_release,
    quality_report,
    register_derived_dataset,
    replay_masked_release,
    sample_export,
)

defs = dg.Definitions(
    assets=[
        sample_export,
        devil_snapshot_export,
        masked_release,
        quality_report,
        derived_dataset_registration,
    ],
    jobs=[replay_masked_release, register_derived_dataset],
)
