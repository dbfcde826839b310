"""Every piece of Dagster's private API the project relies on, in one place.

ruff's banned-API rule (TID251, pyproject.toml) forbids ``dagster._`` anywhere else, and
surveillance_pipeline_tests/test_dagster_internals.py pins the behaviour each piece is used for, so an
upgrade that moves or changes one fails at import or in that test, not silently. Tag names come from
Dagster's own constants for the same reason.

What is used, and why no public API does it (Dagster 1.13.27):
- Per-partition events. A run over a partition range runs each asset once, and Dagster stamps the step's one
  output on every partition with one common data version. Our data version is a per-partition job key, so
  each partition is reported by its own ``AssetMaterialization`` carrying the tags Dagster itself writes
  (data version, code version, input lineage), built as ``DagsterEvent``s with batch metadata so that a
  range's events reach the event log in a few inserts (Dagster's own batch path).
- ``OWN_EVENTS_METADATA_KEY`` on the step's output: Dagster then writes no event of its own for it (the
  switch its auto-converted source assets use, which report their own events). It keeps the output, so the
  run's later steps still run, whoever launched the run: no run tag is needed.
- The run ``make run`` executes in its own process is created with the origin of the workspace's code
  location, so the UI lists it under its job and re-executes it like any other.
- The instance storage's configuration classes and event table (instance_storage.py), which writes a
  range run's planned materializations in one batch, as dagster-postgres writes materializations.
- ``asset_partition_status``: the partition status the UI shows (materialized, failed, in progress), for
  tests and make run's checks; GraphQL gives the same to a client of the webserver.
- ``show_automation_running``: the UI reads the pre-sensor auto-materialize daemon's pause flag, which is
  paused until someone sets it, and shows "Auto-materialize off" on every job page even while the
  automation sensor runs. The flag gates nothing here (automation runs as a sensor, Dagster's default).
- ``observe``, the observation twin of ``materialize`` (tests), which 1.13 keeps out of its namespace.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import dagster as dg
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
from dagster._core.definitions.observe import observe
from dagster._core.definitions.reconstruct import ReconstructableRepository
from dagster._core.definitions.source_asset import (
    SYSTEM_METADATA_KEY_SOURCE_ASSET_OBSERVATION as OWN_EVENTS_METADATA_KEY,
)
from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition
from dagster._core.events import DagsterEvent, DagsterEventBatchMetadata
from dagster._core.events.log import EventLogEntry
from dagster._core.execution.api import execute_run
from dagster._core.execution.context.system import StepExecutionContext
from dagster._core.remote_origin import RemoteJobOrigin, RemoteRepositoryOrigin
from dagster._core.storage.config import PostgresStorageConfig, pg_config
from dagster._core.storage.event_log.schema import SqlEventLogStorageTable
from dagster._core.storage.partition_status_cache import get_and_update_asset_status_cache_value
from dagster._core.storage.tags import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
    REPOSITORY_LABEL_TAG,
)
from dagster._core.workspace.load import location_origins_from_yaml_paths
from dagster._daemon.asset_daemon import get_auto_materialize_paused, set_auto_materialize_paused
from dagster._serdes import ConfigurableClassData, serialize_value
from dagster._utils.error import SerializableErrorInfo

if TYPE_CHECKING:
    from dagster._config.config_schema import UserConfigSchema

__all__ = [
    "DagsterEvent",
    "EventLogEntry",
    "ASSET_PARTITION_RANGE_END_TAG",
    "ASSET_PARTITION_RANGE_START_TAG",
    "CODE_VERSION_TAG",
    "DATA_VERSION_IS_USER_PROVIDED_TAG",
    "DATA_VERSION_TAG",
    "NULL_EVENT_POINTER",
    "OWN_EVENTS_METADATA_KEY",
    "REPOSITORY_LABEL_TAG",
    "REPOSITORY_NAME",
    "SKIP_PARTITION_DATA_VERSION_DEPENDENCY_THRESHOLD",
    "ConfigurableClassData",
    "PostgresStorageConfig",
    "SerializableErrorInfo",
    "SqlEventLogStorageTable",
    "UnresolvedAssetJobDefinition",
    "UserConfigSchema",
    "asset_partition_status",
    "execute_in_code_location",
    "get_input_data_version_tag",
    "get_input_event_pointer_tag",
    "location_origins_from_yaml_paths",
    "log_batched_materialization",
    "observe",
    "pg_config",
    "serialize_value",
    "show_automation_running",
    "step_execution_context",
]

REPOSITORY_NAME = "__repository__"


def step_execution_context(context: dg.AssetExecutionContext) -> StepExecutionContext:
    return context.op_execution_context.get_step_execution_context()


def log_batched_materialization(
    step: StepExecutionContext, materialization: dg.AssetMaterialization, batch_id: str, last: bool
) -> DagsterEvent:
    """Log ``materialization`` as part of the batch ``batch_id`` (written when ``last``); building the
    event logs it, yielding it from the step only passes it on."""
    return DagsterEvent.asset_materialization(
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


def asset_partition_status(
    instance: dg.DagsterInstance, key: dg.AssetKey, partitions: dg.PartitionsDefinition
) -> dict[str, set[str]]:
    """The asset's partitions by the status Dagster shows them in: materialized, failed, in progress."""
    value = get_and_update_asset_status_cache_value(instance, key, partitions)
    if value is None:
        return {"materialized": set(), "failed": set(), "in_progress": set()}
    return {
        "materialized": set(
            value.deserialize_materialized_partition_subsets(partitions).get_partition_keys()
        ),
        "failed": set(value.deserialize_failed_partition_subsets(partitions).get_partition_keys()),
        "in_progress": set(value.deserialize_in_progress_partition_subsets(partitions).get_partition_keys()),
    }


def show_automation_running(instance: dg.DagsterInstance) -> bool:
    """Unpause the legacy auto-materialize flag the UI shows; True when it was paused."""
    paused = get_auto_materialize_paused(instance)
    if paused:
        set_auto_materialize_paused(instance, False)
    return paused
