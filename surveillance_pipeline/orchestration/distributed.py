"""The distributed profile: species runs execute their steps on Celery workers, through dagster-celery.

``SURVEILLANCE_PROFILE=distributed`` switches it on. Then every job runs with dagster-celery's executor:
the run's process (launched by the daemon, or ``make run``) submits each step as a Celery task to Redis
(``REDIS_URL``), and whichever worker (``make workers N=2``, here or on other hosts) takes it executes the
step against the same warehouse, the same Dagster instance and the same ``SURVEILLANCE_DATA_DIR``, which
must be shared storage when the workers are on several hosts. A backfill of many species is split into runs
of ``SURVEILLANCE_PARTITIONS_PER_RUN`` species, so different species run on different workers at once, and
each species-partitioned asset's pool admits ``SURVEILLANCE_PARTITION_WRITERS`` steps (different runs,
so different species); one writer per partition still holds, by the partition's advisory lock.

A worker that dies leaves its step's Celery message in Redis unacknowledged. While a worker lives it
marks the step it executes as alive every few seconds (celery_worker_app.py); once a step has gone
``SURVEILLANCE_STEP_VISIBILITY_TIMEOUT`` seconds (30) unmarked, an idle worker puts it back on the queue
and the step runs again. That is safe because every load is a job-key refresh: what the dead worker
committed is skipped, what it had not committed was rolled back with its connection. A long step on a live
worker is never started twice, whatever its length.

The default (``local``) profile needs none of this: one process per run, no Redis.
"""

from __future__ import annotations

import itertools
import os
import time
import warnings
from collections.abc import Iterable, Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

import dagster as dg

from surveillance_pipeline.core.settings import (
    DEFAULT_PARTITION_WRITERS,
    DEFAULT_PARTITIONS_PER_RUN,
    DEFAULT_REDIS_URL,
    DEFAULT_STEP_VISIBILITY_TIMEOUT,
    PARTITION_WRITERS_VARIABLE,
    PARTITIONS_PER_RUN_VARIABLE,
    REDIS_URL_VARIABLE,
    STEP_VISIBILITY_TIMEOUT_VARIABLE,
    is_distributed,
    positive_int,
)
from surveillance_pipeline.orchestration import run_settings
from surveillance_pipeline.orchestration.dagster_internals import (
    SerializableErrorInfo,
    celery_execution_loop,
    set_celery_step_poll_seconds,
)
from surveillance_pipeline.orchestration.error_words import one_line, raised_by_the_step
from surveillance_pipeline.orchestration.run_health import claim_run_process

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


# How often a run's process looks whether its steps on the workers are done, to send the steps that wait
# on them. dagster-celery's loop sleeps its TICK_SECONDS (1 s) between looks, so every step of a run's
# chain (raw, derived, occurrences, then their checks and downstream assets) waited half a second on
# average before its successor was even sent: about 5 s per run of a dozen chained steps (assets and
# checks), at the lab's size as much as a step's own work. A look is a few Redis GETs, one per step in
# flight. test_dagster_internals.py pins that the loop pauses on that module global.
STEP_POLL_SECONDS = 0.2

# dagster-celery's step priority (its DAGSTER_CELERY_STEP_PRIORITY_TAG; test_workers.py pins the name):
# which waiting step a free worker takes first, higher first. Each species asset's is the work still ahead
# of it in its run, so the chain that decides when a run ends never waits behind a side branch of another
# run. Taken in the order they were sent (first in, first out), the two species runs of a 600,000-record
# download ended 5 s apart, the second run's region_assignment alone at the end: the first run's
# geocoded_localities had taken the worker its derive was waiting for. Seconds per run (half the download,
# 2026-12-05): gbif_derived 1.5, then occurrences 5, then region_assignment 4.7 (which also waits for
# geocoded_localities, 3.3), masked_release 3.3 and occurrence_sample 1.1. Every other step keeps
# dagster-celery's default, 5.
STEP_PRIORITY_TAG = "dagster-celery/priority"
SPECIES_STEP_PRIORITIES = {
    "gbif_raw": 9,
    "gbif_derived": 9,
    "occurrences": 8,
    "geocoded_localities": 7,
    "region_assignment": 6,
    # masked_release waits for it under the default release policy.
    "occurrence_quality": 6,
    "masked_release": 5,
    "occurrence_sample": 4,
}
# Celery's priorities, 0-9. Redis serves a queue's lowest number first, so the priority a step is sent with
# is turned over (9 - p) as it is published (``_redis_priority``), and each of the ten is a queue of its own
# (kombu groups them in fours by default: 4 and 5 were one).
MAX_PRIORITY = 9


def step_priority_tags(asset_name: str) -> dict[str, str]:
    """The op tags that give a species asset's step its place among waiting steps (none for the others)."""
    priority = SPECIES_STEP_PRIORITIES.get(asset_name)
    return {} if priority is None else {STEP_PRIORITY_TAG: str(priority)}


def send_steps_by_priority() -> None:
    """From now on in this process, a task is published with its priority turned over for Redis (once,
    however often it is called): dagster-celery sends a step's priority as RabbitMQ reads it (the higher
    first), and a run's ready steps in that order; Redis serves the lowest first."""
    from celery import signals

    signals.before_task_publish.connect(
        _redis_priority, weak=False, dispatch_uid=f"{__name__}.redis_priority"
    )


def _redis_priority(properties: dict[str, Any] | None = None, **_: Any) -> None:
    """Celery's ``before_task_publish`` receiver: the task's priority, turned over (9 - p)."""
    if properties is not None and isinstance(properties.get("priority"), int):
        properties["priority"] = MAX_PRIORITY - min(max(properties["priority"], 0), MAX_PRIORITY)


def in_step_worker() -> bool:
    """Whether this process is a Celery worker, executing a step of a run that lives in another process."""
    return os.environ.get(STEP_WORKER_VARIABLE) == "1"


def redis_url() -> str:
    return os.environ.get(REDIS_URL_VARIABLE, "").strip() or DEFAULT_REDIS_URL


def step_visibility_timeout() -> int:
    return positive_int(STEP_VISIBILITY_TIMEOUT_VARIABLE, DEFAULT_STEP_VISIBILITY_TIMEOUT)


def heartbeat_seconds() -> float:
    """How often a worker marks the step it holds as alive, and how often an idle worker looks for steps
    whose worker stopped doing so: a sixth of the visibility timeout, so five beats may be missed."""
    return max(1.0, step_visibility_timeout() / 6)


def celery_settings() -> dict[str, Any]:
    """The Celery settings the executor and the workers share (Celery's lowercase names).

    Acknowledged late, so a step a dead worker held stays in Redis, unacknowledged, instead of being lost;
    one message at a time per worker, so a busy worker never sits on steps another could run.

    Redis hands an unacknowledged message to another worker once its time in kombu's ``unacked_index``
    is older than the visibility timeout. A worker keeps that time fresh for the step it executes, every
    ``heartbeat_seconds()`` (celery_worker_app.py), so a step running for hours on a live worker is never
    handed on, while a dead worker's step is, within the timeout plus one scan. Each idle worker scans
    every ``heartbeat_seconds()`` (kombu's default is every 10 x 10 s).
    """
    timeout = step_visibility_timeout()
    scan = max(1, round(heartbeat_seconds()))
    return {
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "broker_connection_retry_on_startup": True,
        "broker_transport_options": {
            "priority_steps": list(range(MAX_PRIORITY + 1)),
            "visibility_timeout": timeout,
            "unacked_restore_interval": scan,
            "unacked_restore_throttle": 1,
            # A worker that dies while scanning leaves the scan's lock behind: it expires with the timeout.
            "unacked_mutex_expire": timeout,
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

    send_steps_by_priority()  # in whichever process sends the steps: the run's

    # dagster-celery registers its step task again for every step it submits; Celery 5.7 warns each time,
    # a dozen lines per step of noise in every run's output, about a registration that is the same task.
    warnings.filterwarnings("ignore", category=DuplicateTaskNameWarning)

    # A REDIS_URL may hold a password: then the executor reads it from the environment at run time, and
    # the definitions (shown in the UI) hold only the variable's name.
    broker: str | dict[str, str] = (
        {"env": REDIS_URL_VARIABLE} if os.environ.get(REDIS_URL_VARIABLE, "").strip() else DEFAULT_REDIS_URL
    )
    return _settings_recording(celery_executor).configured(
        {"broker": broker, "backend": broker, "config_source": celery_settings()},
        name="celery_workers",
    )


def _settings_recording(celery_executor: dg.ExecutorDefinition) -> dg.ExecutorDefinition:
    """dagster-celery's executor, which first tags the run with the data-shaping settings its process
    resolved (run_settings.py), before any step leaves for a worker: the one truth each step compares with.
    """
    from dagster_celery.executor import CeleryExecutor

    class SettingsRecordingCeleryExecutor(CeleryExecutor):
        def execute(self, plan_context: Any, execution_plan: Any) -> Any:
            plan_context.instance.add_run_tags(
                plan_context.run_id, run_settings.as_tags(run_settings.resolve())
            )
            # The run's process, not a worker, is the run's: it is tagged here, where it lives, and it
            # fails the dead runs of its host first, as a run does in the local profile (run_health.py).
            # Its resources are set up on the workers, which must not claim the run.
            claim_run_process(
                plan_context.instance, plan_context.dagster_run, plan_context.log, stop_promptly=False
            )
            watch = BrokerRestartWatch(redis_url())
            return _in_its_own_words(
                celery_execution_loop(plan_context, execution_plan, watch.result),
                plan_context.instance,
                plan_context.run_id,
            )

    def create(init_context: dg.InitExecutorContext) -> dg.Executor:
        # Set before the run's loop starts (it reads the value at each pause).
        set_celery_step_poll_seconds(STEP_POLL_SECONDS)
        made = celery_executor.executor_creation_fn(init_context)  # type: ignore[misc]
        assert isinstance(made, CeleryExecutor)
        arguments = made.app_args()
        # app_args gives the settings wrapped for Celery; the constructor takes them as a dict.
        arguments["config_source"] = dict(vars(arguments["config_source"]))
        return SettingsRecordingCeleryExecutor(**arguments)

    return dg.ExecutorDefinition(
        name=celery_executor.name,
        config_schema=celery_executor.config_schema,  # type: ignore[arg-type]
        executor_creation_fn=create,
        requirements=dg.multiple_process_executor_requirements(),
        description=celery_executor.description,
    )


def _in_its_own_words(events: Iterator[Any], instance: dg.DagsterInstance, run_id: str) -> Iterator[Any]:
    """The run's events; and when the run fails for a reason of the executor's, a failure that says it in
    words the user can act on, with the original error as its cause (shown below it in the UI).

    - **Redis stopped answering.** dagster-celery's loop asks Redis, many times a second, whether each
      step sent is done; stopped for a few seconds, Redis fails every run in flight with Celery's
      "Retry limit exceeded while trying to reconnect to the Celery result store backend. The Celery
      application must be restarted.", which names neither Redis nor what to do (measured 2026-12-06: the
      three runs of a backfill failed 3 to 27 s after Redis stopped).
    - **Redis restarted empty** (``BrokerRestartWatch``): the steps queued in it are gone, and the loop
      would wait for their results for good; the run stops, saying so.
    - **A step failed on a worker before it could report it** (a worker's resources refusing the run's
      settings): dagster-celery fails the run with "DagsterSubprocessError: During celery execution errors
      occurred in workers: [gbif_raw]: DagsterError: Error executing resource_fn on ResourceDefinition
      paths", the reason lost on its way back through Celery (seen 2026-12-06). The worker stored it in the
      run's event log (RESOURCE_INIT_FAILURE, or STEP_FAILURE), whence the failure takes it.
    """
    try:
        yield from events
    except BrokerRestarted as error:
        raise dg.Failure(description=str(error)) from error
    except Exception as error:
        cause = broker_failure(error)
        if cause is not None:
            raise dg.Failure(description=broker_lost_message(cause)) from error
        if type(error).__name__ == "DagsterSubprocessError":
            records = instance.get_records_for_run(
                run_id,
                of_type={dg.DagsterEventType.RESOURCE_INIT_FAILURE, dg.DagsterEventType.STEP_FAILURE},
            ).records
            said = worker_failure_words(
                (
                    record.event_log_entry.step_key,
                    getattr(record.event_log_entry.dagster_event.event_specific_data, "error", None),
                )
                for record in records
                if record.event_log_entry.dagster_event is not None
            )
            if said:
                raise dg.Failure(description=said) from error
        raise


# How often the run loop's look at a step may ask Redis whether it restarted (one INFO round trip).
RESTART_CHECK_SECONDS = 2.0


class BrokerRestarted(RuntimeError):
    """Redis restarted under a run without its data: the steps the run had queued in it are gone."""


class BrokerRestartWatch:
    """Notices the steps' Redis restarting empty in the middle of a run.

    Redis gives each start of its server a new ``run_id``. Restarted without its data (no persistence, or
    a new server at the same address), it has lost every step the run had queued and every result not
    yet read, and dagster-celery's loop would wait for them forever: a backfill's run was still STARTED
    300 s after Redis was stopped and started again empty at once (2026-12-06; a restart after 3 s was
    caught by Celery's own reconnection errors instead, 27 s after the stop). Restarted with its data (a
    clean ``systemctl restart redis-server`` saves and loads its dump), it loaded keys, and the run goes
    on. Unreachable, it is left to Celery's errors (broker_failure).
    """

    def __init__(self, url: str) -> None:
        import redis

        self._client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
        self._run_id = self._server_run_id()
        self._checked = time.monotonic()

    def _server_run_id(self) -> str | None:
        import redis

        try:
            return str(self._client.info("server")["run_id"])
        except (redis.RedisError, OSError, KeyError):
            return None

    def check(self) -> None:
        """Raise BrokerRestarted when Redis restarted empty since the last check (at most every
        RESTART_CHECK_SECONDS)."""
        import redis

        if time.monotonic() - self._checked < RESTART_CHECK_SECONDS:
            return
        self._checked = time.monotonic()
        try:
            info = self._client.info()
        except (redis.RedisError, OSError):
            return
        run_id = str(info.get("run_id"))
        if self._run_id is None or run_id == self._run_id:
            self._run_id = run_id
            return
        self._run_id = run_id
        if int(info.get("rdb_last_load_keys_loaded", 0)) == 0:
            raise BrokerRestarted(broker_restarted_message())

    def result(self, async_result: Any) -> Any:
        """``async_result`` as the run loop sees it: the watch checks Redis before each look at it."""
        return _WatchedResult(async_result, self)


class _WatchedResult:
    """A step's Celery result whose ``ready()`` first checks that Redis has not restarted empty."""

    def __init__(self, result: Any, watch: BrokerRestartWatch) -> None:
        self._result = result
        self._watch = watch

    def ready(self) -> bool:
        self._watch.check()
        return bool(self._result.ready())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._result, name)


def broker_restarted_message() -> str:
    """One line: which broker restarted empty (host and port only), what that lost, and what to do."""
    parts = urlsplit(redis_url())
    where = f"{parts.hostname or '127.0.0.1'}:{parts.port or 6379}"
    return (
        f"the steps' broker, Redis at {where} ({REDIS_URL_VARIABLE}), restarted without its data in the "
        "middle of the run, so the steps this run had queued in it are gone and this run stops. A step "
        "already on a worker finishes or rolls back, and every load is a job-key refresh: launch the "
        "failed partitions again (make run, or the backfill's failed partitions in the UI) and what "
        "committed is skipped."
    )


def worker_failure_words(failures: Iterable[tuple[str | None, SerializableErrorInfo | None]]) -> str | None:
    """One line for the (step, error) pairs the workers stored: each step and the error its own code (or
    its resources) raised; None when none carries an error."""
    said = []
    for step, error in failures:
        if error is not None:
            said.append(f"step {step or '?'} failed on a worker: {one_line(raised_by_the_step(error))}")
    return "; ".join(dict.fromkeys(said)) or None


def broker_failure(error: BaseException) -> BaseException | None:
    """The error in ``error``'s chain that says Redis stopped answering, or None."""
    from kombu.exceptions import OperationalError
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, RedisConnectionError | RedisTimeoutError | OperationalError):
            return current
        # Celery's result consumer, after its reconnection attempts, raises a bare RuntimeError.
        if isinstance(current, RuntimeError) and "Celery result store" in str(current):
            return current
        current = current.__cause__ or current.__context__
    return None


def broker_lost_message(cause: BaseException) -> str:
    """One line: which broker stopped answering (host and port only: the URL may hold a password), what it
    said, and what to do."""
    parts = urlsplit(redis_url())
    where = f"{parts.hostname or '127.0.0.1'}:{parts.port or 6379}"
    said = " ".join(str(cause).split()) or type(cause).__name__
    return (
        f"the steps' broker, Redis at {where} ({REDIS_URL_VARIABLE}), stopped answering in the middle of "
        f"the run ({said}), so this run stops. A step already on a worker finished or rolled back, and "
        "every load is a job-key refresh: once Redis answers again, launch the failed partitions again "
        "(make run, or the backfill's failed partitions in the UI) and what committed is skipped."
    )


def partitions_per_run() -> int:
    return positive_int(PARTITIONS_PER_RUN_VARIABLE, DEFAULT_PARTITIONS_PER_RUN)


def partition_ranges(keys: list[str]) -> list[tuple[str, str]]:
    """The (first, last) partition ranges runs over ``keys`` are split into, as a backfill splits them:
    one range in one process; under the distributed profile, ranges of ``partitions_per_run()`` species,
    so different species run on different workers at once (the sensors, the schedule)."""
    size = partitions_per_run() if is_distributed() else len(keys)
    return _ranges(keys, size)


def side_by_side_ranges(keys: list[str], weights: Mapping[str, int] | None = None) -> list[tuple[str, str]]:
    """``make run``'s species ranges: one range in one process; under the distributed profile, one range
    per writer slot (``partition_writers()``; never fewer species than ``partitions_per_run()``), all
    executed at once.

    make run executes at most that many runs at a time anyway, so smaller ranges bought no parallelism:
    only more runs, each a process that imports the definitions, and more steps, each of which pays the
    hop and its own set-up on a worker (a second or two here) whatever its species. Measured on the lab
    data, 2 workers, a loaded machine, one invocation: runs of 8 species 263 s, of 36 species 154 s.

    ``weights`` (records per species, from the downloads' index) split the same number of ranges by work
    rather than by count: GBIF species are skewed (one species held a quarter of a 600,000-record
    download), and a range that holds them finishes long after the others, its worker alone."""
    if not is_distributed():
        return _ranges(keys, len(keys))
    ranges = _ranges(keys, max(partitions_per_run(), -(-len(keys) // partition_writers())))
    if weights is None or len(ranges) < 2:
        return ranges
    return balanced_ranges(keys, [SPECIES_WEIGHT + weights.get(key, 0) for key in keys], len(ranges))


# A species' fixed cost in records' worth: every step spends some milliseconds on each partition (its
# state row, its events) whatever its size.
SPECIES_WEIGHT = 1_000


def balanced_ranges(keys: list[str], weights: list[int], count: int) -> list[tuple[str, str]]:
    """``keys`` in ``count`` consecutive, non-empty ranges (fewer when there are fewer keys), each cut
    where the running total of ``weights`` comes nearest its share of the whole."""
    count = min(count, len(keys))
    if count < 1:
        return []
    running = list(itertools.accumulate(weights, initial=0))
    total = running[-1]
    cuts = [0]
    for part in range(1, count):
        share = total * part / count
        # Leave at least one key for each range before and after this cut.
        low, high = cuts[-1] + 1, len(keys) - (count - part)
        cuts.append(min(range(low, high + 1), key=lambda cut: (abs(running[cut] - share), cut)))
    cuts.append(len(keys))
    return [(keys[start], keys[end - 1]) for start, end in itertools.pairwise(cuts)]


def _ranges(keys: list[str], size: int) -> list[tuple[str, str]]:
    if not keys:
        return []
    return [(keys[i], keys[min(i + size, len(keys)) - 1]) for i in range(0, len(keys), size)]


def partition_writers() -> int:
    """Steps of one species-partitioned asset that may run at once: 1, unless distributed."""
    if not is_distributed():
        return 1
    return positive_int(PARTITION_WRITERS_VARIABLE, DEFAULT_PARTITION_WRITERS)


# Partitions a server-bound step computes at once in the local profile: the warehouse then works on two
# statements (two cores) while the step's process, which mostly waits on it, waits for both.
LOCAL_PARTITIONS_SIDE_BY_SIDE = 2


def partitions_side_by_side() -> int:
    """Partitions a step computes at once when its work is the warehouse's (PostgreSQL runs each statement
    on one core) or leaves Python's lock (Arrow, zlib, numpy): two in the local profile, one under the
    distributed profile, where the workers' steps already keep the machine's cores busy."""
    return 1 if is_distributed() else LOCAL_PARTITIONS_SIDE_BY_SIDE


def species_backfill_policy() -> dg.BackfillPolicy:
    """One run for a whole range on one machine (each run costs seconds of process start); runs of a few
    species each when workers can take them side by side."""
    if is_distributed():
        return dg.BackfillPolicy.multi_run(max_partitions_per_run=partitions_per_run())
    return dg.BackfillPolicy.single_run()
