"""occurrence_batches: one partition per batch file's day, applied once each through the batch ledger."""

from typing import Any

import dagster as dg

from surveillance_pipeline.ledger.feed import OCCURRENCE_FEED, apply_day, batch_path
from surveillance_pipeline.orchestration.outputs import outputs_metadata
from surveillance_pipeline.orchestration.partitions import batch_days
from surveillance_pipeline.orchestration.reporting import (
    PartitionEvents,
    PartitionReport,
    outcome_report,
    report_partitions,
)
from surveillance_pipeline.orchestration.resources import DataPaths, Warehouse


@dg.asset(
    metadata=outputs_metadata(tables=["occurrence_feed", "batch_ledger"]),
    partitions_def=batch_days,
    backfill_policy=dg.BackfillPolicy.single_run(),
    group_name="ledger",
    # Not OCCURRENCE_FEED.code_version: the feed's rows are upserted, not rebuilt from a recipe, and this
    # name predates Target (changing it would mark every applied day stale once).
    code_version=f"feed-schema-v{OCCURRENCE_FEED.schema_version}",
    pool=OCCURRENCE_FEED.name,
    description="data/batches/<day>.csv upserted by gbifID into occurrence_feed; the batch_ledger (keyed by "
    "the file's sha256) skips a batch already applied. Data version = the batch's sha256.",
)
def occurrence_batches(
    context: dg.AssetExecutionContext, paths: DataPaths, warehouse: Warehouse
) -> PartitionEvents:
    with warehouse.connect() as conn:

        def report_day(day: str) -> PartitionReport:
            applied = apply_day(conn, paths.batches(), day, context.run.run_id)
            details: dict[str, Any] = {"file": dg.MetadataValue.path(str(batch_path(paths.batches(), day)))}
            if applied.batch is not None:
                details.update(batch_rows=applied.batch.rows, applied_at=applied.applied_at)
            return outcome_report(applied.outcome, applied.version, **details)

        yield from report_partitions(context, report_day)
