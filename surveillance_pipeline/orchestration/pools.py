"""One writer per target: every asset names a pool after what it writes, and each pool admits one step
(under the distributed profile, a species-partitioned asset's pool admits one step per worker: the steps
are of different runs, so of different species, and each partition's advisory lock keeps one writer).

dagster.yaml's ``pools: default_limit: 1`` is applied when Dagster first makes a pool's row, at the pool's
first claim; two runs claiming a pool that has no row yet both got a slot (2 of 4 trials in the fault
suite). So the limits are set before any run claims them, as ``dagster instance concurrency set <pool> 1``
would: by ``make run``, ``make ui`` and ``python -m surveillance_pipeline.commands.pools``. A limit a
user already set (in the UI or with the CLI) is left as it is.
"""

from __future__ import annotations

import dagster as dg

from surveillance_pipeline.orchestration.dagster_internals import op_pools
from surveillance_pipeline.orchestration.distributed import partition_writers
from surveillance_pipeline.orchestration.partitions import species_partitions

POOL_LIMIT = 1


def asset_pools(definitions: dg.Definitions) -> dict[str, int]:
    """The pools the definitions' assets and op jobs name, each with the limit it gets, by name."""
    limits: dict[str, int] = {}
    # Op jobs (register_derived_dataset, which reports derived_dataset_registration) write one target each.
    for pool, partitions_def in op_pools(definitions):
        per_species = partitions_def == species_partitions
        limits[pool] = max(limits.get(pool, 0), partition_writers() if per_species else POOL_LIMIT)
    return dict(sorted(limits.items()))


def ensure_pool_limits(instance: dg.DagsterInstance, definitions: dg.Definitions) -> dict[str, int]:
    """Give each pool without a limit of its own its limit; returns the pools it set, with their limits."""
    storage = instance.event_log_storage
    present = storage.get_concurrency_keys()
    missing = {pool: limit for pool, limit in asset_pools(definitions).items() if pool not in present}
    for pool, limit in missing.items():
        storage.set_concurrency_slots(pool, limit)
    return missing
