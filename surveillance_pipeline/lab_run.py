"""``make run``: materialize every asset over every species partition in one run, then summarize it.

One run for the whole range (not one process per partition) against the project's Dagster instance, so the
run shows in the UI and costs one process start. The summary comes from the provenance rows the run wrote.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter, defaultdict

import dagster as dg
import psycopg

from surveillance_pipeline.definitions import defs
from surveillance_pipeline.gbif.registry import partition_keys
from surveillance_pipeline.partitioned import partition_range_tags
from surveillance_pipeline.settings import DATABASE_URL_VARIABLE

QUIET_CONSOLE = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
ASSET_ORDER = ("gbif_raw", "gbif_derived", "occurrences")


def run_all_partitions(
    instance: dg.DagsterInstance, definitions: dg.Definitions = defs
) -> dg.ExecuteInProcessResult:
    keys = partition_keys()
    job = definitions.resolve_implicit_global_asset_job_def()
    return job.execute_in_process(
        instance=instance,
        tags=partition_range_tags(keys[0], keys[-1]),
        run_config=QUIET_CONSOLE,
        raise_on_error=False,
    )


def summarize(database_url: str, run_id: str) -> list[str]:
    """One line per asset: partitions loaded and skipped, rows, and the reasons given."""
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT asset, action, reason, rows FROM provenance WHERE run_id = %s",
            [run_id],
        ).fetchall()
    actions: dict[str, Counter[str]] = defaultdict(Counter)
    reasons: dict[str, Counter[str]] = defaultdict(Counter)
    row_totals: Counter[str] = Counter()
    for asset, action, reason, row_count in rows:
        actions[asset][action] += 1
        reasons[asset][reason] += 1
        row_totals[asset] += row_count
    lines = [f"{'asset':<14} {'loaded':>6} {'skipped':>7} {'rows':>8}  reason"]
    for asset in sorted(actions, key=lambda a: (ASSET_ORDER.index(a) if a in ASSET_ORDER else 99, a)):
        why = ", ".join(f"{reason} ({count})" for reason, count in sorted(reasons[asset].items()))
        lines.append(
            f"{asset:<14} {actions[asset]['loaded']:>6} {actions[asset]['skipped']:>7}"
            f" {row_totals[asset]:>8}  {why}"
        )
    return lines


def main() -> int:
    started = time.perf_counter()
    with dg.DagsterInstance.get() as instance:
        result = run_all_partitions(instance)
    elapsed = time.perf_counter() - started
    print(
        f"run {result.run_id}: {'succeeded' if result.success else 'FAILED'} in {elapsed:.1f} s "
        f"({len(partition_keys())} species partitions)"
    )
    for line in summarize(os.environ[DATABASE_URL_VARIABLE], result.run_id):
        print("  " + line)
    if not result.success:
        for event in result.all_events:
            if event.is_step_failure and event.step_failure_data and event.step_failure_data.error:
                print(
                    f"  {event.step_key} failed: {event.step_failure_data.error.message.strip()}",
                    file=sys.stderr,
                )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
