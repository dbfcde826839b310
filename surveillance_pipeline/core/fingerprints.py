"""What a target holds, checked rather than trusted.

Three mechanisms, each for what the others cannot see:

- **A fingerprint with every load.** In the load's own transaction, the partition's rows are counted and
  digested (the sum of each row's 64-bit hash over its text, every column: order-independent, so no
  sort, and as cheap as a hash scan in PostgreSQL gets); the pair is kept in the state row beside the
  job key. The key says what the partition should hold; the fingerprint says what it held when the load
  committed.
- **The watch.** Statement-level triggers with transition tables on every target table note the
  partitions that a statement outside a refresh transaction touched (``target_edits``, migration 8): an
  edit is known on the next run from one small read, without scanning a row. A refresh transaction says
  so (``surveillance.refreshing``) and is not noted. (Transition tables are filled for the pipeline's own
  statements too, whatever the function then does: about a quarter more on a bare 1M-row DELETE and
  INSERT, a few percent of a region_assignment load; occurrences loads into a table that has no trigger
  until it is swapped in, and pays nothing.)
- **Verification.** What no trigger sees (a table dropped and made again, triggers disabled during a
  restore, a promoted replica) is found by recomputing the fingerprints and comparing. A run does it for a
  partition whose watch is not intact; ``make verify`` and the asset checks do it for every partition. A
  verification reads the tables in a read-only snapshot; what it finds it then notes as an edit
  (``note_findings``), so the next run repairs it and the plan and the checks name it until then.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import psycopg
from psycopg import sql

from surveillance_pipeline.core.sql_files import load_sql
from surveillance_pipeline.core.targets import WHOLE_TARGET_REF, Target

CORE = "surveillance_pipeline.core"

# Set (transaction-local) by a refresh transaction: the watch's triggers leave its writes alone.
REFRESHING_SETTING = "surveillance.refreshing"
# Set (per connection) to have every skip compare the partition's fingerprint too: a repair run after a
# verification found what the watch could not see.
VERIFY_SETTING = "surveillance.verify_fingerprints"
# The triggers of the watch on each table (insert, update, delete, truncate).
WATCH_TRIGGERS = 4
EDITED_OUTSIDE = "target edited outside the pipeline"
# The operation a verification notes against a partition whose fingerprint moved where no trigger saw it.
FOUND_BY_VERIFICATION = "found by verification"


@dataclass(frozen=True)
class Fingerprint:
    """What a partition holds: its rows' count and the order-independent digest of their content."""

    rows: int
    digest: str

    def describe(self) -> str:
        return f"{self.rows} rows, digest {self.digest}"


@dataclass(frozen=True)
class PartitionWatch:
    """The watch over one partition: the edits noted against it, and whether it could have seen them all."""

    edits: str | None
    intact: bool


def mark_refreshing(conn: psycopg.Connection) -> None:
    """Tell the watch that this transaction is a refresh (call inside the transaction)."""
    conn.execute("SELECT set_config(%s, 'on', true)", [REFRESHING_SETTING])


def verify_every_skip(conn: psycopg.Connection) -> bool:
    row = conn.execute("SELECT current_setting(%s, true) = 'on'", [VERIFY_SETTING]).fetchone()
    return bool(row and row[0])


def watch_table(conn: psycopg.Connection, target: Target, table: str) -> None:
    """Put the watch's triggers on ``table`` (the target's table, or one of its partitions' tables), or
    enable them again. Idempotent."""
    conn.execute(
        load_sql(CORE, "create_target_watch").format(
            table=sql.Identifier(table),
            target=sql.Literal(target.name),
            partition_column=sql.Literal(target.partition_column or ""),
        )
    )


def watch_target(conn: psycopg.Connection, target: Target) -> None:
    """The watch on the target's table and on every partition table attached to it."""
    watch_table(conn, target, target.name)
    if target.table_per_partition:
        for table in attached_partition_tables(conn, target):
            watch_table(conn, target, table)


def attached_partition_tables(conn: psycopg.Connection, target: Target) -> list[str]:
    rows = conn.execute(
        "SELECT child.relname FROM pg_inherits JOIN pg_class AS child ON child.oid = pg_inherits.inhrelid "
        "WHERE pg_inherits.inhparent = to_regclass(%s) ORDER BY 1",
        [target.name],
    ).fetchall()
    return [row[0] for row in rows]


def partition_watch(conn: psycopg.Connection, target: Target, partition_ref: str) -> PartitionWatch:
    """One small read: the edits noted against the partition, and whether its watch is in place."""
    parameters = watch_parameters(target, partition_ref)
    row = conn.execute(load_sql(CORE, "select_partition_watch"), parameters).fetchone()
    assert row is not None
    return read_watch(parameters, *row)


def watch_parameters(target: Target, partition_ref: str) -> dict[str, object]:
    """The parameters of select_partition_watch.sql (also read inside a refresh's own statement)."""
    own_table = target.partition_table(partition_ref)
    tables = [target.name] if own_table is None else [target.name, own_table]
    return {"target": target.name, "partition_ref": partition_ref, "tables": tables, "own_table": own_table}


def read_watch(
    parameters: dict[str, object], edits: str | None, triggers: int, attached: bool
) -> PartitionWatch:
    """The watch from select_partition_watch.sql's columns: intact when every table that holds the
    partition has all its triggers enabled (and a partition's own table is still attached)."""
    tables = parameters["tables"]
    assert isinstance(tables, list)
    return PartitionWatch(edits, triggers == WATCH_TRIGGERS * len(tables) and bool(attached))


def rewatch_partition(conn: psycopg.Connection, target: Target, partition_ref: str) -> None:
    """Put back the watch over a partition whose rows were found to hold their snapshot."""
    watch_table(conn, target, target.name)
    own_table = target.partition_table(partition_ref)
    if own_table is not None:
        watch_table(conn, target, own_table)


def partition_fingerprint(
    conn: psycopg.Connection, target: Target, partition_ref: str, table: str | None = None
) -> Fingerprint:
    """The fingerprint of the partition's rows as the target holds them now (or as ``table`` holds them:
    a partition's fresh table before it is swapped in)."""
    if target.partition_column is None or table is not None:
        where: sql.Composable = sql.SQL("TRUE")
        params: dict[str, int] = {}
    else:
        where = sql.SQL("{} = %(ref)s").format(sql.Identifier(target.partition_column))
        params = {"ref": int(partition_ref)}
    statement = load_sql(CORE, "select_partition_fingerprint").format(
        table=sql.Identifier(table or target.name), where=where
    )
    row = conn.execute(statement, params).fetchone()
    assert row is not None
    return Fingerprint(int(row[0]), str(row[1]))


def fingerprints_by_partition(conn: psycopg.Connection, target: Target) -> dict[str, Fingerprint]:
    """Every partition's fingerprint in one scan of the target's table, by partition_ref."""
    if target.partition_column is None:
        ref: sql.Composable = sql.Literal(WHOLE_TARGET_REF)
    else:
        ref = sql.SQL("{}::text").format(sql.Identifier(target.partition_column))
    statement = load_sql(CORE, "select_fingerprints_by_partition").format(
        table=sql.Identifier(target.name), partition_ref=ref
    )
    return {str(r[0]): Fingerprint(int(r[1]), str(r[2])) for r in conn.execute(statement).fetchall()}


def note_table_replaced(conn: psycopg.Connection, target: Target, operation: str) -> None:
    """Every loaded partition of a target whose table was dropped or made again outside the pipeline is
    noted as edited: each is reloaded by its next refresh, with that reason."""
    conn.execute(
        load_sql(CORE, "insert_edits_of_loaded_partitions"), {"target": target.name, "operation": operation}
    )


def forget_edits(conn: psycopg.Connection, target: Target, partition_ref: str) -> None:
    """The partition was reloaded: what was noted against it no longer stands."""
    conn.execute(
        "DELETE FROM target_edits WHERE target = %s AND partition_ref = %s", [target.name, partition_ref]
    )


@dataclass(frozen=True)
class PartitionVerdict:
    """One partition of a target, verified: what its load wrote against what it holds now.

    ``expected`` is None for rows of a partition the pipeline never loaded (a COPY for another species);
    its digest is None for a partition loaded before fingerprints, whose count alone can be compared.
    """

    target: str
    partition_key: str
    partition_ref: str
    expected: Fingerprint | None
    found: Fingerprint
    noted_edits: str | None

    @property
    def holds(self) -> bool:
        if self.expected is None:
            return False
        if self.expected.digest == UNKNOWN_DIGEST:
            return self.expected.rows == self.found.rows
        return self.expected == self.found

    def describe(self) -> str:
        expected = self.expected.describe() if self.expected else "no rows (never loaded)"
        return f"expected {expected}; found {self.found.describe()}"


NO_ROWS = Fingerprint(0, "0")
# The digest of a partition loaded before fingerprints were taken (migration 8).
UNKNOWN_DIGEST = "unknown"


def verify_target(conn: psycopg.Connection, target: Target) -> list[PartitionVerdict]:
    """Every loaded partition of ``target`` (and any rows outside them), its recorded fingerprint against
    a fresh one, in one snapshot and one scan. Reads only (a REPEATABLE READ, READ ONLY transaction)."""
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        state = conn.execute(
            "SELECT partition_key, coalesce(partition_ref, ''), rows, coalesce(digest, %s) FROM target_state "
            "WHERE target = %s ORDER BY partition_key",
            [UNKNOWN_DIGEST, target.name],
        ).fetchall()
        present = conn.execute("SELECT to_regclass(%s) IS NOT NULL", [target.name]).fetchone()
        found = fingerprints_by_partition(conn, target) if present and present[0] else {}
        edits: dict[str, str] = dict(
            conn.execute(
                "SELECT partition_ref, array_to_string(operations, ', ') FROM target_edits WHERE target = %s",
                [target.name],
            ).fetchall()
        )
    verdicts = [
        PartitionVerdict(
            target.name, key, ref, Fingerprint(int(rows), digest), found.get(ref, NO_ROWS), edits.get(ref)
        )
        for key, ref, rows, digest in state
    ]
    loaded = {verdict.partition_ref for verdict in verdicts}
    for ref in sorted(set(found) - loaded):
        # Rows of a partition the pipeline never loaded: no state row stands for them.
        key = f"{target.partition_column or 'rows'} {ref}"
        verdicts.append(PartitionVerdict(target.name, key, ref, None, found[ref], edits.get(ref)))
    return verdicts


def note_findings(conn: psycopg.Connection, target: Target, verdicts: Sequence[PartitionVerdict]) -> int:
    """Note every loaded partition found not holding its snapshot, and not already noted, as edited
    (``FOUND_BY_VERIFICATION``): what a verification finds stands until a refresh reloads the partition.
    Returns how many were noted."""
    refs = [v.partition_ref for v in verdicts if not v.holds and v.expected is not None and not v.noted_edits]
    if refs:
        conn.execute(
            load_sql(CORE, "insert_verification_findings"),
            {"target": target.name, "refs": refs, "operation": FOUND_BY_VERIFICATION},
        )
    return len(refs)


def standing_edits(conn: psycopg.Connection) -> dict[str, list[tuple[str, str]]]:
    """Per target, the (partition key, operations) of every edit noted and not yet repaired."""
    standing: dict[str, list[tuple[str, str]]] = {}
    for target, partition_key, operations in conn.execute(load_sql(CORE, "select_standing_edits")):
        standing.setdefault(str(target), []).append((str(partition_key), str(operations)))
    return standing
