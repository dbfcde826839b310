"""What a fault point does when the fault suite arms it: kill or freeze the load at that exact moment.

A process crash is only worth testing where it can hurt: after a partition's rows were deleted, in the
middle of COPY, just before COMMIT. Timers and sleeps hit those moments by luck; a named point hits them
every time. The suite (``surveillance_pipeline_tests/faults``) starts a loader with
``SURVEILLANCE_FAULT_POINT=<name>``; when the loader reaches that point it reports its database backend's
pid in ``SURVEILLANCE_FAULT_SIGNAL`` (a file) and then either SIGKILLs itself (``kill``, the default) or
waits until ``<signal>.release`` exists (``block``), while the suite terminates its connection or stops
the server.

The product only names its points and calls ``surveillance_pipeline.core.fault_points.fault_point``, a
no-op unless ``SURVEILLANCE_FAULT_POINT`` is set; then it imports this module and calls ``fire``.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psycopg

from surveillance_pipeline.core.fault_points import (  # noqa: F401  # re-exported for the suite
    AFTER_DELETE,
    BEFORE_COMMIT,
    FAULT_POINT_VARIABLE,
    FAULT_POINTS,
    MID_COPY,
)

FAULT_ACTION_VARIABLE = "SURVEILLANCE_FAULT_ACTION"
FAULT_SIGNAL_VARIABLE = "SURVEILLANCE_FAULT_SIGNAL"
# Set: the point fires only while its signal file does not exist yet, so of the runs a long-lived server
# (dagster dev) starts with one environment, only the first is killed.
FAULT_ONCE_VARIABLE = "SURVEILLANCE_FAULT_ONCE"
KILL = "kill"
BLOCK = "block"
# A blocked loader gives up after this long, so a broken suite cannot leave it hanging forever.
BLOCK_LIMIT_SECONDS = 300.0


def fire(name: str, conn: psycopg.Connection | None = None) -> None:
    """Kill or block this process at point ``name`` (``SURVEILLANCE_FAULT_POINT`` named it)."""
    signal_path = os.environ.get(FAULT_SIGNAL_VARIABLE)
    if signal_path and os.environ.get(FAULT_ONCE_VARIABLE) and Path(signal_path).exists():
        return
    if signal_path:
        backend = conn.info.backend_pid if conn is not None else 0
        staging = Path(f"{signal_path}.staging")
        staging.write_text(f"{name} {os.getpid()} {backend}\n", encoding="utf-8")
        # Renamed into place, so the suite never reads half a line.
        os.replace(staging, signal_path)
    if os.environ.get(FAULT_ACTION_VARIABLE, KILL) == BLOCK and signal_path:
        release = Path(f"{signal_path}.release")
        deadline = time.monotonic() + BLOCK_LIMIT_SECONDS
        while not release.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        return
    os.kill(os.getpid(), signal.SIGKILL)


def held_before_commit(signal_path: Path) -> dict[str, str]:
    """The environment that holds a loader's first load just before its COMMIT, once: it reports in
    ``signal_path`` and waits for ``<signal_path>.release`` (a worker started with it, say)."""
    return {
        FAULT_POINT_VARIABLE: BEFORE_COMMIT,
        FAULT_ACTION_VARIABLE: BLOCK,
        FAULT_SIGNAL_VARIABLE: str(signal_path),
        FAULT_ONCE_VARIABLE: "1",
    }
