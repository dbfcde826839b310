"""The Celery app a worker runs (make workers):
`celery -A surveillance_pipeline.orchestration.celery_worker_app worker`.

It registers dagster-celery's step task with the settings the executor uses (distributed.py), built from
the worker's own environment: REDIS_URL, the warehouse and Dagster storage variables, SURVEILLANCE_DATA_DIR.
A worker loads the code location itself for each step (from the run's origin), so nothing in it depends on
the process that launched the run.

While a worker executes a step it beats for it: every ``heartbeat_seconds()`` it sets the step's message's
time in kombu's ``unacked_index`` (the sorted set Redis's visibility timeout is measured on) to now. So a
step held by a live worker never looks abandoned, however long it runs, and a dead worker's step does
within the visibility timeout, when an idle worker puts it back on the queue (distributed.py).
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
import time
from typing import Any

import redis
from celery import signals
from dagster_celery.executor import CeleryExecutor
from dagster_celery.make_app import make_app
from kombu.transport.redis import Channel

from surveillance_pipeline.core.lazy_modules import import_heavy_modules
from surveillance_pipeline.core.long_lived import set_aside_long_lived_objects
from surveillance_pipeline.core.settings import CODE_LOCATION_MODULE
from surveillance_pipeline.orchestration.dagster_internals import create_step_task
from surveillance_pipeline.orchestration.distributed import (
    STEP_WORKER_VARIABLE,
    celery_settings,
    heartbeat_seconds,
    redis_url,
)

LOG = logging.getLogger(__name__)


class StepHeartbeat:
    """Keeps the messages this worker holds fresh in ``unacked_index``, from a thread of its own (a step
    runs in the worker's main thread, ``--pool solo``)."""

    def __init__(self, url: str, every: float) -> None:
        self.url = url
        self.every = every
        self.held: dict[str, str] = {}  # task id -> delivery tag
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None

    def hold(self, task_id: str, delivery_tag: str) -> None:
        with self.lock:
            self.held[task_id] = delivery_tag
            if self.thread is None:
                self.thread = threading.Thread(target=self._beat, name="step-heartbeat", daemon=True)
                self.thread.start()

    def release(self, task_id: str) -> None:
        with self.lock:
            self.held.pop(task_id, None)

    def _beat(self) -> None:
        client = redis.Redis.from_url(self.url)
        while True:
            time.sleep(self.every)
            with self.lock:
                tags = list(self.held.values())
            if not tags:
                continue
            try:
                # XX: only messages still unacknowledged; an acknowledged one is never brought back.
                client.zadd(Channel.unacked_index_key, dict.fromkeys(tags, time.time()), xx=True)
            except redis.RedisError as error:  # the next beat tries again; five may fail before a handover
                LOG.warning("step heartbeat failed: %s", error)


HEARTBEAT = StepHeartbeat(redis_url(), heartbeat_seconds())


@signals.task_received.connect
def _hold(request: Any, **_: Any) -> None:
    HEARTBEAT.hold(request.id, request.message.delivery_tag)


@signals.task_postrun.connect
def _release(task_id: str, **_: Any) -> None:
    HEARTBEAT.release(task_id)


@signals.task_revoked.connect
def _release_revoked(request: Any, **_: Any) -> None:
    HEARTBEAT.release(request.id)


@signals.worker_init.connect
def _mark_step_worker(**_: Any) -> None:
    """Read by Warehouse: a step executed here must not claim the run as this process's (run_health.py),
    and compares its settings with the run's (run_settings.py). Set when a worker starts, not when this
    module is imported: a process that only imports the app (a test, a tool naming a task) is no worker.

    Then the code location and the heavy libraries its steps use are imported, before the worker says
    ``ready.``: each step loads its job from the run's origin, and the first step a worker took paid the
    import (1.0-1.7 s here, and 0.4 s more for the libraries), in the middle of a run, the observation's
    first step waiting on it. Loaded from the module the task names, as before; this only finds it
    imported."""
    os.environ[STEP_WORKER_VARIABLE] = "1"
    importlib.import_module(CODE_LOCATION_MODULE)
    import_heavy_modules()
    # Again: the code location's own call came before these libraries were imported.
    set_aside_long_lived_objects()


app = make_app(
    CeleryExecutor.for_cli(
        broker=redis_url(), backend=redis_url(), config_source=celery_settings()
    ).app_args()
)
# dagster-celery's step task, with one Dagster instance per worker instead of one per step.
execute_plan = create_step_task(app)
