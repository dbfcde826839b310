"""occurrence_batches: one partition per batch file's day, applied once each through the batch ledger."""

from typing import Any

import dagster as dg

from surveillance_pipeline.core.keys import JobKeyParts
from surveillance_pipeline.core.refresh import LOADED, SKIPPED, RefreshOutcome, record_provenance
from surveillance_pipeline.ledger.feed import SCHEMA_VERSION, TARGET, apply_batch, batch_path, read_batch
from surveillance_pipeline.outputs import outputs_metadata
from surveillance_pipeline.partitions import batch_days
from surveillance_pipeline.reporting import (
    PartitionEvents,
    PartitionReport,
    outcome_report,
    report_partitions,
)
from surveillance_pipeline.resources import DataPaths, Warehouse

NO_BATCH = "none"


@dg.asset(
    metadata=outputs_metadata(tables=["occurrence_feed", "batch_ledger"]),
    partitions_def=batch_days,
    backfill_policy=dg.BackfillPolicy.single_run(),
    group_name="ledger",
    code_version=f"feed-schema-v{SCHEMA_VERSION}",
    pool=TARGET,
    description="data/batches/<day>.csv upserted by gbifID into occurrence_feed; the batch_ledger (keyed by "
    "the file's sha256) skips a batch already applied. Data version = the batch's sha256.",
)
def occurrence_batches(
    context: dg.AssetExecutionContext, paths: DataPaths, warehouse: Warehouse
) -> PartitionEvents:
    with warehouse.connect() as conn:

        def apply_day(day: str) -> PartitionReport:
            path = batch_path(paths.batches(), day)
            details: dict[str, Any] = {"file": dg.MetadataValue.path(str(path))}
            if not path.exists():
                version = NO_BATCH
                parts = JobKeyParts(input=NO_BATCH, transform=1, config={}, schema=SCHEMA_VERSION)
                outcome = RefreshOutcome(SKIPPED, f"no batch file for {day}", parts.key, parts.as_dict(), 0)
            else:
                batch = read_batch(path)
                applied = apply_batch(conn, batch)
                version = batch.checksum
                parts = JobKeyParts(input=batch.checksum, transform=1, config={}, schema=SCHEMA_VERSION)
                action, reason = (
                    (LOADED, "new batch") if applied.applied else (SKIPPED, "batch already applied")
                )
                outcome = RefreshOutcome(action, reason, parts.key, parts.as_dict(), applied.rows)
                details.update(batch_rows=batch.rows, applied_at=applied.applied_at)
            record_provenance(
                conn,
                run_id=context.run.run_id,
                asset="occurrence_batches",
                partition_key=day,
                outcome=outcome,
            )
            return outcome_report(outcome, version, **details)

        yield from report_partitions(context, apply_day)
