"""``make workers N=2``: start N Celery workers for the distributed profile and stop them together.

Each worker is its own process (``celery -A surveillance_pipeline.celery_worker_app worker``), which could as
well run on another host with the same environment: the warehouse and Dagster storage variables, REDIS_URL,
and a SURVEILLANCE_DATA_DIR on shared storage. A worker executes one step at a time, in its own process
(``--pool solo``): the pid provenance records is the worker's, and a worker killed mid-step takes its step
with it, for Redis to hand to another worker (distributed.py).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

from surveillance_pipeline.core.settings import DISTRIBUTED_PROFILE, PROFILE_VARIABLE
from surveillance_pipeline.distributed import QUEUE

APP = "surveillance_pipeline.celery_worker_app"


def worker_command(name: str) -> list[str]:
    """The argv of one worker named ``name`` (Celery's node name: ``name@host``)."""
    return [
        sys.executable,
        "-m",
        "celery",
        "--app",
        APP,
        "worker",
        "--hostname",
        f"{name}@%h",
        "--queues",
        QUEUE,
        "--pool",
        "solo",
        "--loglevel",
        "INFO",
        # No broadcast chatter between workers: they share nothing but the queue.
        "--without-gossip",
        "--without-mingle",
    ]


def worker_environment() -> dict[str, str]:
    return {**os.environ, PROFILE_VARIABLE: DISTRIBUTED_PROFILE}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("count", type=int, help="how many workers to start")
    parser.add_argument("--prefix", default="worker", help="node names: <prefix><n>@<host>")
    arguments = parser.parse_args(argv)
    if arguments.count < 1:
        parser.error("start at least one worker")
    workers = [
        subprocess.Popen(worker_command(f"{arguments.prefix}{number}"), env=worker_environment())  # noqa: S603
        for number in range(1, arguments.count + 1)
    ]
    print(
        f"workers: {arguments.count} started (pids {', '.join(str(w.pid) for w in workers)});"
        " Ctrl-C stops them"
    )

    def stop(*_: object) -> None:
        for worker in workers:
            if worker.poll() is None:
                worker.send_signal(signal.SIGTERM)  # Celery's warm shutdown: the step in hand finishes

    signal.signal(signal.SIGTERM, stop)
    try:
        while all(worker.poll() is None for worker in workers):
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    stop()
    for worker in workers:
        worker.wait()
    return max((worker.returncode or 0) for worker in workers)


if __name__ == "__main__":
    raise SystemExit(main())
