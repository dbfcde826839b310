"""Build the sample and devil-snapshot exports from PostGIS (Dagster-free)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from surveillance_pipeline.core.keys import JobKeyParts
from surveillance_pipeline.core.partition_files import recover_partition_folder
from surveillance_pipeline.core.refresh import WHOLE_TARGET, refuse_edited_targets, upstream_job_key
from surveillance_pipeline.core.sql_files import load_sql
from surveillance_pipeline.occurrences.load import OCCURRENCES
from surveillance_pipeline.quality.flags import OCCURRENCE_QUALITY, first_flag_counts_of
from surveillance_pipeline.quality.policy import (
    checked_policy,
    drops_flagged,
    input_under_policy,
    kept_by_policy,
    policy_record,
)
from surveillance_pipeline.quality.rules import POLICY_ANY_ENABLED
from surveillance_pipeline.releases.exports import (
    EXPORT_FORMAT,
    ExportFile,
    csv_export,
    export_is_current,
    geoparquet_export,
    parquet_export,
    publish_export,
)
from surveillance_pipeline.samples.load import OCCURRENCE_SAMPLE, sample_state
from surveillance_pipeline.snapshots.devil import DEVIL_SLUG, DEVIL_SNAPSHOT

PACKAGE = "surveillance_pipeline.releases"
EXPORT_VERSION = 1
ORDER = "ORDER BY id"
SAMPLE_COLUMNS = ("id", "species", "pick", "year", "longitude", "latitude", "license")
DEVIL_COLUMNS = ("id", "year", "license", "pick")
DEVIL_TYPES = ("int64", "int32", "string", "int32")
# The exports release what the masked release does: every record no enabled quality test flagged.
DEFAULT_EXPORT_POLICY = POLICY_ANY_ENABLED


@dataclass(frozen=True)
class BuiltExport:
    parts: JobKeyParts
    files: list[ExportFile]
    # The manifest's other blocks (the policy applied and what it excluded).
    extra: dict[str, Any] = field(default_factory=dict)


def export_parts(input_checksum: str, policy: str = DEFAULT_EXPORT_POLICY) -> JobKeyParts:
    """An export's job key parts: what it was made from, its policy, the export's version and format."""
    return JobKeyParts(
        input=input_checksum, transform=EXPORT_VERSION, config={"policy": policy}, schema=EXPORT_FORMAT
    )


@dataclass(frozen=True)
class ExportInput:
    """An export's key parts and the tests' versions and parameters its policy applies."""

    parts: JobKeyParts
    tests: dict[str, Any]


def sample_export_input(
    conn: psycopg.Connection, policy: str = DEFAULT_EXPORT_POLICY, *, refuse_edits: bool = True
) -> ExportInput:
    """What the sample export reads: every sample partition's key and, under a policy that drops, the
    flags' content version of each sampled species."""
    checked_policy(policy, "sample_export")
    digest, slugs = sample_state(conn)
    key, tests = input_under_policy(
        conn, policy, (OCCURRENCE_SAMPLE.name, digest), slugs, refuse_edits=refuse_edits
    )
    return ExportInput(export_parts(key, policy), tests)


def devil_snapshot_export_input(
    conn: psycopg.Connection, policy: str = DEFAULT_EXPORT_POLICY, *, refuse_edits: bool = True
) -> ExportInput:
    """What the devil export reads: devil_snapshot's key (share-locked) and, under a policy that drops,
    the flags' content version of the devil's records in occurrences."""
    checked_policy(policy, "devil_snapshot_export")
    key, tests = input_under_policy(
        conn,
        policy,
        (DEVIL_SNAPSHOT.name, upstream_job_key(conn, DEVIL_SNAPSHOT.name, WHOLE_TARGET)),
        [DEVIL_SLUG],
        refuse_edits=refuse_edits,
    )
    return ExportInput(export_parts(key, policy), tests)


def build_sample_export(conn: psycopg.Connection, policy: str = DEFAULT_EXPORT_POLICY) -> BuiltExport:
    """The md5 sample's records the policy keeps, as CSV and GeoParquet, read in one snapshot with the
    state they came from."""
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        found = sample_export_input(conn, policy)
        # Rows edited outside the pipeline are not what the sample's keys name: never release them.
        refuse_edited_targets(conn, OCCURRENCE_SAMPLE.name, OCCURRENCES.name, OCCURRENCE_QUALITY.name)
        kept = kept_by_policy(policy, sql.Identifier("sample", "id"), sql.Identifier("sample", "species_id"))
        rows = conn.execute(load_sql(PACKAGE, "select_sample_export_rows").format(kept=kept)).fetchall()
        excluded = {}
        if drops_flagged(policy):
            counting = load_sql(PACKAGE, "select_sample_export_first_flags").format(
                quality=sql.Identifier(OCCURRENCE_QUALITY.name)
            )
            excluded = first_flag_counts_of(conn, counting, {})
    return BuiltExport(
        found.parts,
        [
            csv_export("sample.csv", SAMPLE_COLUMNS, rows),
            geoparquet_export("sample.parquet", SAMPLE_COLUMNS, rows),
        ],
        {"policy": policy_record(policy, found.tests, excluded)},
    )


def build_devil_snapshot_export(conn: psycopg.Connection, policy: str = DEFAULT_EXPORT_POLICY) -> BuiltExport:
    """devil_snapshot's rows the policy keeps (the devil's flags in occurrence_quality), as CSV and
    Parquet."""
    with conn.transaction():
        # Share-locks the state rows: the rows cannot move under us.
        found = devil_snapshot_export_input(conn, policy)
        params: dict[str, Any] = {}
        if drops_flagged(policy):
            found_id = conn.execute(load_sql(PACKAGE, "select_species_id"), {"slug": DEVIL_SLUG}).fetchone()
            params["species_id"] = int(found_id[0]) if found_id is not None else None
        kept = kept_by_policy(policy, sql.Identifier("devil_snapshot", "id"), sql.Placeholder("species_id"))
        query = load_sql(PACKAGE, "select_devil_snapshot_export_rows").format(kept=kept)
        rows = conn.execute(query, params).fetchall()
        excluded = {}
        if drops_flagged(policy):
            counting = load_sql(PACKAGE, "select_devil_snapshot_export_first_flags").format(
                quality=sql.Identifier(OCCURRENCE_QUALITY.name)
            )
            excluded = first_flag_counts_of(conn, counting, params)
    return BuiltExport(
        found.parts,
        [
            csv_export("devil_snapshot.csv", DEVIL_COLUMNS, rows),
            parquet_export("devil_snapshot.parquet", DEVIL_COLUMNS, DEVIL_TYPES, rows),
        ],
        {"policy": policy_record(policy, found.tests, excluded)},
    )


def export_if_changed(
    conn: psycopg.Connection,
    folder: Path,
    parts_of: Callable[[psycopg.Connection], JobKeyParts],
    build: Callable[[psycopg.Connection], BuiltExport],
) -> tuple[JobKeyParts, BuiltExport | None]:
    """Publish a fresh build unless the folder already holds this job key (files as in its manifest).

    The key is cheap (state rows only); the rows are read and the files built only when it changed.
    """
    # First, whatever a killed run left (a stale staging folder) goes, even when this run then skips.
    recover_partition_folder(folder)
    parts = parts_of(conn)
    if export_is_current(folder, parts.key):
        return parts, None
    built = build(conn)
    publish_export(folder, built.files, built.parts, ORDER, built.extra)
    return built.parts, built
