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
"""

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import dagster as dg
from dagster._core.events import DagsterEventType

from surveillance_pipeline.core.keys import sha256_hex
from surveillance_pipeline.core.refresh import RefreshOutcome

DEFER_ASSET_EVENTS_TAG = "dagster/defer_asset_events"
DATA_VERSION_TAG = "dagster/data_version"


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
) -> Iterator[dg.MaterializeResult | dg.AssetMaterialization]:
    """Run ``compute`` for every partition of the step and report each with its own data version."""
    keys = context.partition_keys
    if len(keys) == 1:
        report = compute(keys[0])
        yield dg.MaterializeResult(data_version=dg.DataVersion(report.data_version), metadata=report.metadata)
        return

    deferred = context.run.tags.get(DEFER_ASSET_EVENTS_TAG) == "true"
    if not deferred:
        yield dg.MaterializeResult()
    lineage = _upstream_lineage(context, upstream, keys) if upstream is not None else {}
    code_version = context.assets_def.code_versions_by_key.get(context.asset_key)
    for key in keys:
        report = compute(key)
        tags = {DATA_VERSION_TAG: report.data_version, "dagster/data_version_is_user_provided": "true"}
        if code_version:
            tags["dagster/code_version"] = code_version
        if key in lineage and upstream is not None:
            upstream_version, storage_id = lineage[key]
            name = upstream.to_user_string()
            # What Dagster writes for a single upstream partition: sha256 of its data version.
            tags[f"dagster/input_data_version/{name}"] = sha256_hex(upstream_version.encode("utf-8"))
            tags[f"dagster/input_event_pointer/{name}"] = str(storage_id)
        yield dg.AssetMaterialization(
            asset_key=context.asset_key, partition=key, tags=tags, metadata=report.metadata
        )
    if deferred:
        yield dg.MaterializeResult()


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
