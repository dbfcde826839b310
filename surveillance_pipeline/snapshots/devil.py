"""The devil snapshot: ``devil_snapshot`` holds exactly one delivery, under a job key.

Transform and schema versions are registries: each version names its SQL, and the current one is a module
constant. Bumping a constant is how a user says the code changed; the next run reloads (transform) or
rebuilds the table (schema), in the load's own transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import psycopg
from psycopg import sql

from surveillance_pipeline.core.fault_points import AFTER_DELETE, MID_COPY, fault_point
from surveillance_pipeline.core.keys import JobKeyParts
from surveillance_pipeline.core.refresh import WHOLE_TARGET, RefreshOutcome, refresh_partition
from surveillance_pipeline.core.sql_files import load_sql
from surveillance_pipeline.core.targets import Target
from surveillance_pipeline.gbif.licenses import CC0, CC_BY, LICENSES
from surveillance_pipeline.snapshots.deliveries import Delivery

PACKAGE = "surveillance_pipeline.snapshots"
DEVIL_SLUG = "sarcophilus-harrisii"

# Each version's SQL is kept (create_devil_snapshot_v<N>, insert_devil_snapshot_v<N>), so a run may load
# under an earlier one: the demonstration that a version change reloads and a return reloads again.
DEVIL_SNAPSHOT = Target(
    "devil_snapshot",
    PACKAGE,
    "create_devil_snapshot_v{version}",
    transform_version=1,
    schema_version=1,
    ddl_literals=(("licenses", LICENSES),),
)
TRANSFORM_VERSIONS = (1, 2)

DEFAULT_CAP = 1000
DEFAULT_LICENSES = (CC0, CC_BY)


@dataclass(frozen=True)
class SnapshotRules:
    """The row-shaping config of devil_snapshot."""

    cap: int = DEFAULT_CAP
    licenses: Sequence[str] = DEFAULT_LICENSES

    def as_config(self) -> dict[str, Any]:
        if self.cap < 1:
            raise ValueError(f"devil_snapshot config: cap must be at least 1, got {self.cap}")
        unknown = sorted(set(self.licenses) - set(LICENSES))
        if unknown:
            raise ValueError(f"devil_snapshot config: unknown licenses {unknown} (known: {list(LICENSES)})")
        return {"cap": self.cap, "licenses": sorted(set(self.licenses))}


def snapshot_target(transform: int | None = None, schema: int | None = None) -> Target:
    """devil_snapshot at the given versions (None: the current one, read at call time)."""
    if transform is not None and transform not in TRANSFORM_VERSIONS:
        raise ValueError(f"devil_snapshot: no transform version {transform} (known: {TRANSFORM_VERSIONS})")
    return replace(
        DEVIL_SNAPSHOT,
        transform_version=DEVIL_SNAPSHOT.transform_version if transform is None else transform,
        schema_version=DEVIL_SNAPSHOT.schema_version if schema is None else schema,
    )


def snapshot_job_parts(delivery: Delivery, rules: SnapshotRules, target: Target) -> JobKeyParts:
    return target.key_parts(delivery.sha256, rules.as_config())


def stage_delivery(conn: psycopg.Connection, delivery: Delivery) -> None:
    """COPY the delivery into the transaction's temporary ``incoming_delivery`` table."""
    conn.execute(load_sql(PACKAGE, "create_incoming_delivery"))
    with conn.cursor().copy("COPY incoming_delivery FROM STDIN (FORMAT csv, HEADER true)") as copy:
        copy.write(delivery.data)
        fault_point(MID_COPY, conn)


def build_snapshot_rows(conn: psycopg.Connection, target: str, config: dict[str, Any], transform: int) -> int:
    """Insert the transform's rows from ``incoming_delivery`` into ``target``; returns the row count."""
    statement = load_sql(PACKAGE, f"insert_devil_snapshot_v{transform}").format(target=sql.Identifier(target))
    return conn.execute(statement, {"cap": config["cap"], "licenses": config["licenses"]}).rowcount


def refresh_devil_snapshot(
    conn: psycopg.Connection,
    *,
    delivery: Delivery,
    rules: SnapshotRules,
    run_id: str,
    transform: int | None = None,
    schema: int | None = None,
) -> RefreshOutcome:
    """Make devil_snapshot hold ``delivery`` under ``rules`` and the current (or given) versions."""
    target = snapshot_target(transform, schema)
    parts = snapshot_job_parts(delivery, rules, target)

    def replace_rows(connection: psycopg.Connection) -> int:
        connection.execute(sql.SQL("DELETE FROM {}").format(sql.Identifier(target.name)))
        fault_point(AFTER_DELETE, connection)
        stage_delivery(connection, delivery)
        return build_snapshot_rows(connection, target.name, dict(parts.config), target.transform_version)

    return refresh_partition(
        conn,
        target=target,
        partition_key=WHOLE_TARGET,
        parts=parts,
        replace_rows=replace_rows,
        run_id=run_id,
    )


def table_fingerprint(conn: psycopg.Connection, table: str) -> tuple[int, str]:
    """(rows, md5 of the rows in key order) of a devil_snapshot-shaped table."""
    row = conn.execute(
        load_sql(PACKAGE, "select_devil_snapshot_md5").format(table=sql.Identifier(table))
    ).fetchone()
    assert row is not None
    return int(row[0]), row[1]


@dataclass(frozen=True)
class HoldsVerdict:
    holds: bool
    detail: str


def snapshot_holds(conn: psycopg.Connection, delivery: Delivery) -> HoldsVerdict:
    """Whether devil_snapshot's rows equal what ``delivery`` gives under the recorded transform and config.

    Rebuilds the expected rows in a temporary table inside a transaction that is rolled back, so the
    check itself changes nothing.
    """
    state = conn.execute(
        "SELECT job_key, parts FROM target_state WHERE target = %s AND partition_key = %s",
        [DEVIL_SNAPSHOT.name, WHOLE_TARGET],
    ).fetchone()
    if state is None:
        return HoldsVerdict(False, "devil_snapshot has no state row: nothing was loaded")
    recorded = state[1]
    if recorded["input"] != delivery.sha256:
        return HoldsVerdict(
            False,
            f"the newest delivery {delivery.path.name} is not the one loaded"
            f" (that one's sha256 starts {recorded['input'][:12]})",
        )
    with conn.transaction(force_rollback=True):
        conn.execute("CREATE TEMPORARY TABLE expected_devil_snapshot (LIKE devil_snapshot) ON COMMIT DROP")
        stage_delivery(conn, delivery)
        build_snapshot_rows(conn, "expected_devil_snapshot", recorded["config"], recorded["transform"])
        expected = table_fingerprint(conn, "expected_devil_snapshot")
        actual = table_fingerprint(conn, DEVIL_SNAPSHOT.name)
    if expected != actual:
        return HoldsVerdict(
            False, f"table has {actual[0]} rows (md5 {actual[1]}), expected {expected[0]} ({expected[1]})"
        )
    return HoldsVerdict(True, f"{actual[0]} rows, md5 {actual[1]}, as delivered in {delivery.path.name}")
