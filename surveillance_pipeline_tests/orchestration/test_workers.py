"""`make workers` as a supervisor, and what happens to a step when its worker dies or runs long.

Real Celery workers on a private Redis, with no Dagster: the supervisor replaces a SIGKILLed worker under a
new node name and stops the rest with status 0 on Ctrl-C; a task that sleeps like a long step is started
once on a live worker, however long it runs past the visibility timeout, and is started again on the other
worker soon after its worker is SIGKILLed; waiting steps are taken by their priority.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
from celery import Celery
from dagster_celery.tags import DAGSTER_CELERY_STEP_PRIORITY_TAG

from surveillance_pipeline.definitions import defs
from surveillance_pipeline.orchestration.distributed import (
    QUEUE,
    SPECIES_STEP_PRIORITIES,
    STEP_PRIORITY_TAG,
    celery_settings,
    send_steps_by_priority,
)
from surveillance_pipeline.orchestration.partitions import species_partitions
from surveillance_pipeline_tests.support.celery_probe_task import NOTE_AND_SLEEP
from surveillance_pipeline_tests.support.celery_workers import workers_running
from surveillance_pipeline_tests.support.dagster_dev import PROJECT_ROOT
from surveillance_pipeline_tests.support.redis_server import PrivateRedis

pytestmark = [pytest.mark.distributed]

# Short, so the test sees a handover; the heartbeat and the scans then come every second.
VISIBILITY_TIMEOUT = 6


def _wait_for(predicate, seconds: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"waited {seconds} s for {what}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_the_supervisor_replaces_a_dead_worker_and_stops_all_with_status_0(tmp_path: Path):
    with PrivateRedis(tmp_path / "redis") as redis:
        output = tmp_path / "workers.out"
        env = {**os.environ, "REDIS_URL": redis.url}
        with output.open("wb") as sink:
            supervisor = subprocess.Popen(  # noqa: S603  # fixed argv, no shell
                [sys.executable, "-m", "surveillance_pipeline.orchestration.workers", "2"],
                cwd=PROJECT_ROOT,
                env=env,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            text = lambda: output.read_text(errors="replace")  # noqa: E731
            _wait_for(lambda: text().count(" ready.") >= 2, 90, "two workers ready")
            pids = dict(re.findall(r"(worker\d) pid (\d+)", text()))
            assert sorted(pids) == ["worker1", "worker2"]
            os.kill(int(pids["worker1"]), signal.SIGKILL)
            line = f"worker1 (pid {pids['worker1']}) died with signal 9; worker3 started"
            _wait_for(lambda: line in text(), 10, line)
            _wait_for(lambda: text().count(" ready.") >= 3, 90, "worker3 ready")
            assert "worker3@" in text()
            worker3 = _wait_for(
                lambda: [p for p in _children(supervisor.pid) if str(p) != pids["worker2"]],
                10,
                "worker3's pid",
            )

            # Ctrl-C at a terminal reaches the supervisor only: the workers have process groups of their own.
            supervisor.send_signal(signal.SIGINT)
            assert supervisor.wait(timeout=60) == 0, text()[-3000:]
            assert "workers: all stopped" in text()
            assert not [pid for pid in [int(pids["worker2"]), *worker3] if _alive(pid)]
            # Celery's warm shutdown, not a kill.
            assert text().count("worker: Warm shutdown") == 2, text()[-3000:]
        finally:
            if supervisor.poll() is None:
                os.killpg(supervisor.pid, signal.SIGKILL)
                supervisor.wait()


def _children(pid: int) -> list[int]:
    found = subprocess.run(  # noqa: S603  # fixed argv, no shell
        ["ps", "-o", "pid=", "--ppid", str(pid)],  # noqa: S607
        capture_output=True,
        text=True,
        check=False,
    )
    return [int(word) for word in found.stdout.split()]


def _starts(notes: Path, label: str) -> list[tuple[float, str]]:
    if not notes.exists():
        return []
    rows = [line.split() for line in notes.read_text().splitlines()]
    return [(float(row[0]), row[3]) for row in rows if row[1] == label and row[2] == "start"]


def test_a_long_step_runs_once_and_a_dead_workers_step_runs_again_soon(tmp_path: Path):
    with PrivateRedis(tmp_path / "redis") as redis:
        env = {
            **os.environ,
            "REDIS_URL": redis.url,
            "SURVEILLANCE_STEP_VISIBILITY_TIMEOUT": str(VISIBILITY_TIMEOUT),
        }
        client = Celery(broker=redis.url, backend=redis.url)
        notes = tmp_path / "notes.txt"
        include = ["--include", "surveillance_pipeline_tests.support.celery_probe_task"]
        with workers_running(env, tmp_path, []) as workers:
            for name in ("worker1", "worker2"):
                workers.start(name, extra_args=include)

            # A step four times as long as the visibility timeout, on a live worker: the other worker, idle
            # and scanning every second, never takes it.
            long = client.send_task(
                NOTE_AND_SLEEP, args=[str(notes), "long", 4 * VISIBILITY_TIMEOUT], queue=QUEUE
            )
            long.get(timeout=120)
            assert len(_starts(notes, "long")) == 1, notes.read_text()

            # A step whose worker dies: started again on the other worker within the timeout and a scan.
            client.send_task(NOTE_AND_SLEEP, args=[str(notes), "killed", 600], queue=QUEUE)
            first = _wait_for(lambda: _starts(notes, "killed"), 30, "the step's start")
            holder = first[0][1].split("@")[0]
            workers.kill(holder)
            killed_at = time.time()
            again = _wait_for(lambda: _starts(notes, "killed")[1:], 60, "the step's second start")
            handover = again[0][0] - killed_at
            assert again[0][1].split("@")[0] != holder
            print(f"handover {handover:.1f} s after the kill (visibility timeout {VISIBILITY_TIMEOUT} s)")
            assert handover < VISIBILITY_TIMEOUT + 4, handover


def test_a_free_worker_takes_the_waiting_step_of_highest_priority_first(tmp_path: Path):
    """dagster-celery sends priorities as RabbitMQ reads them (higher first); Redis serves the lowest first.
    Sent while no worker runs, in an order that is neither, the steps start highest first on one worker."""
    send_steps_by_priority()
    with PrivateRedis(tmp_path / "redis") as redis:
        env = {**os.environ, "REDIS_URL": redis.url}
        client = Celery(broker=redis.url, backend=redis.url)
        # The workers' own settings (the ten priority queues among them), as the run's executor has them.
        client.conf.update(celery_settings())
        notes = tmp_path / "notes.txt"
        sent = [4, 9, 5, 7, 6]
        results = [
            client.send_task(NOTE_AND_SLEEP, args=[str(notes), f"p{p}", 0], queue=QUEUE, priority=p)
            for p in sent
        ]
        include = ["--include", "surveillance_pipeline_tests.support.celery_probe_task"]
        with workers_running(env, tmp_path, []) as workers:
            workers.start("worker1", extra_args=include)
            for result in results:
                result.get(timeout=120)
        started = [label for _, label in sorted(_all_starts(notes))]
        assert started == ["p9", "p7", "p6", "p5", "p4"], notes.read_text()


def _all_starts(notes: Path) -> list[tuple[float, str]]:
    rows = [line.split() for line in notes.read_text().splitlines()]
    return [(float(row[0]), row[1]) for row in rows if row[2] == "start"]


def test_every_species_step_priority_names_a_species_asset_and_reaches_its_op():
    assert STEP_PRIORITY_TAG == DAGSTER_CELERY_STEP_PRIORITY_TAG
    species_assets = {
        key.to_user_string(): assets_def
        for assets_def in defs.assets or []
        if isinstance(assets_def, dg.AssetsDefinition) and assets_def.partitions_def == species_partitions
        for key in assets_def.keys
    }
    assert set(SPECIES_STEP_PRIORITIES) == set(species_assets)
    for name, priority in SPECIES_STEP_PRIORITIES.items():
        assert species_assets[name].op.tags[STEP_PRIORITY_TAG] == str(priority)
