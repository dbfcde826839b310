"""Load a species' derived CSV into PostGIS under its job key (Dagster-free)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from surveillance_pipeline.core.errors import InputError, StaleInputError
from surveillance_pipeline.core.faults import AFTER_DELETE, MID_COPY, fault_point
from surveillance_pipeline.core.keys import JobKeyParts, sha256_hex
from surveillance_pipeline.core.refresh import RefreshOutcome, TargetSchema, refresh_partition
from surveillance_pipeline.core.sql_files import load_sql
from surveillance_pipeline.gbif.registry import Species
from surveillance_pipeline.occurrences.derive import DERIVED_COLUMNS, derive_occurrences
from surveillance_pipeline.occurrences.licenses import LICENSES
from surveillance_pipeline.occurrences.raw import read_raw_snapshot

PACKAGE = "surveillance_pipeline.occurrences"
JOB = "occurrences"
TABLE = "occurrences"
# Bump when the rows a given derived file produces change (the SQL that shapes them).
TRANSFORM_VERSION = 1
# Bump with a new create_occurrences DDL; the table is then rebuilt.
SCHEMA_VERSION = 1
COPY_BLOCK = 1 << 20


def occurrences_schema() -> TargetSchema:
    """The table at the current SCHEMA_VERSION (read at call time, so a bump takes effect at once)."""
    return TargetSchema.from_sql_file(PACKAGE, "create_occurrences", TABLE, SCHEMA_VERSION)


@dataclass(frozen=True)
class OccurrenceRules:
    """The row-shaping settings of ``occurrences``: the config part of its job key."""

    licenses: Sequence[str] = LICENSES
    require_coordinates: bool = False

    def as_config(self) -> dict[str, Any]:
        unknown = sorted(set(self.licenses) - set(LICENSES))
        if unknown:
            raise ValueError(f"occurrences config: unknown licenses {unknown} (known: {list(LICENSES)})")
        # Sorted and deduplicated: the same set of licenses is the same config.
        return {"licenses": sorted(set(self.licenses)), "require_coordinates": self.require_coordinates}


def verified_derived_bytes(species: Species, raw_path: Path, derived_path: Path) -> bytes:
    """The derived file's bytes, after checking they equal a fresh derive of the raw snapshot."""
    try:
        derived = derived_path.read_bytes()
    except FileNotFoundError:
        raise InputError(
            derived_path, "file", None, "derived file is missing: materialize gbif_derived first"
        ) from None
    fresh = derive_occurrences(read_raw_snapshot(raw_path), species, raw_path).data
    if derived != fresh:
        where = _first_difference(derived, fresh)
        raise StaleInputError(
            f"{derived_path}: differs from a fresh derive of {raw_path} (first at {where}); "
            f"it was edited or derived by other code: materialize gbif_derived for {species.slug} again"
        )
    return derived


def _first_difference(a: bytes, b: bytes) -> str:
    """Where two derived files first differ: the line, and the column when both lines have it."""
    for number, (left, right) in enumerate(zip(a.split(b"\n"), b.split(b"\n"), strict=False), start=1):
        if left != right:
            fields = zip(left.split(b","), right.split(b","), strict=False)
            column = next((i for i, (x, y) in enumerate(fields) if x != y), len(DERIVED_COLUMNS))
            if column < len(DERIVED_COLUMNS):
                return f"line {number}, field {DERIVED_COLUMNS[column]!r}"
            return f"line {number}"
    shorter = min(a.count(b"\n"), b.count(b"\n"))
    return f"line {shorter + 1}"


def occurrence_job_parts(derived: bytes, rules: OccurrenceRules) -> JobKeyParts:
    return JobKeyParts(
        input=sha256_hex(derived),
        transform=TRANSFORM_VERSION,
        config=rules.as_config(),
        schema=SCHEMA_VERSION,
    )


def load_occurrences(
    conn: psycopg.Connection,
    *,
    species: Species,
    derived: bytes,
    rules: OccurrenceRules,
    run_id: str,
) -> RefreshOutcome:
    """Make ``occurrences`` hold this species' derived file under ``rules``, or skip when it already does."""
    parts = occurrence_job_parts(derived, rules)
    config = parts.config

    def replace_rows(connection: psycopg.Connection) -> int:
        table = sql.Identifier(TABLE)
        connection.execute(
            load_sql(PACKAGE, "upsert_species"),
            {
                "species_id": species.species_id,
                "slug": species.slug,
                "scientific_name": species.scientific_name,
                "vernacular_name": species.vernacular_name,
                "taxon_key": species.taxon_key,
            },
        )
        connection.execute(
            sql.SQL("DELETE FROM {} WHERE species_id = %s").format(table), [species.species_id]
        )
        fault_point(AFTER_DELETE, connection)
        connection.execute(load_sql(PACKAGE, "create_incoming_occurrences"))
        with connection.cursor().copy(
            "COPY incoming_occurrences FROM STDIN (FORMAT csv, HEADER true)"
        ) as copy:
            for start in range(0, len(derived), COPY_BLOCK):
                copy.write(derived[start : start + COPY_BLOCK])
                fault_point(MID_COPY, connection)
        cursor = connection.execute(
            load_sql(PACKAGE, "insert_species_occurrences").format(occurrences=table),
            {
                "species_id": species.species_id,
                "licenses": config["licenses"],
                "require_coordinates": config["require_coordinates"],
            },
        )
        return cursor.rowcount

    return refresh_partition(
        conn,
        job=JOB,
        partition_key=species.slug,
        parts=parts,
        replace_rows=replace_rows,
        run_id=run_id,
        target=occurrences_schema(),
    )
