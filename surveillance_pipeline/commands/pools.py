"""``python -m surveillance_pipeline.commands.pools`` (make ui, first): prepare the instance for the UI and
daemon: each pool's limit (orchestration/pools.py), and automation shown as it runs."""

from __future__ import annotations

import dagster as dg

from surveillance_pipeline.definitions import defs
from surveillance_pipeline.orchestration.dagster_internals import show_automation_running
from surveillance_pipeline.orchestration.pools import ensure_pool_limits


def main() -> int:
    with dg.DagsterInstance.get() as instance:
        for pool, limit in ensure_pool_limits(instance, defs).items():
            print(f"pool {pool}: limit {limit}")
        if show_automation_running(instance):
            print("automation: shown as running (it runs as automation_sensor)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
