"""What the ledger domain gives the code location."""

import dagster as dg

from surveillance_pipeline.ledger.assets import occurrence_batches

defs = dg.Definitions(assets=[occurrence_batches])
