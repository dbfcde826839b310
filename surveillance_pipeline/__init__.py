"""GBIF occurrence records into PostGIS, re-runnable without doubling a row or changing an output."""

import warnings

import dagster as dg

# Two beta APIs we rely on knowingly (tests pin their behaviour): backfill_policy, for one run over a whole
# partition range, and observable_source_asset, for deliveries' data versions. Said once, here.
warnings.filterwarnings("ignore", category=dg.BetaWarning, message="Parameter `backfill_policy`")
warnings.filterwarnings("ignore", category=dg.BetaWarning, message="Function `observable_source_asset`")
