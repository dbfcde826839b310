"""Named fault points, so the fault suite can kill or freeze a load at an exact moment.

A process crash is only worth testing where it can hurt: after a partition's rows were deleted, in the
middle of COPY, just before COMMIT. Timers and sleeps hit those moments by luck; a named point hits them
every time. The suite (``surveillance_pipeline_tests/faults``) starts a loader with
``SURVEILLANCE_FAULT_POINT=<name>``; when the loader reaches that point it reports its database backend's
pid in ``SURVEILLANCE_FAULT_SIGNAL`` (a file) and then either SIGKILLs itself (``kill``, the default) or
waits until ``<signal>.release`` exists (``block``), while the suite terminates its connection or stops
the server.

Unset, a fault point is one dictionary lookup and does nothing: production never sets the variable.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psycopg

FAULT_POINT_VARIABLE = "SURVEILLANCE_FAULT_POINT"
FAULT_ACTION_VARIABLE = "SURVEILLANCE_FAULT_ACTION"
FAULT_SIGNAL_VARIABLE = "SURVEILLANCE_FAULT_SIGNAL"
# Set: the point fires only while its signal file does not exist yet, so of the runs a long-lived server
# (dagster dev) starts with one environment, only the first is killed.
FAULT_ONCE_VARIABLE = "SURVEILLANCE_FAULT_ONCE"
KILL = "kill"
BLOCK = "block"
# The points the loaders name; the suite iterates over these.
AFTER_DELETE = "after_delete"
MID_COPY = "mid_copy"
BEFORE_COMMIT = "before_commit"
FAULT_POINTS = (AFTER_DELETE, MID_COPY, BEFORE_COMMIT)
# A blocked loader gives up after this long, so a broken suite cannot leave it hanging forever.
BLOCK_LIMIT_SECONDS = 300.0


def fault_point(name: str, conn: psycopg.Connection | None = None) -> None:
    """Kill or block this process when ``SURVEILLANCE_FAULT_POINT`` names ``name``; otherwise nothing."""
    if os.environ.get(FAULT_POINT_VARIABLE) != name:
        return
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
