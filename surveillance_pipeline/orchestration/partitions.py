"""Every partitioning in one place: species (a registry row each) and batch days (a batch file each)."""

from collections.abc import Callable
from typing import Any

import dagster as dg

from surveillance_pipeline.gbif.registry import partition_keys
from surveillance_pipeline.orchestration.distributed import species_backfill_policy, step_priority_tags

species_partitions = dg.StaticPartitionsDefinition(partition_keys())

# A day is a partition once its file is there (batches_sensor and make run add it), so that "Missing" in
# the UI means a day whose batch has not been applied, not a day without a batch.
batch_days = dg.DynamicPartitionsDefinition(name="batch_days")


def species_asset(**asset_arguments: Any) -> Callable[..., dg.AssetsDefinition]:
    """``dg.asset`` for an asset with one partition per species.

    A backfill of a range is one run (per-partition runs would each cost seconds of process start), or,
    under the distributed profile, runs of a few species each, which workers take side by side; a free
    worker takes the waiting step with the most work after it first (distributed.SPECIES_STEP_PRIORITIES).
    """

    def decorate(compute: Callable[..., Any]) -> dg.AssetsDefinition:
        return dg.asset(
            partitions_def=species_partitions,
            backfill_policy=species_backfill_policy(),
            op_tags=step_priority_tags(asset_arguments.get("name") or compute.__name__),
            **asset_arguments,
        )(compute)

    return decorate


def add_batch_days(instance: dg.DagsterInstance, days: list[str]) -> list[str]:
    """Add the days that are not partitions yet (in order); return every partition, in Dagster's order."""
    known = set(batch_days.get_partition_keys(dynamic_partitions_store=instance))
    new = sorted(set(days) - known)
    if new:
        instance.add_dynamic_partitions(batch_days.name or "batch_days", new)
    return list(batch_days.get_partition_keys(dynamic_partitions_store=instance))
