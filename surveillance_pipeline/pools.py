"""One writer per target: every asset names a pool after what it writes, and each pool admits one step.

dagster.yaml's ``pools: default_limit: 1`` is applied when Dagster first makes a pool's row, at the pool's
first claim; two runs claiming a pool that has no row yet both got a slot (2 of 4 trials in the fault
suite). So the limits are set before any run claims them, as ``dagster instance concurrency set <pool> 1``
would: by ``make run``, ``make ui`` and ``python -m surveillance_pipeline.pools``. A limit a user already
set (in the UI or with the CLI) is left as it is.
"""

from __future__ import annotations

import dagster as dg

from surveillance_pipeline.dagster_internals import show_automation_running

POOL_LIMIT = 1


def asset_pools(definitions: dg.Definitions) -> list[str]:
    """The pools the definitions' assets name, sorted."""
    pools = {
        pool
        for assets_def in definitions.resolve_asset_graph().assets_defs
        if (pool := getattr(assets_def.node_def, "pool", None))
    }
    return sorted(pools)


def ensure_pool_limits(instance: dg.DagsterInstance, definitions: dg.Definitions) -> list[str]:
    """Give each pool without a limit of its own the limit of one step; returns the pools it set."""
    storage = instance.event_log_storage
    present = storage.get_concurrency_keys()
    missing = [pool for pool in asset_pools(definitions) if pool not in present]
    for pool in missing:
        storage.set_concurrency_slots(pool, POOL_LIMIT)
    return missing


def main() -> int:
    """Prepare the instance for the UI and daemon: pool limits, and automation shown as it runs."""
    from surveillance_pipeline.definitions import defs

    with dg.DagsterInstance.get() as instance:
        for pool in ensure_pool_limits(instance, defs):
            print(f"pool {pool}: limit {POOL_LIMIT}")
        if show_automation_running(instance):
            print("automation: shown as running (it runs as automation_sensor)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
