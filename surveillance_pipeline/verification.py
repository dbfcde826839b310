"""Does every target hold its snapshot? One verification for ``make verify`` and the asset checks.

Each table-writing asset has a check, ``holds_its_snapshot``, that recomputes the fingerprint of every
partition (one scan of its table) and compares it with what the partition's load recorded; it fails naming
the partitions that do not hold their snapshot, with the rows and digests expected and found. The checks
are not partitioned: one result per asset lists every partition, so the asset's page answers "which
partitions?" without opening any. The ``verify_targets`` job runs them all; a daily schedule runs the job.

A verification only reads (a read-only snapshot; no migration, no lock that a load waits on). What it finds
is repaired by a run: the partitions the watch noted reload on the next ``make run``; what only the
fingerprints show (the watch was off while they changed) reloads in a run that compares fingerprints at
every skip, ``make repair`` (``SURVEILLANCE_VERIFY_TARGETS=1``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import dagster as dg
import psycopg

from surveillance_pipeline.core.fingerprints import PartitionVerdict, verify_target
from surveillance_pipeline.core.migrations import MIGRATIONS, applied_version
from surveillance_pipeline.core.settings import DATABASE_URL_VARIABLE
from surveillance_pipeline.core.targets import Target
from surveillance_pipeline.ledger.feed import OCCURRENCE_FEED
from surveillance_pipeline.occurrences.load import OCCURRENCES
from surveillance_pipeline.places.geocoded import GEOCODED_LOCALITIES
from surveillance_pipeline.places.regions import REGION_ASSIGNMENT, REGIONS
from surveillance_pipeline.resources import Warehouse
from surveillance_pipeline.samples.load import OCCURRENCE_SAMPLE
from surveillance_pipeline.snapshots.devil import snapshot_target

CHECK_NAME = "holds_its_snapshot"
VERIFY_JOB = "verify_targets"
# Partitions listed in a failing check's description and table; the count says how many more.
LISTED = 50


@dataclass(frozen=True)
class TableTarget:
    """A table target, the asset that writes it and the name of the check that verifies it."""

    asset: str
    target: Target
    check: str = CHECK_NAME


def table_targets() -> list[TableTarget]:
    """Every table an asset writes under job keys, read at call time (a version bump counts)."""
    return [
        TableTarget("occurrences", OCCURRENCES),
        TableTarget("occurrence_sample", OCCURRENCE_SAMPLE),
        TableTarget("geocoded_localities", GEOCODED_LOCALITIES),
        # region_assignment loads the layer into regions first, then assigns: two tables, two checks.
        TableTarget("region_assignment", REGIONS, "regions_table_holds_its_snapshot"),
        TableTarget("region_assignment", REGION_ASSIGNMENT),
        TableTarget("devil_snapshot", snapshot_target()),
        TableTarget("occurrence_batches", OCCURRENCE_FEED),
    ]


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


def holds_snapshot_check(asset: str, check: str, target_of: Callable[[], Target]) -> dg.AssetChecksDefinition:
    @dg.asset_check(
        asset=dg.AssetKey(asset),
        name=check,
        blocking=False,
        description=f"Every partition of table {target_of().name} holds the rows its load wrote: count and "
        "digest recomputed and compared with the fingerprint in its state row. Fails naming the partitions "
        "that do not (edited, deleted, truncated, restored or replaced outside the pipeline).",
    )
    def _check(warehouse: Warehouse) -> dg.AssetCheckResult:
        target = target_of()
        started = time.perf_counter()
        with warehouse.connect_for_reading() as conn:
            verdicts = verify_target(conn, target)
        return check_result(verdicts, target, time.perf_counter() - started)

    return _check


def target_checks() -> list[dg.AssetChecksDefinition]:
    def target_named(name: str) -> Callable[[], Target]:
        return lambda: next(t.target for t in table_targets() if t.target.name == name)

    return [holds_snapshot_check(t.asset, t.check, target_named(t.target.name)) for t in table_targets()]


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


def verify_all(conn: psycopg.Connection) -> list[tuple[TableTarget, list[PartitionVerdict], float]]:
    results = []
    for table in table_targets():
        started = time.perf_counter()
        results.append((table, verify_target(conn, table.target), time.perf_counter() - started))
    return results


def main(argv: list[str] | None = None) -> int:
    """``make verify``: the table of every target's partitions; exit 1 when any does not hold its snapshot."""
    parser = argparse.ArgumentParser(description="Verify every table target against its fingerprints.")
    parser.parse_args(argv)
    url = os.environ.get(DATABASE_URL_VARIABLE)
    if not url:
        print(f"verify: {DATABASE_URL_VARIABLE} is not set (make verify sets it)", file=sys.stderr)
        return 2
    with psycopg.connect(url, autocommit=True, application_name="surveillance_pipeline verify") as conn:
        if applied_version(conn) < MIGRATIONS[-1].version:
            print("verify: this warehouse predates fingerprints; run `make run` once first", file=sys.stderr)
            return 2
        results = verify_all(conn)
    failing = [v for _, verdicts, _ in results for v in verdicts if not v.holds]
    print(f"{'asset':<22}{'table':<22}{'partitions':>11}{'holding':>9}{'not':>5}{'seconds':>9}")
    for table, verdicts, seconds in results:
        bad = sum(1 for v in verdicts if not v.holds)
        print(
            f"{table.asset:<22}{table.target.name:<22}{len(verdicts):>11}{len(verdicts) - bad:>9}{bad:>5}"
            f"{seconds:>9.2f}"
        )
    if not failing:
        print("verify: every partition holds the snapshot its load wrote")
        return 0
    print(f"\nnot holding their snapshot ({len(failing)}):")
    for verdict in failing:
        noted = f"edits noted: {verdict.noted_edits}" if verdict.noted_edits else "no edit noted"
        print(f"  {verdict.target} {verdict.partition_key}: {verdict.describe()} ({noted})")
    unnoted = sum(1 for v in failing if not v.noted_edits)
    print(f"\nThe next `make run` reloads the {len(failing) - unnoted} noted partitions.", end=" ")
    if unnoted:
        print(f"{unnoted} changed where no trigger saw them: `make repair` reloads those too.")
    else:
        print()
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
