"""``make verify``: every table target's partitions against the fingerprints their loads recorded.

Prints one line per table and, when some partition does not hold its snapshot, one line per partition
(rows and digest expected and found, and the edits the watch noted); exits 1 then. Reads the tables in a
read-only snapshot, with no migration, then notes what it found where no trigger saw it as an edit
(``target_edits``): the next ``make run`` reloads every partition it names, and ``make plan`` says so
(orchestration/verification.py, core/fingerprints.py).
"""

from __future__ import annotations

import argparse
import os
import sys

import psycopg

from surveillance_pipeline.commands import exit_process
from surveillance_pipeline.core.migrations import MIGRATIONS, applied_version
from surveillance_pipeline.core.settings import DATABASE_URL_VARIABLE
from surveillance_pipeline.definitions import table_targets
from surveillance_pipeline.orchestration.verification import verify_all


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
        results = verify_all(conn, table_targets())
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
    unnoted = sum(1 for v in failing if v.expected is not None and not v.noted_edits)
    loaded = sum(1 for v in failing if v.expected is not None)
    print(f"\nThe next `make run` reloads the {loaded} loaded partitions not holding their snapshot", end="")
    print(
        f" ({unnoted} changed where no trigger saw them: noted now, 'found by verification')."
        if unnoted
        else "."
    )
    if loaded < len(failing):
        print(f"{len(failing) - loaded} hold rows no load wrote: delete them, or load their species.")
    return 1


if __name__ == "__main__":
    exit_process(main())
