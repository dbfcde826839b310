"""``python -m bench.step_windows SINCE``: when each step of the runs created since SINCE (epoch seconds)
started and ended, as JSON ``[[start, end, step_key], ...]`` by start, read from the Dagster instance of
$DAGSTER_HOME through Dagster's public API. The whole-run bench runs it in the environment of the make run
it measured, to tell which step its peak RSS came in."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime

import dagster as dg

STEP_ENDS = {dg.DagsterEventType.STEP_SUCCESS, dg.DagsterEventType.STEP_FAILURE}


def step_windows(instance: dg.DagsterInstance, since: float) -> list[tuple[float, float, str]]:
    created_after = datetime.fromtimestamp(since, tz=UTC)
    windows: list[tuple[float, float, str]] = []
    for record in instance.get_run_records(filters=dg.RunsFilter(created_after=created_after)):
        started: dict[str, float] = {}
        for entry in instance.all_logs(
            record.dagster_run.run_id, of_type={dg.DagsterEventType.STEP_START, *STEP_ENDS}
        ):
            if entry.step_key is None or entry.dagster_event is None:
                continue
            if entry.dagster_event.event_type == dg.DagsterEventType.STEP_START:
                started[entry.step_key] = entry.timestamp
            else:
                windows.append(
                    (started.get(entry.step_key, entry.timestamp), entry.timestamp, entry.step_key)
                )
    return sorted(windows)


if __name__ == "__main__":
    with dg.DagsterInstance.get() as found:
        print(json.dumps(step_windows(found, float(sys.argv[1]))))
