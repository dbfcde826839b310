"""``make run``: materialize every asset on the lab data, then summarize what each asset did.

One run covers all 71 species partitions of the species-partitioned assets (not one process per partition),
and one more run the unpartitioned assets, both against the project's Dagster instance so they show in the
UI. The summary comes from the provenance rows the runs wrote.
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
from surveillance_pipeline.reporting import partition_range_tags
from surveillance_pipeline.settings import DATABASE_URL_VARIABLE

QUIET_CONSOLE = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
ASSET_ORDER = (
    "gbif_raw",
    "gbif_derived",
    "occurrences",
    "occurrence_sample",
    "occurrence_sample_summary",
)


def run_all_partitions(
    instance: dg.DagsterInstance, definitions: dg.Definitions = defs
) -> list[dg.ExecuteInProcessResult]:
    """One run over every species partition, then one of the unpartitioned assets if the first succeeded."""
    keys = partition_keys()
    species_run = definitions.resolve_job_def("species_assets").execute_in_process(
        instance=instance,
        tags=partition_range_tags(keys[0], keys[-1]),
        run_config=QUIET_CONSOLE,
        raise_on_error=False,
    )
    if not species_run.success:
        return [species_run]
    whole_run = definitions.resolve_job_def("whole_target_assets").execute_in_process(
        instance=instance, run_config=QUIET_CONSOLE, raise_on_error=False
    )
    return [species_run, whole_run]


def summarize(database_url: str, run_ids: list[str]) -> list[str]:
    """One line per asset: partitions loaded and skipped, rows, and the reasons given."""
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT asset, action, reason, rows FROM provenance WHERE run_id = ANY(%s)", [run_ids]
        ).fetchall()
    actions: dict[str, Counter[str]] = defaultdict(Counter)
    reasons: dict[str, Counter[str]] = defaultdict(Counter)
    row_totals: Counter[str] = Counter()
    for asset, action, reason, row_count in rows:
        actions[asset][action] += 1
        reasons[asset][reason] += 1
        row_totals[asset] += row_count
    width = max([len("asset"), *map(len, actions)])
    lines = [f"{'asset':<{width}} {'loaded':>6} {'skipped':>7} {'rows':>8}  reason"]
    for asset in sorted(actions, key=lambda a: (ASSET_ORDER.index(a) if a in ASSET_ORDER else 99, a)):
        why = ", ".join(f"{reason} ({count})" for reason, count in sorted(reasons[asset].items()))
        lines.append(
            f"{asset:<{width}} {actions[asset]['loaded']:>6} {actions[asset]['skipped']:>7}"
            f" {row_totals[asset]:>8}  {why}"
        )
    return lines


def _failures(result: dg.ExecuteInProcessResult) -> list[str]:
    return [
        f"{event.step_key} failed: {event.step_failure_data.error.message.strip()}"
        for event in result.all_events
        if event.is_step_failure and event.step_failure_data and event.step_failure_data.error
    ]


def main() -> int:
    started = time.perf_counter()
    with dg.DagsterInstance.get() as instance:
        results = run_all_partitions(instance)
    elapsed = time.perf_counter() - started
    succeeded = all(r.success for r in results)
    print(
        f"{len(results)} runs ({', '.join(r.run_id[:8] for r in results)}): "
        f"{'succeeded' if succeeded else 'FAILED'} in {elapsed:.1f} s"
        f" ({len(partition_keys())} species partitions)"
    )
    for line in summarize(os.environ[DATABASE_URL_VARIABLE], [r.run_id for r in results]):
        print("  " + line)
    for result in results:
        for failure in _failures(result):
            print("  " + failure, file=sys.stderr)
    return 0 if succeeded else 1


if __name__ == "__main__":
    raise SystemExit(main())
