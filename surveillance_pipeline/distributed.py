"""The distributed profile: species runs execute their steps on Celery workers, through dagster-celery.

``SURVEILLANCE_PROFILE=distributed`` switches it on. Then every job runs with dagster-celery's executor:
the run's process (launched by the daemon, or ``make run``) submits each step as a Celery task to Redis
(``REDIS_URL``), and whichever worker (``make workers N=2``, here or on other hosts) takes it executes the
step against the same warehouse, the same Dagster instance and the same ``SURVEILLANCE_DATA_DIR``, which
must be shared storage when the workers are on several hosts. A backfill of many species is split into runs
of ``SURVEILLANCE_PARTITIONS_PER_RUN`` species, so different species run on different workers at once, and
each species-partitioned asset's pool admits ``SURVEILLANCE_PARTITION_WRITERS`` steps (different runs,
so different species); one writer per partition still holds, by the partition's advisory lock.

A worker that dies takes its step's Celery message with it unacknowledged: Redis hands the step to
another worker after ``SURVEILLANCE_STEP_VISIBILITY_TIMEOUT`` seconds, and the step runs again. That is
safe because every load is a job-key refresh: what the dead worker committed is skipped, what it had not
committed was rolled back with its connection. The same timeout bounds a step's run time: a step still
running after it is started a second time by another worker (the advisory locks serialize the two, and
the second skips what the first loaded), so it must exceed the longest step.

The default (``local``) profile needs none of this: one process per run, no Redis.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import dagster as dg

from surveillance_pipeline.core.settings import (
    DEFAULT_PARTITION_WRITERS,
    DEFAULT_PARTITIONS_PER_RUN,
    DEFAULT_REDIS_URL,
    DEFAULT_STEP_VISIBILITY_TIMEOUT,
    DISTRIBUTED_PROFILE,
    PARTITION_WRITERS_VARIABLE,
    PARTITIONS_PER_RUN_VARIABLE,
    REDIS_URL_VARIABLE,
    STEP_VISIBILITY_TIMEOUT_VARIABLE,
    positive_int,
    profile,
)

# Celery's queue for our steps (dagster-celery's default queue).
QUEUE = "dagster"
# Set in a Celery worker's process (celery_worker_app.py): it executes steps of other processes' runs.
STEP_WORKER_VARIABLE = "SURVEILLANCE_STEP_WORKER"
# One run, one process: our steps form chains, and on two cores each extra process costs seconds of
# imports while buying no parallelism. A step runs once its upstream steps have handed on their outputs,
# even when one of them then failed: a species that fails fails its own partitions (reporting.py), and the
# other species go on downstream.
LOCAL_EXECUTOR = dg.in_process_executor.configured(
    {"step_dependency_config": {"require_upstream_step_success": False}}, name="in_process_partitions"
)


def is_distributed() -> bool:
    return profile() == DISTRIBUTED_PROFILE


def in_step_worker() -> bool:
    """Whether this process is a Celery worker, executing a step of a run that lives in another process."""
    return os.environ.get(STEP_WORKER_VARIABLE) == "1"


def redis_url() -> str:
    return os.environ.get(REDIS_URL_VARIABLE, "").strip() or DEFAULT_REDIS_URL


def celery_settings() -> dict[str, Any]:
    """The Celery settings the executor and the workers share (Celery's lowercase names).

    Acknowledged late, and rejected back to the queue when the worker process is lost, so a step a dead
    worker held is delivered again instead of lost; one message at a time per worker, so a busy worker
    never sits on steps another could run.
    """
    return {
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "broker_connection_retry_on_startup": True,
        "broker_transport_options": {
            "visibility_timeout": positive_int(
                STEP_VISIBILITY_TIMEOUT_VARIABLE, DEFAULT_STEP_VISIBILITY_TIMEOUT
            ),
            # dagster-celery's defaults for connecting, kept.
            "max_retries": 3,
            "interval_start": 0,
            "interval_step": 0.2,
            "interval_max": 0.5,
        },
    }


def executor() -> dg.ExecutorDefinition:
    """The code location's executor for the profile in force."""
    if not is_distributed():
        return LOCAL_EXECUTOR
    from celery.exceptions import DuplicateTaskNameWarning
    from dagster_celery import celery_executor  # only the distributed profile needs Celery

    # dagster-celery registers its step task again for every step it submits; Celery 5.7 warns each time,
    # a dozen lines per step of noise in every run's output, about a registration that is the same task.
    warnings.filterwarnings("ignore", category=DuplicateTaskNameWarning)

    # A REDIS_URL may hold a password: then the executor reads it from the environment at run time, and
    # the definitions (shown in the UI) hold only the variable's name.
    broker: str | dict[str, str] = (
        {"env": REDIS_URL_VARIABLE} if os.environ.get(REDIS_URL_VARIABLE, "").strip() else DEFAULT_REDIS_URL
    )
    return celery_executor.configured(
        {"broker": broker, "backend": broker, "config_source": celery_settings()},
        name="celery_workers",
    )


def partitions_per_run() -> int:
    return positive_int(PARTITIONS_PER_RUN_VARIABLE, DEFAULT_PARTITIONS_PER_RUN)


def partition_writers() -> int:
    """Steps of one species-partitioned asset that may run at once: 1, unless distributed."""
    if not is_distributed():
        return 1
    return positive_int(PARTITION_WRITERS_VARIABLE, DEFAULT_PARTITION_WRITERS)


def species_backfill_policy() -> dg.BackfillPolicy:
    """One run for a whole range on one machine (each run costs seconds of process start); runs of a few
    species each when workers can take them side by side."""
    if is_distributed():
        return dg.BackfillPolicy.multi_run(max_partitions_per_run=partitions_per_run())
    return dg.BackfillPolicy.single_run()
