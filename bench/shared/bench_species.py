"""The one bench species whose rows the load paths, verification, masked_release and the import's limit
load: not a registry species, so the bench's rows can never be mistaken for the lab's."""

from __future__ import annotations

from pathlib import Path

import psycopg
from psycopg import sql

from surveillance_pipeline.core.sql_files import load_sql
from surveillance_pipeline.occurrences.load import PACKAGE as OCCURRENCES_PACKAGE
from surveillance_pipeline.occurrences.load import OccurrenceRules, load_occurrences
from surveillance_pipeline_tests.support.species import synthetic_species

RUN_ID = "bench"
BENCH_SPECIES = synthetic_species(900_001, "bench-species", "Benchmarkia synthetica", "bench")


def create_like_occurrences(conn: psycopg.Connection, table: str) -> None:
    """An empty table shaped and indexed like a species' partition of occurrences, under another name.

    The limit loads into it with its indexes already in place, as a plain ``\\copy`` user would.
    """
    names = {"fresh": sql.Identifier(table), "species_id": sql.Literal(BENCH_SPECIES.species_id)}
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(names["fresh"]))
    conn.execute(load_sql(OCCURRENCES_PACKAGE, "create_occurrences_partition").format(**names))
    conn.execute(load_sql(OCCURRENCES_PACKAGE, "index_occurrences_partition").format(**names))


def forget_occurrences(conn: psycopg.Connection) -> None:
    """The project's occurrences as on a first load: no table, no state row, no schema record."""
    conn.execute("DROP TABLE IF EXISTS occurrences CASCADE")
    conn.execute("DELETE FROM target_state WHERE target = 'occurrences'")
    conn.execute("DELETE FROM target_schema WHERE target = 'occurrences'")


def load_project(conn: psycopg.Connection, path: Path, expect: str | None) -> int:
    """``load_occurrences`` of one file; ``expect`` (loaded, skipped or None for either) guards the bench."""
    outcome = load_occurrences(
        conn, species=BENCH_SPECIES, derived=path, rules=OccurrenceRules(), run_id=RUN_ID
    )
    if expect is not None and outcome.action != expect:
        raise RuntimeError(f"expected {expect}, got {outcome.action} ({outcome.reason})")
    return outcome.rows
