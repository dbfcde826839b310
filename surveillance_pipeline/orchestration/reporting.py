"""How assets report to Dagster: one materialization per partition that loaded or skipped, none for one
that failed, each carrying its own job key as data version and every upstream's version as lineage.

Whoever launches the run (the UI, a backfill, a sensor, the schedule, ``make run``), an asset reports each
partition with its own ``AssetMaterialization``: data version = job key, the tags Dagster writes itself
(code version, input data versions and event pointers for every dependency, computed as Dagster computes
them), so Dagster's staleness and our skips agree. The step's output goes on to the run's later steps but
writes no event of its own (``OWN_EVENTS_METADATA_KEY``, dagster_internals.py), so there is no common
event with one shared version, and no event for a partition that failed or never ran.

A skip is a materialization too, carrying the unchanged data version and the description "skipped: ...":
Dagster's asset backfills count a requested partition without a materialization as failed (since 1.13.22,
dagster#34219), so a backfill that skips everything must still see one per partition. Each step also tags
its run with its counts (``surveillance/<asset>: 1 loaded, 70 skipped``), shown on the run and backfill
pages, and logs them.

A partition that raises fails alone: the step computes the others, reports them, hands its output on (the
executor runs later steps once their inputs exist, definitions.py), then fails naming the partitions that
did, so the run ends failed and Dagster shows those partitions failed. A later step leaves out the
partitions its upstream did not materialize in this run.

Per-partition events reach the event log in batches when ``DAGSTER_EVENT_BATCH_SIZE`` is set (the Makefile
sets it): one insert for a batch's events instead of about seven statements per event. This is Dagster's
own batch path, the one its events for a range output take.
"""

import itertools
import time
from collections import Counter, deque
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import dagster as dg

from surveillance_pipeline.core.keys import sha256_hex
from surveillance_pipeline.core.refresh import RefreshOutcome
from surveillance_pipeline.orchestration.dagster_internals import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
    CODE_VERSION_TAG,
    DATA_VERSION_IS_USER_PROVIDED_TAG,
    DATA_VERSION_TAG,
    NULL_EVENT_POINTER,
    OWN_EVENTS_METADATA_KEY,
    SKIP_PARTITION_DATA_VERSION_DEPENDENCY_THRESHOLD,
    get_input_data_version_tag,
    get_input_event_pointer_tag,
    job_asset_graph,
    job_asset_keys,
    log_batched_materialization,
    step_execution_context,
)
from surveillance_pipeline.orchestration.error_words import warehouse_lost, warehouse_lost_message

__all__ = ["DATA_VERSION_TAG", "RUN_SUMMARY_TAG_PREFIX"]

# The step's output: its metadata holds the key that stops Dagster writing an event of its own for it
# (dagster_internals.py). Dagster shows an output's metadata as it is, this key included, and has no
# public way to hide one: its value says what the line means where the user reads it.
STEP_OUTPUT_METADATA = {
    OWN_EVENTS_METADATA_KEY: dg.MetadataValue.text(
        "this step wrote its materialization events itself (above), each with its own data version"
    )
}
# What an asset yields.
PartitionEvents = Iterator[dg.MaterializeResult | dg.AssetMaterialization | dg.DagsterEvent]
# A batch of events is closed (written) once it has been open this long, so a long step's partitions show up
# in the UI as it goes, and a killed run loses at most this much of them (their rows stay committed, and the
# next run reports those partitions as skipped).
BATCH_SECONDS = 2.0
# Dagster's version of an upstream that has none recorded (a source never observed).
NO_VERSION = "INITIAL"
RUN_SUMMARY_TAG_PREFIX = "surveillance/"
FAILED_PARTITIONS_METADATA_KEY = "failed partitions"
# Partitions computed side by side: this many times their number are started, the one being reported
# included. While one thread computes a big species, the other goes on with the species after it until
# it is that far ahead, then waits. The 1M bench's largest species holds a quarter of the records, and
# the eight after it less than it alone: at 4, the partition threads of a full reload of
# occurrence_quality were busy 94% of the step (88.4 thread-seconds in 2 x 46.9 s); at 16, all of it
# (71.8 in 2 x 35.9 s; py-spy --idle, 2026-12-07 at adb0053). What waits meanwhile is each computed
# partition's report (some 20 kB). A run interrupted meanwhile leaves the partitions computed but not
# yet reported (up to 31) committed in the warehouse and not materialized in Dagster, until its next run
# reports them as skips.
RUN_AHEAD = 16


@dataclass(frozen=True)
class PartitionReport:
    data_version: str
    metadata: dict[str, Any]

    @property
    def action(self) -> str:
        return str(self.metadata.get("action", "loaded"))

    @property
    def description(self) -> str:
        """What the event list and the partition view show first: what happened, and why."""
        reason = self.metadata.get("reason")
        return f"{self.action}: {reason}" if reason else self.action


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
            # A load by record-level delta: '120 added, 480 changed, 118 removed of 14,210'.
            **({"records_changed": outcome.changes.describe()} if outcome.changes is not None else {}),
            **metadata,
        },
    )


def partition_range_tags(first: str, last: str) -> dict[str, str]:
    """Run tags for one run over the partitions ``first..last``."""
    return {ASSET_PARTITION_RANGE_START_TAG: first, ASSET_PARTITION_RANGE_END_TAG: last}


def report_asset(context: dg.AssetExecutionContext, report: PartitionReport) -> PartitionEvents:
    """Report an unpartitioned asset: its materialization, then the output for the run's later steps."""
    lineage = _Lineage(context, None)
    yield _materialization(context, None, report, lineage.tags(None))
    _summarize(context, Counter([report.action]), 1)
    yield dg.MaterializeResult(metadata=STEP_OUTPUT_METADATA)


def report_partitions(
    context: dg.AssetExecutionContext, compute: Callable[[str], PartitionReport], side_by_side: int = 1
) -> PartitionEvents:
    """Run ``compute`` for every partition of the step and report each with its own data version.

    ``side_by_side`` > 1: that many partitions are computed at once, in threads (``compute`` must then be
    safe to call from several threads: each its own connection, ``ThreadConnections``); they are still
    reported one by one in key order, from this thread, which alone talks to Dagster.
    """
    keys = context.partition_keys
    left_out = _not_materialized_upstream(context, keys)
    compute_isolated = _Isolated(context, compute, left_out)
    lineage = _Lineage(context, keys)
    batches = _EventBatches(step_execution_context(context))
    actions: Counter[str] = Counter()
    reports = _reports_in_order(compute_isolated, keys, side_by_side)
    # A partition's event is logged once the next partition is done (or at once when its batch has been
    # open BATCH_SECONDS), so that the event that closes a batch is always known: a partition that raises
    # still gets every partition before it written, since their rows are committed and Dagster writes a
    # batch only when it is closed. An event is taken out of ``pending`` before it is logged, so none is
    # logged twice whatever raises where.
    pending: dg.AssetMaterialization | None = None
    try:
        for key, report in reports:
            if report is None:
                continue
            actions[report.action] += 1
            current = _materialization(context, key, report, lineage.tags(key))
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
    finally:
        reports.close()  # side by side: the partitions not started are dropped, the running ones end
    if pending is not None:
        yield batches.log(pending, last=True)
    actions["failed"] = len(compute_isolated.errors)
    actions["not computed"] = len(compute_isolated.left_out)
    _summarize(context, actions, len(keys))
    yield dg.MaterializeResult(metadata=STEP_OUTPUT_METADATA)
    if compute_isolated.errors:
        failed = compute_isolated.errors
        raise dg.Failure(
            description=f"{len(failed)} of {len(keys)} partitions of {context.asset_key.to_user_string()} "
            f"failed (the others were reported): "
            + "; ".join(f"{key}: {' '.join(str(error).split())}" for key, error in sorted(failed.items())),
            metadata={
                FAILED_PARTITIONS_METADATA_KEY: dg.MetadataValue.json(
                    {key: " ".join(str(error).split()) for key, error in sorted(failed.items())}
                )
            },
        )


def _summarize(context: dg.AssetExecutionContext, actions: Counter[str], partitions: int) -> None:
    """Say on the run (its tags, shown on the run and backfill pages) and in its log what the step did."""
    counts = ", ".join(f"{count} {action}" for action, count in sorted(actions.items()) if count)
    asset = context.asset_key.to_user_string()
    context.log.info(f"{asset}: {counts} ({partitions} partition{'s' if partitions != 1 else ''})")
    context.instance.add_run_tags(context.run.run_id, {f"{RUN_SUMMARY_TAG_PREFIX}{asset}": counts})


class _Isolated:
    """``compute``, but a partition that raises gives None and is remembered (its error and the partition),
    as is one whose upstream was not materialized in this run; once every partition of the step has failed,
    the step fails with the first error (nothing partition-specific went wrong then: a database down).

    ``attempt`` only computes, so it may run in any thread; ``settle`` logs and keeps count, and runs in the
    step's own thread, the one that talks to Dagster.
    """

    def __init__(
        self,
        context: dg.AssetExecutionContext,
        compute: Callable[[str], PartitionReport],
        upstream_missing: set[str],
    ):
        self._context = context
        self._compute = compute
        self._upstream_missing = upstream_missing
        self._keys = context.partition_keys
        self.errors: dict[str, Exception] = {}
        self.left_out: list[str] = []

    def __call__(self, key: str) -> PartitionReport | None:
        return self.settle(key, self.attempt(key))

    def attempt(self, key: str) -> PartitionReport | Exception | None:
        """The partition's report, or what it raised; None when its upstream failed in this run."""
        if key in self._upstream_missing:
            return None
        try:
            return self._compute(key)
        except Exception as error:
            return error

    def settle(self, key: str, attempt: PartitionReport | Exception | None) -> PartitionReport | None:
        if isinstance(attempt, PartitionReport):
            return attempt
        asset = self._context.asset_key.to_user_string()
        if attempt is None:
            self._context.log.warning(
                f"{asset} partition {key} not computed: its upstream failed in this run"
            )
            self.left_out.append(key)
        else:
            self._context.log.error(f"{asset} partition {key} failed: {attempt}")
            self.errors[key] = attempt
        if len(self.errors) + len(self.left_out) == len(self._keys):
            if self.errors:
                first = next(iter(self.errors.values()))
                lost = warehouse_lost(first)
                if lost is not None:
                    # The step's own error (the run's, in the UI and make run's line) names the server.
                    raise dg.Failure(description=warehouse_lost_message(lost)) from first
                raise first
            raise RuntimeError(f"every partition's upstream failed in this run: {', '.join(self._keys)}")
        return None


def partition_threads(keys: list[str], side_by_side: int) -> int:
    """The threads ``report_partitions`` computes ``keys`` on: none (the step's own thread) unless
    ``side_by_side`` > 1 and there are partitions to share."""
    return side_by_side if side_by_side > 1 and len(keys) > 1 else 0


def _reports_in_order(
    isolated: _Isolated, keys: list[str], side_by_side: int
) -> Generator[tuple[str, PartitionReport | None], None, None]:
    """Each key with its settled report, in key order; with ``side_by_side`` > 1, that many partitions are
    computed at once in threads, up to RUN_AHEAD times that many ahead of the one being reported (one
    species can hold a quarter of a download's records: the other thread goes on past it meanwhile).

    Closing the generator (the step is interrupted, or a partition's failure ends it) starts no further
    partition and waits for the ones running: each ends in its own transaction's commit or rollback, and
    its connection is not closed under it.
    """
    if not partition_threads(keys, side_by_side):
        for key in keys:
            yield key, isolated(key)
        return
    pool = ThreadPoolExecutor(max_workers=side_by_side, thread_name_prefix="partition")
    try:
        started: deque[tuple[str, Future[PartitionReport | Exception | None]]] = deque()
        waiting = iter(keys)
        for key in itertools.islice(waiting, side_by_side * RUN_AHEAD):
            started.append((key, pool.submit(isolated.attempt, key)))
        while started:
            key, attempt = started.popleft()
            outcome = attempt.result()
            for following in itertools.islice(waiting, 1):
                started.append((following, pool.submit(isolated.attempt, following)))
            yield key, isolated.settle(key, outcome)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _not_materialized_upstream(context: dg.AssetExecutionContext, keys: list[str]) -> set[str]:
    """The partitions an upstream step of this run did not materialize in it (it failed, or left them out).

    Read from Dagster's event log, so it holds whichever process ran the upstream step: a partition whose
    latest materialization is older than this run's first event was not materialized by this run. Only
    the storage ids are read (no event is deserialized). An upstream that is not a step of this run (not
    selected, or not re-executed) leaves nothing out.
    """
    if len(keys) < 2:
        return set()
    run = context.run
    selected = run.asset_selection or job_asset_keys(context.job_def)
    upstream = [
        key
        for key in sorted(context.assets_def.dependency_keys)
        if key in selected
        and (run.step_keys_to_execute is None or key.to_python_identifier() in run.step_keys_to_execute)
    ]
    if not upstream:
        return set()
    first = context.instance.get_records_for_run(run.run_id, limit=1, ascending=True).records
    if not first:
        return set()
    run_start = first[0].storage_id
    storage = context.instance.event_log_storage
    missing: set[str] = set()
    for key in upstream:
        latest = storage.get_latest_storage_id_by_partition(
            key, dg.DagsterEventType.ASSET_MATERIALIZATION, partitions=set(keys)
        )
        missing |= {partition for partition in keys if latest.get(partition, -1) < run_start}
    return missing


class _Lineage:
    """The tags Dagster writes on a materialization for its upstream assets, for each partition of a step.

    Computed as Dagster computes them when it writes the event itself (dagster's data_version_cache.py and
    the stale-status resolver that reads them): an unpartitioned upstream's latest data version (its
    materialization, else its observation) and that event's id; a partitioned upstream's versions of the
    partitions read, hashed together, and the upstream's latest event id as the cursor after which a new
    version of any of them makes this partition stale.
    """

    def __init__(self, context: dg.AssetExecutionContext, keys: list[str] | None):
        instance = context.instance
        graph = job_asset_graph(context.job_def)
        self._common: dict[str, str] = {}
        self._per_partition: dict[str, dict[str, str]] = {}
        code_version = context.assets_def.code_versions_by_key.get(context.asset_key)
        # Dagster's own rule for an asset without a code version: the run id (never the same twice).
        self._common[CODE_VERSION_TAG] = code_version or context.run.run_id
        for upstream in sorted(context.assets_def.dependency_keys):
            data_tag, pointer_tag = (
                get_input_data_version_tag(upstream),
                get_input_event_pointer_tag(upstream),
            )
            upstream_partitions = graph.get(upstream).partitions_def
            latest = instance.get_latest_data_version_record(upstream)
            self._common[pointer_tag] = str(latest.storage_id) if latest is not None else NULL_EVENT_POINTER
            if upstream_partitions is None or latest is None:
                self._common[data_tag] = _version_of(latest)
                continue
            storage = instance.event_log_storage
            materialization = dg.DagsterEventType.ASSET_MATERIALIZATION
            if keys is not None:
                versions = storage.get_latest_tags_by_partition(
                    upstream, materialization, [DATA_VERSION_TAG], asset_partitions=keys
                )
                for key in keys:
                    version = versions.get(key, {}).get(DATA_VERSION_TAG, "")
                    self._per_partition.setdefault(key, {})[data_tag] = sha256_hex(version.encode("utf-8"))
                continue
            every = upstream_partitions.get_partition_keys(dynamic_partitions_store=instance)
            if len(every) >= SKIP_PARTITION_DATA_VERSION_DEPENDENCY_THRESHOLD:
                # Dagster, too, falls back to the latest event past this many partitions.
                self._common[data_tag] = _version_of(latest)
                continue
            versions = storage.get_latest_tags_by_partition(
                upstream, materialization, [DATA_VERSION_TAG], asset_partitions=list(every)
            )
            joined = "".join(tags[DATA_VERSION_TAG] for _, tags in sorted(versions.items()))
            self._common[data_tag] = sha256_hex(joined.encode("utf-8"))

    def tags(self, key: str | None) -> dict[str, str]:
        return {**self._common, **(self._per_partition.get(key, {}) if key is not None else {})}


def _version_of(record: dg.EventLogRecord | None) -> str:
    if record is None:
        return NO_VERSION
    entry = record.event_log_entry
    event = entry.asset_materialization or entry.asset_observation
    return (event.tags or {}).get(DATA_VERSION_TAG, NO_VERSION) if event is not None else NO_VERSION


def _materialization(
    context: dg.AssetExecutionContext, key: str | None, report: PartitionReport, lineage: dict[str, str]
) -> dg.AssetMaterialization:
    tags = {**lineage, DATA_VERSION_TAG: report.data_version, DATA_VERSION_IS_USER_PROVIDED_TAG: "true"}
    return dg.AssetMaterialization(
        asset_key=context.asset_key,
        partition=key,
        description=report.description,
        tags=tags,
        metadata=report.metadata,
    )


class _EventBatches:
    """Logs a step's materializations with batch metadata, closing a batch where told to.

    Batch ids name the run, step, attempt and a counter: they only key Dagster's buffer, and a retried
    step in the same process must not add to a batch its failed attempt left open.
    """

    def __init__(self, step: dg.StepExecutionContext):
        self._step = step
        self._count = 0
        self._opened = time.monotonic()

    def overdue(self) -> bool:
        return time.monotonic() - self._opened >= BATCH_SECONDS

    def log(self, materialization: dg.AssetMaterialization, last: bool) -> dg.DagsterEvent:
        step = self._step
        batch_id = f"{step.run_id}/{step.step.key}/{step.previous_attempt_count}/{self._count}"
        event = log_batched_materialization(step, materialization, batch_id, last)
        if last:
            self._count += 1
            self._opened = time.monotonic()
        return event


def recorded_data_version(
    instance: dg.DagsterInstance, key: dg.AssetKey, partition_key: str | None = None
) -> str | None:
    """The data version Dagster recorded with an asset's (partition's) latest materialization."""
    record = instance.get_latest_data_version_record(key, partition_key=partition_key)
    materialization = record.asset_materialization if record is not None else None
    if materialization is None or materialization.tags is None:
        return None
    return materialization.tags.get(DATA_VERSION_TAG)


def failed_partitions(instance: dg.DagsterInstance, run_id: str) -> dict[str, dict[str, str]]:
    """Per asset, the partitions that failed in a run and why, from its steps' failure events."""
    failed: dict[str, dict[str, str]] = {}
    for record in instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.STEP_FAILURE).records:
        event = record.event_log_entry.dagster_event
        data = event.step_failure_data if event is not None else None
        user = data.user_failure_data if data is not None else None
        if user is None or FAILED_PARTITIONS_METADATA_KEY not in user.metadata:
            continue
        value = user.metadata[FAILED_PARTITIONS_METADATA_KEY].value
        failed[record.event_log_entry.step_key or "?"] = dict(value) if isinstance(value, dict) else {}
    return failed
