"""GBIF occurrence records into PostGIS, re-runnable without doubling a row or changing an output."""

import warnings

# Two beta APIs we rely on knowingly (tests pin their behaviour): backfill_policy, for one run over a whole
# partition range, and multi_observable_source_asset, for the downloads' and deliveries' data versions.
# Said once, here, by the warnings' text alone: naming their class (dagster.BetaWarning) would import
# Dagster with every part of the package, and make run's first process weighs the species before it does
# (commands/make_run.py).
warnings.filterwarnings("ignore", message="Parameter `backfill_policy`")
warnings.filterwarnings("ignore", message="Function `multi_observable_source_asset`")
