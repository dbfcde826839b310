"""``make workers N=2``: keep N Celery workers running for the distributed profile, and stop them together.

Each worker is its own process (``celery -A surveillance_pipeline.orchestration.celery_worker_app
worker``), which could as
well run on another host with the same environment: the warehouse and Dagster storage variables, REDIS_URL,
the data-shaping settings of the runs (run_settings.py) and a SURVEILLANCE_DATA_DIR on shared storage. A
worker executes one step at a time, in its own process (``--pool solo``): the pid provenance records is the
worker's.

This process supervises them. A worker that dies is replaced by a fresh one under a new node name (worker3
when worker1 died: Celery's node names must be unique, and the dead one's may still be known to Redis);
the dead worker's step goes back to the queue once its heartbeat has been missing for the visibility
timeout (distributed.py). Ctrl-C or SIGTERM stops every worker with Celery's warm shutdown (each finishes
its step in hand) and ends with status 0; a second Ctrl-C stops them at once (cold shutdown: their steps
go back to the queue).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys
import time

from surveillance_pipeline.core.settings import DISTRIBUTED_PROFILE, PROFILE_VARIABLE
from surveillance_pipeline.orchestration.distributed import QUEUE

APP = "surveillance_pipeline.orchestration.celery_worker_app"
# A worker that dies sooner than this after its start is restarted after a growing pause (a broken
# environment would otherwise restart it in a tight loop).
QUICK_DEATH_SECONDS = 10
MAX_PAUSE_SECONDS = 60
PR_SET_PDEATHSIG = 1


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


def _own_group_dying_with_us() -> None:
    """In the worker, before exec: out of the terminal's process group, so Ctrl-C reaches only the
    supervisor, which stops each worker once; and SIGTERMed (a warm shutdown) if the supervisor dies."""
    os.setpgid(0, 0)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def how_it_ended(returncode: int) -> str:
    if returncode < 0:
        return f"died with signal {-returncode}"
    return f"exited with status {returncode}"


class Supervisor:
    """N workers named <prefix><n>, each replaced under the next unused number when it dies."""

    def __init__(self, count: int, prefix: str) -> None:
        self.count = count
        self.prefix = prefix
        self.numbers_used = 0
        self.workers: dict[str, tuple[subprocess.Popen[bytes], float]] = {}
        self.stopping = 0  # signals received: 1 warm shutdown, 2 and more cold
        self.quick_deaths = 0

    def start_one(self) -> str:
        self.numbers_used += 1
        name = f"{self.prefix}{self.numbers_used}"
        process = subprocess.Popen(  # noqa: S603  # fixed argv, no shell
            worker_command(name),
            env=worker_environment(),
            preexec_fn=_own_group_dying_with_us,  # noqa: PLW1509  # no threads in this process
        )
        self.workers[name] = (process, time.monotonic())
        if self.stopping:  # a signal came while it started: it stops with the others
            process.send_signal(signal.SIGTERM)
        return name

    def on_signal(self, *_: object) -> None:
        self.stopping += 1
        # Celery: SIGTERM is the warm shutdown (the step in hand finishes), SIGQUIT the cold one.
        chosen = signal.SIGTERM if self.stopping == 1 else signal.SIGQUIT
        print(
            "workers: stopping; each finishes its step in hand (Ctrl-C again to stop now)"
            if self.stopping == 1
            else "workers: stopping now; steps in hand go back to the queue",
            flush=True,
        )
        for process, _started in self.workers.values():
            if process.poll() is None:
                process.send_signal(chosen)

    def replace_the_dead(self) -> None:
        for name, (process, started) in list(self.workers.items()):
            if process.returncode is None and process.poll() is None:
                continue
            del self.workers[name]
            if self.stopping:
                continue
            lived = time.monotonic() - started
            self.quick_deaths = self.quick_deaths + 1 if lived < QUICK_DEATH_SECONDS else 0
            if self.quick_deaths:
                pause = min(MAX_PAUSE_SECONDS, 2 ** (self.quick_deaths - 1))
                print(f"workers: {name} lived {lived:.0f} s; waiting {pause} s before the next", flush=True)
                self._sleep(pause)
                if self.stopping:
                    return
            replacement = self.start_one()
            print(
                f"{name} (pid {process.pid}) {how_it_ended(process.returncode)}; {replacement} started",
                flush=True,
            )

    def _sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not self.stopping:
            time.sleep(0.2)

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.on_signal)
        signal.signal(signal.SIGINT, self.on_signal)
        for _ in range(self.count):
            self.start_one()
        print(
            f"workers: {self.count} started ({self._listing()}); wait for each one's `ready.`;"
            " Ctrl-C stops them",
            flush=True,
        )
        while not self.stopping:
            self.replace_the_dead()
            time.sleep(0.5)
        while self.workers:
            self.replace_the_dead()
            time.sleep(0.2)
        print("workers: all stopped", flush=True)
        return 0

    def _listing(self) -> str:
        return ", ".join(f"{name} pid {process.pid}" for name, (process, _started) in self.workers.items())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("count", type=int, help="how many workers to keep running")
    parser.add_argument("--prefix", default="worker", help="node names: <prefix><n>@<host>")
    arguments = parser.parse_args(argv)
    if arguments.count < 1:
        parser.error("start at least one worker")
    return Supervisor(arguments.count, arguments.prefix).run()


if __name__ == "__main__":
    raise SystemExit(main())
