"""What the snapshots domain gives the code location."""

import dagster as dg

from surveillance_pipeline.snapshots.assets import devil_delivery, devil_snapshot, devil_snapshot_holds
from surveillance_pipeline.snapshots.sensors import deliveries_sensor

defs = dg.Definitions(
    assets=[devil_delivery, devil_snapshot], asset_checks=[devil_snapshot_holds], sensors=[deliveries_sensor]
)
