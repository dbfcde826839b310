"""What the places domain gives the code location."""

import dagster as dg

from surveillance_pipeline.places.assets import geocoded_localities, region_assignment

defs = dg.Definitions(assets=[geocoded_localities, region_assignment])
