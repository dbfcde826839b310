"""How assets report to Dagster: action, reason, job key and rows in metadata; the job key as data version.

Per-partition materializations get their own data version even in one run over many partitions.

A run over a partition range (``make run``, a single-run backfill) executes each asset once for the whole
range, and Dagster stamps the step's one output on every partition with one common data version. Our data
version is a per-partition job key, so each partition is reported by its own ``AssetMaterialization``
carrying the tags Dagster itself writes (data version, code version, input lineage), which keeps Dagster's
staleness and our skips in agreement.

With the run tag ``dagster/defer_asset_events=true`` (set by ``make run``) Dagster records only these events.
The tag is internal to Dagster (added for dagster-airlift); a test pins its behaviour. Without it (a range
launched from the UI), the common-version events come first and ours, written after, are the latest.

A step's per-partition events reach the event log in batches when ``DAGSTER_EVENT_BATCH_SIZE`` is set (the
Makefile sets it): one insert for a batch's events, one for their tags, one for the asset's row, instead of
about seven statements per event. This is Dagster's own batch path, the one its events for a range output
take; it needs the events built with batch metadata, so they are made here as ``DagsterEvent``s on the step
context. Without the variable Dagster writes them one by one, as before.
"""

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import dagster as dg
from dagster._core.events import DagsterEvent, DagsterEventBatchMetadata, DagsterEventType
from dagster._core.execution.context.system import StepExecutionContext

from surveillance_pipeline.core.keys import sha256_hex
from surveillance_pipeline.core.refresh import RefreshOutcome

DEFER_ASSET_EVENTS_TAG = "dagster/defer_asset_events"
DATA_VERSION_TAG = "dagster/data_version"
# What an asset that reports per partition yields.
PartitionEvents = Iterator[dg.MaterializeResult | DagsterEvent]
# A batch of events is closed (written) once it has been open this long, so a long step's partitions show up
# in the UI as it goes, and a killed run loses at most this much of them (their rows stay committed, and the
# next run reports those partitions as skipped).
BATCH_SECONDS = 2.0


@dataclass(frozen=True)
class PartitionReport:
    data_version: str
    metadata: dict[str, Any]


def outcome_report(
    outcome: RefreshOutcome, data_version: str | None = None, **metadata: Any
) -> PartitionReport:
    """What every materialization shows in the UI; the data version defaults to the job key."""
    return PartitionReport(
        data_version=data_version or outcome.job_key,
        metadata={
            "action": outcome.action,
            "reason": outcome.reason,
            "job_key": outcome.job_key,
            "job_key_parts": dg.MetadataValue.json(outcome.parts),
            "rows": outcome.rows,
            # What the target held before a reload: the key to look up in provenance.
            **(
                {"previous_job_key": outcome.previous_key}
                if outcome.previous_key not in (None, outcome.job_key)
                else {}
            ),
            **metadata,
        },
    )


def materialize_result(
    outcome: RefreshOutcome, data_version: str | None = None, **metadata: Any
) -> dg.MaterializeResult:
    """The same report for an unpartitioned asset."""
    report = outcome_report(outcome, data_version, **metadata)
    return dg.MaterializeResult(data_version=dg.DataVersion(report.data_version), metadata=report.metadata)


def partition_range_tags(first: str, last: str) -> dict[str, str]:
    """Run tags for one run over ``first..last`` that records exactly one event per partition."""
    return {
        "dagster/asset_partition_range_start": first,
        "dagster/asset_partition_range_end": last,
        DEFER_ASSET_EVENTS_TAG: "true",
    }


def report_partitions(
    context: dg.AssetExecutionContext,
    compute: Callable[[str], PartitionReport],
    upstream: dg.AssetKey | None,
) -> PartitionEvents:
    """Run ``compute`` for every partition of the step and report each with its own data version."""
    keys = context.partition_keys
    if len(keys) == 1:
        single = compute(keys[0])
        yield dg.MaterializeResult(data_version=dg.DataVersion(single.data_version), metadata=single.metadata)
        return

    deferred = context.run.tags.get(DEFER_ASSET_EVENTS_TAG) == "true"
    if not deferred:
        yield dg.MaterializeResult()
    # One species that fails (a bad record, a search over its limit) fails its own partition, not the
    # step: the others still load, and downstream steps leave out the partitions whose upstream failed.
    compute_isolated = _isolated(context, compute, _failed_upstream_partitions(context))
    lineage = _upstream_lineage(context, upstream, keys) if upstream is not None else {}
    code_version = context.assets_def.code_versions_by_key.get(context.asset_key)
    batches = _EventBatches(context.op_execution_context.get_step_execution_context())
    # A partition's event is logged once the next partition is done (or at once when its batch has been
    # open BATCH_SECONDS), so that the event that closes a batch is always known: a partition that raises
    # still gets every partition before it written, since their rows are committed and Dagster writes a
    # batch only when it is closed. An event is taken out of ``pending`` before it is logged, so none is
    # logged twice whatever raises where.
    pending: dg.AssetMaterialization | None = None
    try:
        for key in keys:
            report = compute_isolated(key)
            if report is None:
                continue
            current = _materialization(context.asset_key, key, report, code_version, upstream, lineage)
            previous, pending = pending, current
            if previous is not None:
                yield batches.log(previous, last=False)
            if batches.overdue():
                pending = None
                yield batches.log(current, last=True)
    except GeneratorExit:
        # Closed by Dagster (an interrupt between steps of the iteration): no yield is allowed, but
        # building the event still writes it.
        if pending is not None:
            batches.log(pending, last=True)
        raise
    except BaseException:
        # Also an interrupted run (DagsterExecutionInterruptedError is a BaseException).
        if pending is not None:
            closing, pending = pending, None
            yield batches.log(closing, last=True)
        raise
    if pending is not None:
        yield batches.log(pending, last=True)
    if deferred:
        yield dg.MaterializeResult()


def _isolated(
    context: dg.AssetExecutionContext, compute: Callable[[str], PartitionReport], failed_upstream: set[str]
) -> Callable[[str], PartitionReport | None]:
    """``compute``, but a partition that raises (or whose upstream failed in this run) is logged as failed,
    remembered for the run's later steps, and gives None; once every partition of the step has failed,
    the step fails with the first error (nothing partition-specific went wrong then: a database down)."""
    keys = context.partition_keys
    errors: list[Exception] = []
    upstream_failures: list[str] = []

    def compute_one(key: str) -> PartitionReport | None:
        if key in failed_upstream:
            _report_failure(context, key, "an upstream partition failed in this run", upstream=True)
            upstream_failures.append(key)
        else:
            try:
                return compute(key)
            except Exception as error:
                context.log.error(f"{context.asset_key.to_user_string()} partition {key} failed: {error}")
                _report_failure(context, key, str(error), upstream=False)
                errors.append(error)
        if len(errors) + len(upstream_failures) == len(keys):
            if errors:
                raise errors[0]
            raise RuntimeError(f"every partition's upstream failed in this run: {', '.join(keys)}")
        return None

    return compute_one


# Partitions that failed in a run, per asset: what downstream steps of the same run leave out. Kept in the
# process, because the project's executor runs a run's steps in one process, and because the event that
# would say it in Dagster's log (ASSET_FAILED_TO_MATERIALIZE) is not stored by OSS event storages.
_failed_partitions: dict[str, dict[dg.AssetKey, dict[str, str]]] = {}


def _report_failure(context: dg.AssetExecutionContext, key: str, message: str, upstream: bool) -> None:
    run_failures = _failed_partitions.setdefault(context.run.run_id, {})
    run_failures.setdefault(context.asset_key, {})[key] = message
    if upstream:
        context.log.error(f"{context.asset_key.to_user_string()} partition {key} not computed: {message}")


def _failed_upstream_partitions(context: dg.AssetExecutionContext) -> set[str]:
    """The partitions of this asset's upstream assets that failed earlier in this run."""
    run_failures = _failed_partitions.get(context.run.run_id, {})
    failed: set[str] = set()
    for upstream in context.assets_def.dependency_keys:
        failed |= set(run_failures.get(upstream, {}))
    return failed


def failed_partitions(run_id: str) -> dict[dg.AssetKey, dict[str, str]]:
    """What failed in a run this process executed: per asset, each failed partition and why (make run
    prints them; the run itself ends successful when only some partitions failed)."""
    return {key: dict(failures) for key, failures in _failed_partitions.get(run_id, {}).items()}


def _materialization(
    asset_key: dg.AssetKey,
    key: str,
    report: PartitionReport,
    code_version: str | None,
    upstream: dg.AssetKey | None,
    lineage: dict[str, tuple[str, int]],
) -> dg.AssetMaterialization:
    tags = {DATA_VERSION_TAG: report.data_version, "dagster/data_version_is_user_provided": "true"}
    if code_version:
        tags["dagster/code_version"] = code_version
    if key in lineage and upstream is not None:
        upstream_version, storage_id = lineage[key]
        name = upstream.to_user_string()
        # What Dagster writes for a single upstream partition: sha256 of its data version.
        tags[f"dagster/input_data_version/{name}"] = sha256_hex(upstream_version.encode("utf-8"))
        tags[f"dagster/input_event_pointer/{name}"] = str(storage_id)
    return dg.AssetMaterialization(asset_key=asset_key, partition=key, tags=tags, metadata=report.metadata)


class _EventBatches:
    """Logs a step's materializations with batch metadata, closing a batch where told to.

    Batch ids name the run, step, attempt and a counter: they only key Dagster's buffer, and a retried
    step in the same process must not add to a batch its failed attempt left open.
    """

    def __init__(self, step: StepExecutionContext):
        self._step = step
        self._count = 0
        self._opened = time.monotonic()

    def overdue(self) -> bool:
        return time.monotonic() - self._opened >= BATCH_SECONDS

    def log(self, materialization: dg.AssetMaterialization, last: bool) -> DagsterEvent:
        step = self._step
        batch_id = f"{step.run_id}/{step.step.key}/{step.previous_attempt_count}/{self._count}"
        # Building the event logs it (and writes or buffers it); yielding it only passes it on.
        event = DagsterEvent.asset_materialization(
            step, materialization, DagsterEventBatchMetadata(batch_id, last)
        )
        if last:
            self._count += 1
            self._opened = time.monotonic()
        return event


def _upstream_lineage(
    context: dg.AssetExecutionContext, upstream: dg.AssetKey, keys: list[str]
) -> dict[str, tuple[str, int]]:
    """Each partition's latest upstream data version and event id, in two queries for the whole range."""
    storage = context.instance.event_log_storage
    materialization = DagsterEventType.ASSET_MATERIALIZATION
    tags = storage.get_latest_tags_by_partition(
        upstream, materialization, [DATA_VERSION_TAG], asset_partitions=keys
    )
    storage_ids = storage.get_latest_storage_id_by_partition(upstream, materialization, partitions=set(keys))
    return {
        key: (tags[key][DATA_VERSION_TAG], storage_ids[key])
        for key in keys
        if DATA_VERSION_TAG in tags.get(key, {}) and key in storage_ids
    }


def recorded_data_version(
    instance: dg.DagsterInstance, key: dg.AssetKey, partition_key: str | None = None
) -> str | None:
    """The data version Dagster recorded with an asset's (partition's) latest materialization."""
    record = instance.get_latest_data_version_record(key, partition_key=partition_key)
    materialization = record.asset_materialization if record is not None else None
    if materialization is None or materialization.tags is None:
        return None
    return materialization.tags.get(DATA_VERSION_TAG)
