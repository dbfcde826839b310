"""What the quality domain gives the code location."""

import dagster as dg

from surveillance_pipeline.quality.assets import occurrence_quality

defs = dg.Definitions(assets=[occurrence_quality])
