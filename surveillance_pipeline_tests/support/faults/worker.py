"""One loader process for the fault suite: a plain ``dagster.materialize()`` of one target.

    SURVEILLANCE_DATABASE_URL=... \
        python -m surveillance_pipeline_tests.support.faults.worker occurrences DATA_DIR

The database URL comes from the environment (never argv, which ``ps`` shows). With ``--start-file`` the
worker imports everything first and then waits for that file, so several workers start their loads at
the same moment. It prints one JSON line: ``action``, ``rows`` and ``job_key`` (exit 0), or the root
cause of a failure, ``error``, ``message`` and ``connection_lost`` (exit 3). Fault points
(core/fault_points.py, faults/points.py) come from the environment.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import dagster as dg
import psycopg

from surveillance_pipeline.occurrences.assets import occurrences
from surveillance_pipeline.orchestration.resources import DataPaths, Warehouse
from surveillance_pipeline.snapshots.assets import devil_snapshot

DEVIL = "sarcophilus-harrisii"
FAILED = 3
ASSETS = {"occurrences": occurrences, "devil_snapshot": devil_snapshot}


def materialize_target(
    target: str, data_dir: Path, database_url: str, instance: dg.DagsterInstance | None = None
) -> dict[str, object]:
    """Materialize ``target`` (the devil's partition for occurrences); an ephemeral instance by default."""
    asset = ASSETS[target]
    result = dg.materialize(
        [asset],
        instance=instance or dg.DagsterInstance.ephemeral(),
        partition_key=DEVIL if target == "occurrences" else None,
        resources={"warehouse": Warehouse(database_url=database_url), "paths": DataPaths(root=str(data_dir))},
        # Only warnings and errors: a trial's table, not Dagster's step log, is what the suite shows.
        run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}},
    )
    [event] = result.asset_materializations_for_node(target)
    meta = {name: value.value for name, value in event.metadata.items()}
    return {"action": meta["action"], "rows": meta["rows"], "job_key": meta["job_key"]}


def root_cause(error: BaseException) -> BaseException:
    """The innermost exception: Dagster wraps what the asset raised in its own step error."""
    seen = error
    while True:
        inner = getattr(seen, "__cause__", None)
        # dagster's DagsterExecutionStepExecutionError keeps the user's exception in user_exception.
        inner = getattr(seen, "user_exception", None) or inner
        if inner is None or inner is seen:
            return seen
        seen = inner


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("target", choices=sorted(ASSETS))
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("--start-file", type=Path)
    parser.add_argument(
        "--shared-instance",
        action="store_true",
        help="use the instance in DAGSTER_HOME (shared storage, pools enforced) instead of an ephemeral one",
    )
    parser.add_argument(
        "--whole-reload",
        action="store_true",
        help="reload the partition whole even where a record-level delta would apply (its own fault points)",
    )
    arguments = parser.parse_args()
    if arguments.whole_reload:
        from surveillance_pipeline.occurrences import load

        load.DELTA_SHARE_LIMIT = -1.0
    instance = dg.DagsterInstance.get() if arguments.shared_instance else None
    if arguments.start_file is not None:
        deadline = time.monotonic() + 120
        while not arguments.start_file.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
    try:
        outcome = materialize_target(
            arguments.target, arguments.data_dir, os.environ["SURVEILLANCE_DATABASE_URL"], instance
        )
    except Exception as error:  # reported, not hidden: the suite reads this line and the exit code
        cause = root_cause(error)
        lost = isinstance(cause, psycopg.OperationalError)
        print(json.dumps({"error": type(cause).__name__, "message": str(cause), "connection_lost": lost}))
        return FAILED
    print(json.dumps(outcome))
    return 0


if __name__ == "__main__":
    sys.exit(main())
