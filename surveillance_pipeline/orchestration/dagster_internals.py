"""Every piece of Dagster's private API the project relies on, in one place.

ruff's banned-API rule (TID251, pyproject.toml: every private top-level module of ``dagster``) forbids
``dagster._`` anywhere else, and the tests' orchestration/test_dagster_internals.py pins the behaviour
each piece is used for (and that the ban covers every private module), so an upgrade that moves or changes
one fails at import or in that test, not silently. Tag names come from Dagster's own constants for the
same reason. A name ``dagster`` exports (``DagsterEvent``, ``EventLogEntry``, ``StepExecutionContext``,
``serialize_value``, ``AssetPartitionStatus``...) is imported from ``dagster``, not from here;
``EventLogEntry`` is re-exported only because instance_storage.py still imports it from here.

What is used, why no public API does it (Dagster 1.13.27), and the upstream issue it waits for ("none
found" where a search of dagster-io/dagster's issues found no request for it):
- Per-partition events (``DagsterEventBatchMetadata``, ``step_execution_context``, the data version tags
  and ``get_input_*_tag``, ``NULL_EVENT_POINTER``, ``SKIP_PARTITION_DATA_VERSION_DEPENDENCY_THRESHOLD``).
  A run over a partition range runs each asset once, and Dagster stamps the step's one output on every
  partition with one common data version. Our data version is a per-partition job key, so each partition
  is reported by its own ``AssetMaterialization`` carrying the tags Dagster itself writes (data version,
  code version, input lineage), built as ``DagsterEvent``s with batch metadata so that a range's events
  reach the event log in a few inserts (Dagster's own batch path). Waits for dagster#21072 (one result
  per partition from a single-run backfill).
- ``OWN_EVENTS_METADATA_KEY`` on the step's output: Dagster then writes no event of its own for it (the
  switch its auto-converted source assets use, which report their own events). It keeps the output, so the
  run's later steps still run, whoever launched the run: no run tag is needed. Nearest upstream: dagster
  PR #16621 (omit an asset's materialization, open, unmerged); no issue found.
- ``execute_in_code_location`` (``InMemoryJob``, ``ReconstructableRepository``, ``execute_run``,
  ``RemoteJobOrigin``, ``RemoteRepositoryOrigin``, ``location_origins_from_yaml_paths``,
  ``REPOSITORY_LABEL_TAG``): the run ``make run`` executes in its own process is created with the origin
  of the workspace's code location, so the UI lists it under its job and re-executes it like any other.
  Waits for dagster#19458 (runs of ``execute_in_process`` cannot be re-executed in the UI; closed as
  stale, not fixed).
- ``ASSET_PARTITION_RANGE_START_TAG`` / ``_END_TAG``: the run tags of a range run (reporting.py). None
  found.
- ``UnresolvedAssetJobDefinition``: the type ``define_asset_job`` returns (jobs.py annotations). Nearest
  upstream: dagster PR #20594 (document the class, closed unmerged); no issue found.
- The instance storage's configuration classes and event table (``PostgresStorageConfig``, ``pg_config``,
  ``SqlEventLogStorageTable``, ``ConfigurableClassData``, ``UserConfigSchema``; instance_storage.py),
  which writes a range run's planned materializations in one batch, as dagster-postgres writes
  materializations; remembers the columns of Dagster's asset_keys table instead of reflecting them from
  the catalog at every step (by overriding ``_has_asset_key_col_on_connection``); and reads the latest
  data version of each partition (``get_latest_tags_by_partition``, with ``AssetEventTagsTable`` and
  ``_latest_event_ids_by_partition_subquery``) with a plan that does not scan every tag ever written.
  Pinned by test_instance_storage. None found.
- ``ConcurrencyClaimStatus``: the type of a pool claim, for the signature of the instance storage's
  ``claim_concurrency_slot``, which runs Dagster's own claim under one lock (instance_storage.py says
  why: simultaneous claims of a pool with limit 1 could both get its slot). None found.
- ``SerializableErrorInfo``: the error a failed step records, read by make run to print the step's own
  error (lab/run.py). None found.
- The names of Dagster's executor loop and step call (``executor_state``): a run's main thread between
  steps is waiting for a pool slot, and run_health.py ends that wait at SIGTERM by raising
  KeyboardInterrupt there (CPython's ``PyThreadState_SetAsyncExc``), because Dagster defers the signal
  outside a step's code and no public hook interrupts a run queued on a pool. Run monitoring frees slots
  only of runs that ended, and its cancel needs a launcher that can terminate the process (the CLI run has
  none). Measured by make faults (a waiting run stops 0.9-1.3 s after SIGTERM). None found upstream.
- ``show_automation_running``: the UI reads the pre-sensor auto-materialize daemon's pause flag, which is
  paused until someone sets it, and shows "Auto-materialize off" on every job page even while the
  automation sensor runs. The flag gates nothing here (automation runs as a sensor, Dagster's default).
  None found.
- ``create_step_task`` (``ReconstructableJob``, ``create_execution_plan``, ``execute_plan_iterator``,
  ``EngineEventData``, ``ExecuteStepArgs``, ``unpack_value``, dagster-celery's task name and marker): the
  step task a Celery worker runs, dagster-celery's own (``dagster_celery.tasks.create_task``, 0.29.27)
  but for the instance. Upstream's builds a new ``DagsterInstance`` for every step (0.11 s, and seven new
  connections, its pools cold) and never disposes of it; this one keeps one per instance ref in the
  worker, as a run's process keeps one for all its steps. test_dagster_internals pins upstream's task to
  the source copied. None found upstream.
- The local compute log manager (``LocalComputeLogManager``, ``IO_TYPE_EXTENSION``, ``ComputeIOType``,
  ``CapturedLogContext``, ``touch_file``), subclassed by compute_logs.py: it mirrors a step's stdout and
  stderr to the terminal with a thread instead of a ``tail -F`` and a Python watcher per stream, four
  processes per step (dagster.yaml names the subclass). The class is ``@public`` but lives in a private
  module, and its capture is overridden. Waits for dagster#1906 (one way to manage compute log mirroring's
  processes); dagster#23336 (the tail can miss a step's last lines) is what the thread also avoids.
- ``HIDDEN_TAG_PREFIX`` (``.dagster/``): the UI lists a run's tags except those under this prefix (the
  GraphQL ``tags`` resolver drops ``TagType.HIDDEN``). The run tags that are our bookkeeping, the process
  that runs a run (run_health.py) and the settings it resolved (run_settings.py), live under it, so the
  Runs list shows what a user set, not ours; ``is_hidden_tag`` is pinned by test_dagster_internals. None
  found upstream (no public way to mark a tag as not for display).
- ``set_celery_step_poll_seconds``: dagster-celery's run loop pauses ``TICK_SECONDS`` (1 s, a module
  global) between looks at its steps, so each step of a chain waited half a second on average before its
  successor was sent; the distributed executor sets 0.2 s. None found.
- ``celery_execution_loop`` (dagster-celery's ``core_celery_execution_loop`` and its task submission,
  ``dagster_celery.executor._submit_task``): ``CeleryExecutor.execute`` with each step's Celery result
  wrapped, so that the run loop's look at a step (``ready()``) can notice Redis restarted empty under
  it. Such a restart loses the steps queued in it, and the loop then waits for their results forever
  (seen 2026-12-06: a backfill's run still STARTED 300 s after a Redis restart). test_dagster_internals
  pins upstream's ``execute`` to the call this makes. None found upstream.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import dagster as dg

# Public, not private: re-exported for instance_storage.py only, which still imports it from here.
from dagster import EventLogEntry
from dagster._core.definitions.data_version import (
    CODE_VERSION_TAG,
    DATA_VERSION_IS_USER_PROVIDED_TAG,
    DATA_VERSION_TAG,
    NULL_EVENT_POINTER,
    SKIP_PARTITION_DATA_VERSION_DEPENDENCY_THRESHOLD,
    get_input_data_version_tag,
    get_input_event_pointer_tag,
)
from dagster._core.definitions.job_base import InMemoryJob
from dagster._core.definitions.reconstruct import ReconstructableJob, ReconstructableRepository
from dagster._core.definitions.source_asset import (
    SYSTEM_METADATA_KEY_SOURCE_ASSET_OBSERVATION as OWN_EVENTS_METADATA_KEY,
)
from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition
from dagster._core.events import DagsterEventBatchMetadata, EngineEventData
from dagster._core.execution.api import create_execution_plan, execute_plan_iterator, execute_run
from dagster._core.remote_origin import RemoteJobOrigin, RemoteRepositoryOrigin
from dagster._core.storage.compute_log_manager import CapturedLogContext, ComputeIOType
from dagster._core.storage.config import PostgresStorageConfig, pg_config
from dagster._core.storage.event_log.schema import AssetEventTagsTable, SqlEventLogStorageTable
from dagster._core.storage.local_compute_log_manager import IO_TYPE_EXTENSION, LocalComputeLogManager
from dagster._core.storage.tags import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
    HIDDEN_TAG_PREFIX,
    REPOSITORY_LABEL_TAG,
    TagType,
    get_tag_type,
)
from dagster._core.workspace.load import location_origins_from_yaml_paths
from dagster._daemon.asset_daemon import get_auto_materialize_paused, set_auto_materialize_paused
from dagster._grpc.types import ExecuteStepArgs
from dagster._serdes import ConfigurableClassData, serialize_value, unpack_value
from dagster._utils import touch_file
from dagster._utils.error import SerializableErrorInfo

if TYPE_CHECKING:
    from dagster._config.config_schema import UserConfigSchema
    from dagster._utils.concurrency import ConcurrencyClaimStatus

__all__ = [
    "AssetEventTagsTable",
    "EventLogEntry",
    "ASSET_PARTITION_RANGE_END_TAG",
    "ASSET_PARTITION_RANGE_START_TAG",
    "CODE_VERSION_TAG",
    "IO_TYPE_EXTENSION",
    "CapturedLogContext",
    "ComputeIOType",
    "ConcurrencyClaimStatus",
    "DATA_VERSION_IS_USER_PROVIDED_TAG",
    "DATA_VERSION_TAG",
    "HIDDEN_TAG_PREFIX",
    "NULL_EVENT_POINTER",
    "OWN_EVENTS_METADATA_KEY",
    "REPOSITORY_LABEL_TAG",
    "REPOSITORY_NAME",
    "SKIP_PARTITION_DATA_VERSION_DEPENDENCY_THRESHOLD",
    "ConfigurableClassData",
    "LocalComputeLogManager",
    "PostgresStorageConfig",
    "SerializableErrorInfo",
    "SqlEventLogStorageTable",
    "UnresolvedAssetJobDefinition",
    "UserConfigSchema",
    "celery_execution_loop",
    "create_step_task",
    "execute_in_code_location",
    "get_input_data_version_tag",
    "get_input_event_pointer_tag",
    "is_hidden_tag",
    "location_origins_from_yaml_paths",
    "log_batched_materialization",
    "pg_config",
    "show_automation_running",
    "step_execution_context",
    "touch_file",
]

REPOSITORY_NAME = "__repository__"


def is_hidden_tag(key: str) -> bool:
    """Whether the UI leaves this run tag out of the tags it shows."""
    return get_tag_type(key) == TagType.HIDDEN


def step_execution_context(context: dg.AssetExecutionContext) -> dg.StepExecutionContext:
    return context.op_execution_context.get_step_execution_context()


def log_batched_materialization(
    step: dg.StepExecutionContext, materialization: dg.AssetMaterialization, batch_id: str, last: bool
) -> dg.DagsterEvent:
    """Log ``materialization`` as part of the batch ``batch_id`` (written when ``last``); building the
    event logs it, yielding it from the step only passes it on."""
    return dg.DagsterEvent.asset_materialization(
        step, materialization, DagsterEventBatchMetadata(batch_id, last)
    )


def execute_in_code_location(
    instance: dg.DagsterInstance,
    job_def: dg.JobDefinition,
    *,
    workspace_file: Path,
    module_name: str,
    attribute: str,
    run_config: dict[str, Any],
    tags: dict[str, str],
    steps_elsewhere: bool = False,
) -> dg.DagsterRun:
    """Run ``job_def`` from this process as a run of the workspace's code location.

    The run carries the origins the webserver would give it (the location named by ``workspace_file``, and
    the module ``module_name:attribute``), so the UI lists it under its job and can re-execute it; the run
    executes with the job's own executor, as a launched run does. ``steps_elsewhere``: the executor sends
    steps to other processes (Celery workers), which load the job from its module, so the run executes
    the reconstructable job instead of the one in memory.
    """
    origins = location_origins_from_yaml_paths([str(workspace_file)])
    if len(origins) != 1:
        raise ValueError(f"{workspace_file}: expected one code location, found {len(origins)}")
    remote_origin = RemoteJobOrigin(RemoteRepositoryOrigin(origins[0], REPOSITORY_NAME), job_def.name)
    repository = ReconstructableRepository.for_module(
        module_name, attribute, working_directory=str(workspace_file.parent)
    )
    reconstructable = repository.get_reconstructable_job(job_def.name)
    run = instance.create_run_for_job(
        job_def=job_def,
        run_config=run_config,
        tags=tags,
        remote_job_origin=remote_origin,
        job_code_origin=reconstructable.get_python_origin(),
    )
    # The job is already in memory: executing the reconstructable one would import the module again.
    execute_run(reconstructable if steps_elsewhere else InMemoryJob(job_def), run, instance)
    finished = instance.get_run_by_id(run.run_id)
    assert finished is not None
    return finished


def show_automation_running(instance: dg.DagsterInstance) -> bool:
    """Unpause the legacy auto-materialize flag the UI shows; True when it was paused."""
    paused = get_auto_materialize_paused(instance)
    if paused:
        set_auto_materialize_paused(instance, False)
    return paused


# Attributes of Dagster's definitions that are not marked @public in 1.13.27 (a job's asset layer and
# graph, an op's pool). test_dagster_internals rejects them anywhere but here.


def job_asset_keys(job_def: dg.JobDefinition) -> set[dg.AssetKey]:
    """The assets a job materializes (its asset layer's executable keys)."""
    return set(job_def.asset_layer.executable_asset_keys)


def job_asset_graph(job_def: dg.JobDefinition) -> Any:
    """The asset graph of a job (its asset layer's), for an upstream's partition mapping."""
    return job_def.asset_layer.asset_graph


def job_op_names(job_def: dg.JobDefinition) -> list[str]:
    """The names of a job's top-level ops: the keys its run config's ``ops`` section takes."""
    return sorted(job_def.graph.node_dict)


def op_pools(definitions: dg.Definitions) -> list[tuple[str, dg.PartitionsDefinition | None]]:
    """Every pool an op of the definitions names, with the partitions of the asset whose op names it
    (None for an unpartitioned asset or an op job's op)."""
    pools: list[tuple[str, dg.PartitionsDefinition | None]] = []
    for assets_def in definitions.resolve_asset_graph().assets_defs:
        if not assets_def.is_executable:
            continue  # an external asset (derived_dataset_registration) runs no step of its own
        pool = getattr(assets_def.node_def, "pool", None)
        if pool:
            pools.append((pool, assets_def.partitions_def))
    for job in definitions.jobs or []:
        if isinstance(job, dg.JobDefinition):
            for node_def in job.all_node_defs:
                pool = getattr(node_def, "pool", None)
                if pool:
                    pools.append((pool, None))
    return pools


# Dagster's executor loop, and the call in it that runs one step: a run's main thread in the first but not
# the second is between steps, which is where it waits for a pool slot (run_health.py ends such a wait at
# SIGTERM; Dagster defers the signal outside a step's code). Pinned by test_faults (a CLI run waiting for
# a slot stops on SIGTERM), so a Dagster upgrade that renames them fails a test, not a user's shutdown.
EXECUTOR_LOOP_FRAME = "inner_plan_execution_iterator"
STEP_FRAME = "dagster_event_sequence_for_step"


def executor_state(frame: FrameType | None) -> str:
    """``waiting`` in the executor's loop between steps, ``in step``, or ``done`` (no run executing), from
    a thread's innermost frame."""
    names = set()
    while frame is not None:
        names.add(frame.f_code.co_name)
        frame = frame.f_back
    if STEP_FRAME in names:
        return "in step"
    if EXECUTOR_LOOP_FRAME in names:
        return "waiting"
    return "done"


def celery_execution_loop(plan_context: Any, execution_plan: Any, watch: Callable[[Any], Any]) -> Any:
    """What dagster-celery's ``CeleryExecutor.execute`` returns (its run loop's events), each step's Celery
    result (an ``AsyncResult``) passed through ``watch`` as it is sent; the loop then asks ``watch``'s
    answer whether the step is done (``ready()``, then ``get()``, ``revoke()``)."""
    from dagster_celery.core_execution_loop import core_celery_execution_loop
    from dagster_celery.executor import _submit_task

    def submit(*arguments: Any) -> Any:
        return watch(_submit_task(*arguments))

    return core_celery_execution_loop(plan_context, execution_plan, step_execution_fn=submit)


def set_celery_step_poll_seconds(seconds: float) -> None:
    """How long dagster-celery's run loop pauses between looks at its steps on the workers.

    The pause is the module global ``TICK_SECONDS`` (1 s) of ``dagster_celery.core_execution_loop``, read
    at each pause; neither the executor's config nor any public API sets it. Typed as the int it holds
    upstream, while ``time.sleep`` takes a float. No upstream issue found.
    """
    from dagster_celery import core_execution_loop

    core_execution_loop.TICK_SECONDS = seconds  # type: ignore[assignment]


# The step task's instances, one per instance ref (its serialized form) in this worker process.
_STEP_INSTANCES: dict[str, dg.DagsterInstance] = {}


def _step_instance(instance_ref: Any) -> dg.DagsterInstance:
    key = serialize_value(instance_ref)
    if key not in _STEP_INSTANCES:
        _STEP_INSTANCES[key] = dg.DagsterInstance.from_ref(instance_ref)
    return _STEP_INSTANCES[key]


def create_step_task(app: Any) -> Any:
    """dagster-celery's step task (``dagster_celery.tasks.create_task``) registered on ``app`` under its
    name, with the worker's instance for the run's instance ref made once, not at every step (its
    storage's pools check a connection before lending it: instance_storage.py). The rest is upstream's
    but for typing (a missing run raises ValueError, not a CheckError): the step writes the run's events,
    and returns them serialized."""
    from dagster_celery.config import TASK_EXECUTE_PLAN_NAME
    from dagster_celery.core_execution_loop import DELEGATE_MARKER
    from dagster_celery.executor import CeleryExecutor

    @app.task(bind=True, name=TASK_EXECUTE_PLAN_NAME)  # type: ignore[untyped-decorator]
    def _execute_plan(
        self: Any, execute_step_args_packed: dict[str, Any], executable_dict: dict[str, Any]
    ) -> Any:
        execute_step_args = unpack_value(execute_step_args_packed, as_type=ExecuteStepArgs)
        instance = _step_instance(execute_step_args.instance_ref)
        recon_job = ReconstructableJob.from_dict(executable_dict)
        dagster_run = instance.get_run_by_id(execute_step_args.run_id)
        if dagster_run is None:
            raise ValueError(f"Could not load run {execute_step_args.run_id}")
        step_keys_str = ", ".join(execute_step_args.step_keys_to_execute or [])
        execution_plan = create_execution_plan(
            recon_job,
            dagster_run.run_config,
            step_keys_to_execute=execute_step_args.step_keys_to_execute,
            known_state=execute_step_args.known_state,
        )
        step_handle = execution_plan.step_handle_for_single_step_plans()
        engine_event = instance.report_engine_event(
            f"Executing steps {step_keys_str} in celery worker",
            dagster_run,
            EngineEventData(
                {"step_keys": step_keys_str, "Celery worker": self.request.hostname},
                marker_end=DELEGATE_MARKER,
            ),
            CeleryExecutor,
            step_key=step_handle.to_key() if step_handle is not None else None,
        )
        events = [engine_event]
        events += execute_plan_iterator(
            execution_plan=execution_plan,
            job=recon_job,
            dagster_run=dagster_run,
            instance=instance,
            retry_mode=execute_step_args.retry_mode,
            run_config=dagster_run.run_config,
        )
        return [serialize_value(event) for event in events]

    return _execute_plan
