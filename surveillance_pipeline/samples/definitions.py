"""What the samples domain gives the code location."""

import dagster as dg

from surveillance_pipeline.samples.assets import (
    occurrence_sample,
    occurrence_sample_summary,
    sample_engines_agree,
)

defs = dg.Definitions(
    assets=[occurrence_sample, occurrence_sample_summary], asset_checks=[sample_engines_agree]
)
