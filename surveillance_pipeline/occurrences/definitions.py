"""What the occurrences domain gives the code location."""

import dagster as dg

from surveillance_pipeline.occurrences.assets import gbif_derived, gbif_downloads, gbif_raw, occurrences

defs = dg.Definitions(assets=[gbif_downloads, gbif_raw, gbif_derived, occurrences])
