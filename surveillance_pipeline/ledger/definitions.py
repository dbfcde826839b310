"""What the ledger domain gives the code location."""

import dagster as dg

from surveillance_pipeline.ledger.assets import occurrence_batches
from surveillance_pipeline.ledger.sensors import batches_sensor

defs = dg.Definitions(assets=[occurrence_batches], sensors=[batches_sensor])
