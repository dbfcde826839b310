"""Does every target hold its snapshot? One verification for ``make verify`` and the asset checks.

Each table-writing asset has a check, ``holds_its_snapshot``, that recomputes the fingerprint of every
partition (one scan of its table) and compares it with what the partition's load recorded; it fails naming
the partitions that do not hold their snapshot, with the rows and digests expected and found. The checks
are not partitioned: one result per asset lists every partition, so the asset's page answers "which
partitions?" without opening any. The ``verify_targets`` job runs them all; a daily schedule runs the job.

A verification reads in a read-only snapshot, with no migration (a load that swaps a partition in waits
for the scan of its table to end, as for any reader). What it finds where no trigger saw an edit it then
notes in ``target_edits`` (core.fingerprints.note_findings), beside the edits the watch noted: the next
``make run`` (or sensor run, or backfill) reloads every noted partition with that reason, and ``make plan``
names it. ``make repair`` is left for what no verification has looked at yet.

Between a verification and the repair, runs skip the other partitions, and each skip is a new
materialization, after which Dagster would show the check as not evaluated. The sensor
``report_noted_edits`` keeps the UI true: every 30 s it reads the standing edits (the watch's and the
verifications') and reports, for each check whose partitions stand edited, a failed evaluation naming them,
again after any newer materialization of its asset; once they are reloaded, a passed one. An edit in psql
shows on the asset's node within a minute, without a scan.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import dagster as dg
import psycopg

from surveillance_pipeline.core.fingerprints import (
    PartitionVerdict,
    note_findings,
    standing_edits,
    verify_target,
)
from surveillance_pipeline.core.targets import Target
from surveillance_pipeline.orchestration.check_reports import changed_check_reports
from surveillance_pipeline.orchestration.resources import Warehouse

CHECK_NAME = "holds_its_snapshot"
VERIFY_JOB = "verify_targets"
# Partitions listed in a failing check's description and table; the count says how many more.
LISTED = 50


@dataclass(frozen=True)
class TableTarget:
    """A table target, the asset that writes it and the name of the check that verifies it.

    ``target_of`` gives the target at call time, so a version bump (or a test's) is the one verified.
    The list of them is assembled in definitions.py, from the domains' targets.
    """

    asset: str
    target_of: Callable[[], Target]
    check: str = CHECK_NAME

    @property
    def target(self) -> Target:
        return self.target_of()


def verdicts_table(verdicts: Sequence[PartitionVerdict]) -> dg.TableMetadataValue:
    """The partitions that do not hold their snapshot, as the UI's table."""
    columns = ("partition", "expected rows", "found rows", "expected digest", "found digest", "edits noted")
    records = [
        dg.TableRecord(
            {
                "partition": v.partition_key,
                "expected rows": str(v.expected.rows) if v.expected else "",
                "found rows": str(v.found.rows),
                "expected digest": v.expected.digest if v.expected else "",
                "found digest": v.found.digest,
                "edits noted": v.noted_edits or "none (found by the fingerprint)",
            }
        )
        for v in verdicts[:LISTED]
    ]
    return dg.MetadataValue.table(
        records=records, schema=dg.TableSchema(columns=[dg.TableColumn(name, "string") for name in columns])
    )


def check_result(verdicts: Sequence[PartitionVerdict], target: Target, seconds: float) -> dg.AssetCheckResult:
    failing = [v for v in verdicts if not v.holds]
    listed = ", ".join(v.partition_key for v in failing[:LISTED])
    more = f" and {len(failing) - LISTED} more" if len(failing) > LISTED else ""
    description = (
        f"all {len(verdicts)} partitions hold the snapshot their load wrote"
        if not failing
        else f"{len(failing)} of {len(verdicts)} partitions do not hold their snapshot: {listed}{more}"
    )
    return dg.AssetCheckResult(
        passed=not failing,
        description=description,
        metadata={
            "table": dg.MetadataValue.text(target.name),
            "partitions checked": len(verdicts),
            "partitions not holding": len(failing),
            "not holding": verdicts_table(failing),
            "seconds": round(seconds, 3),
        },
    )


def holds_snapshot_check(table: TableTarget) -> dg.AssetChecksDefinition:
    @dg.asset_check(
        asset=dg.AssetKey(table.asset),
        name=table.check,
        blocking=False,
        description=f"Every partition of table {table.target.name} holds the rows its load wrote: count and "
        "digest recomputed and compared with the fingerprint in its state row. Fails naming the partitions "
        "that do not (edited, deleted, truncated, restored or replaced outside the pipeline).",
    )
    def _check(warehouse: Warehouse) -> dg.AssetCheckResult:
        target = table.target
        started = time.perf_counter()
        with warehouse.connect_for_reading() as conn:
            verdicts = verify_target(conn, target)
        seconds = time.perf_counter() - started
        if any(not v.holds for v in verdicts):
            with warehouse.connect_for_findings() as conn:
                note_findings(conn, target, verdicts)
        return check_result(verdicts, target, seconds)

    return _check


def target_checks(tables: Sequence[TableTarget]) -> list[dg.AssetChecksDefinition]:
    return [holds_snapshot_check(table) for table in tables]


def verify_job(checks: Sequence[dg.AssetChecksDefinition]) -> dg.UnresolvedAssetJobDefinition:
    return dg.define_asset_job(
        VERIFY_JOB,
        selection=dg.AssetSelection.checks(*checks),
        description="Verify every table target: each partition's rows against its load's fingerprint. "
        "Reads only; what it finds reloads on the next run (make repair for what the watch missed).",
    )


def verify_schedule() -> dg.ScheduleDefinition:
    return dg.ScheduleDefinition(
        name="daily_verify_targets",
        cron_schedule="30 2 * * *",  # 02:30 UTC, before the weekly ingest's 03:00
        job_name=VERIFY_JOB,
        execution_timezone="UTC",
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description="Verify every table target daily: what no trigger could see (a restore, a replica, "
        "triggers disabled) is found by the fingerprints.",
    )


def verify_all(
    conn: psycopg.Connection, tables: Sequence[TableTarget]
) -> list[tuple[TableTarget, list[PartitionVerdict], float]]:
    """Verify every table, then note what was found (note_findings) for the next run to repair."""
    results = []
    for table in tables:
        started = time.perf_counter()
        results.append((table, verify_target(conn, table.target), time.perf_counter() - started))
    for table, verdicts, _ in results:
        note_findings(conn, table.target, verdicts)
    return results


# The sensor's name, and how often it reads the standing edits.
NOTED_EDITS_SENSOR = "report_noted_edits"
NOTED_EDITS_INTERVAL_S = 30


def noted_edits_evaluation(table: TableTarget, edits: Sequence[Sequence[str]]) -> dg.AssetCheckEvaluation:
    """The check's evaluation from the edits standing against its table: failed naming them, else passed."""
    listed = ", ".join(f"{key} ({operations})" for key, operations in edits[:LISTED])
    more = f" and {len(edits) - LISTED} more" if len(edits) > LISTED else ""
    if edits:
        description = (
            f"{len(edits)} {'partition' if len(edits) == 1 else 'partitions'} of {table.target.name} "
            "edited outside the pipeline and not yet "
            f"repaired: {listed}{more}. The next run of {table.asset} reloads them."
        )
    else:
        description = f"no edit of {table.target.name} stands: the partitions noted before were reloaded"
    return dg.AssetCheckEvaluation(
        asset_key=dg.AssetKey(table.asset),
        check_name=table.check,
        passed=not edits,
        description=description,
        metadata={
            "table": dg.MetadataValue.text(table.target.name),
            "partitions not repaired": len(edits),
            "source": dg.MetadataValue.text(f"sensor {NOTED_EDITS_SENSOR} (the watch and verifications)"),
        },
    )


def noted_edits_sensor(tables: Sequence[TableTarget]) -> dg.SensorDefinition:
    by_check = {(table.asset, table.check): table for table in tables}

    @dg.sensor(
        name=NOTED_EDITS_SENSOR,
        minimum_interval_seconds=NOTED_EDITS_INTERVAL_S,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Reports each table's holds_its_snapshot check from the edits standing against it (noted "
        "by the watch's triggers or by a verification, not yet reloaded): failed naming the partitions, "
        "again after each newer materialization of the asset (a skip would hide it otherwise), passed once "
        "they are reloaded. Reads one small table; launches nothing.",
    )
    def _sensor(context: dg.SensorEvaluationContext, warehouse: Warehouse) -> dg.SensorResult:
        with warehouse.connect_for_reading() as conn:
            standing = standing_edits(conn)
        findings = {key: standing.get(table.target.name, []) for key, table in by_check.items()}
        return changed_check_reports(
            context, findings, lambda asset, check, rows: noted_edits_evaluation(by_check[asset, check], rows)
        )

    return _sensor
