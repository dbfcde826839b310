"""A partition brought to its new rows by the records that differ, not reloaded whole (Dagster-free).

A reload whose only changed part is the input (the transform, config and schema the same) may instead
make the rows a full reload would write in a temporary table beside the partition, compare the two by
gbifID and every column's text, and delete and insert only the records that differ: the partition ends
holding exactly the rows a full reload would have left, in the same transaction as its state row. Its
fingerprint (the count and the sum of the rows' 64-bit hashes, fingerprints.py) follows from the one it
held: the deleted rows' hashes out, the inserted rows' in, each returned by the statement that wrote the
row, so no scan of the partition is needed to vouch for it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from surveillance_pipeline.core.fault_points import AFTER_DELETE, fault_point
from surveillance_pipeline.core.fingerprints import Fingerprint
from surveillance_pipeline.core.sql_files import load_sql
from surveillance_pipeline.core.targets import Target

CORE = "surveillance_pipeline.core"


@dataclass(frozen=True)
class RecordChanges:
    """What a load by record-level delta found and applied: records added, changed (same gbifID, other
    content) and removed, of the records the partition holds after it; or, with ``applied`` false, the
    changes it counted before finding them too many to pay (the partition was then reloaded whole)."""

    added: int
    changed: int
    removed: int
    rows: int
    applied: bool = True
    # Set when the delta was given up before its rows were compared: how many of the ``rows`` records it
    # found might differ (the work a delta does), past the share where it pays; the three counts are then 0.
    may_differ: int | None = None

    @property
    def total(self) -> int:
        return self.added + self.changed + self.removed

    def describe(self) -> str:
        if self.may_differ is not None:
            return f"reloaded: delta too large ({self.may_differ:,} of {self.rows:,} records may differ)"
        counts = f"{self.added:,} added, {self.changed:,} changed, {self.removed:,} removed of {self.rows:,}"
        return counts if self.applied else f"reloaded: delta too large ({counts})"

    def as_dict(self) -> dict[str, Any]:
        said: dict[str, Any] = {
            "added": self.added,
            "changed": self.changed,
            "removed": self.removed,
            "rows": self.rows,
            "applied": self.applied,
        }
        if self.may_differ is not None:
            said["may_differ"] = self.may_differ
        return said


@dataclass(frozen=True)
class Delta:
    """What ``apply_changes`` returns: the changes it applied with the partition's fingerprint after them,
    or (``fingerprint`` None) the changes it counted and did not apply, the delta being too large."""

    changes: RecordChanges
    fingerprint: Fingerprint | None


def too_large(changes: int, rows: int, held_rows: int, share_limit: float) -> bool:
    """Whether ``changes`` records are past the share of the partition (the larger of its rows before and
    after) where a delta stops paying."""
    return changes > share_limit * max(rows, held_rows, 1)


def given_up(may_differ: int, held: Fingerprint) -> Delta:
    """A delta given up before comparing rows: ``may_differ`` of the held records might differ, too many."""
    return Delta(RecordChanges(0, 0, 0, held.rows, applied=False, may_differ=may_differ), None)


def apply_record_delta(
    conn: psycopg.Connection,
    *,
    target: Target,
    partition_ref: str,
    next_table: str,
    held: Fingerprint,
    share_limit: float,
    only_ids: str | None = None,
) -> Delta:
    """Bring the partition to the rows in ``next_table`` (a temporary table of the target's columns, in
    its order) by the records that differ; ``held`` is the fingerprint the partition holds now.

    ``only_ids``: a temporary table of the gbifIDs (column ``id``) whose rows may differ, when the caller
    knows them; ``next_table`` then holds the new rows of those alone (one named there and absent from
    ``next_table`` is removed), and every other held row is left unread.

    When more than ``share_limit`` of the records (of the more numerous side) differ, nothing is written
    and ``next_table`` is dropped: the caller reloads whole.
    """
    own_table = target.partition_table(partition_ref)
    where: sql.Composable
    params: dict[str, int]
    if own_table is not None or target.partition_column is None:
        held_table, where, params = own_table or target.name, sql.SQL("TRUE"), {}
    else:
        held_table = target.name
        where = sql.SQL("{} = %(ref)s").format(sql.Identifier("held", target.partition_column))
        params = {"ref": int(partition_ref)}
    if only_ids is not None:
        where = sql.SQL("{} AND {} IN (SELECT id FROM {})").format(
            where, sql.Identifier("held", "id"), sql.Identifier(only_ids)
        )
    names = {"next": sql.Identifier(next_table), "held": sql.Identifier(held_table), "where": where}
    conn.execute(load_sql(CORE, "create_record_changes").format(**names), params)
    counted = conn.execute(load_sql(CORE, "select_record_changes").format(**names)).fetchone()
    assert counted is not None
    added, changed, removed, rows = (int(value) for value in counted)
    if only_ids is not None:
        rows = held.rows + added - removed  # next_table holds the rows of only_ids
    if too_large(added + changed + removed, rows, held.rows, share_limit):
        conn.execute(load_sql(CORE, "drop_record_changes").format(**names))
        return Delta(RecordChanges(added, changed, removed, rows, applied=False), None)
    gone = conn.execute(load_sql(CORE, "delete_changed_records").format(**names), params).fetchone()
    # The changed and removed records' rows are deleted in this transaction now: a crash must leave them.
    fault_point(AFTER_DELETE, conn)
    came = conn.execute(load_sql(CORE, "insert_changed_records").format(**names)).fetchone()
    assert gone is not None and came is not None
    if int(gone[0]) != changed + removed or int(came[0]) != added + changed:
        raise RuntimeError(
            f"{held_table}: the delta deleted {gone[0]} and inserted {came[0]} rows for {added} added, "
            f"{changed} changed and {removed} removed records"
        )
    digest = str(int(held.digest) - int(gone[1]) + int(came[1]))
    return Delta(RecordChanges(added, changed, removed, rows), Fingerprint(rows, digest))


def change_counts(changes: Mapping[str, Any]) -> Counter[str]:
    """One partition's record changes (a provenance row's detail, ``RecordChanges.as_dict``) as counts to
    add up per asset."""
    if not changes.get("applied", True):
        return Counter({"too large": 1})
    names = ("added", "changed", "removed", "rows")
    return Counter({"by delta": 1, **{name: int(changes.get(name, 0)) for name in names}})


def describe_changes(counts: Counter[str]) -> str:
    """An asset's record changes over its partitions: 'by delta (71): 120 added, 480 changed, 118 removed
    of 14,210', and how many partitions found the delta too large and reloaded whole."""
    said = []
    if counts["by delta"]:
        said.append(
            f"by delta ({counts['by delta']}): {counts['added']:,} added, {counts['changed']:,} changed, "
            f"{counts['removed']:,} removed of {counts['rows']:,}"
        )
    if counts["too large"]:
        said.append(f"reloaded: delta too large ({counts['too large']})")
    return "; ".join(said)
