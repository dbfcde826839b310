"""Species partitions: one per registry row, keyed by slug."""

import dagster as dg

from surveillance_pipeline.gbif.registry import partition_keys

species_partitions = dg.StaticPartitionsDefinition(partition_keys())
