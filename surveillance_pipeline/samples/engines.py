"""The md5 sampling rule in three engines: PostGIS (the table), DuckDB and plain Python (the derived files).

The DuckDB and Python engines read the derived CSV files and apply the row-shaping config that
``occurrences`` recorded for each species, then the cap that ``occurrence_sample`` recorded: they recompute
the sample from the files, they do not read the table. All three must give the same count and ids md5.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import duckdb
import psycopg

from surveillance_pipeline.core.sql_files import load_sql, sql_text
from surveillance_pipeline.samples.rules import SampleSummary, pick_sample, summarize_ids

PACKAGE = "surveillance_pipeline.samples"


@dataclass(frozen=True)
class SpeciesSampleRule:
    """What one species' sample was built from: its derived file, the occurrences config, the cap."""

    species_id: int
    derived_path: Path
    licenses: tuple[str, ...]
    require_coordinates: bool
    cap: int


def recorded_rules(conn: psycopg.Connection, derived_paths: Mapping[str, Path]) -> list[SpeciesSampleRule]:
    """The rules each sampled species was built with, read from the state rows (checked, not assumed)."""
    rows = conn.execute(load_sql(PACKAGE, "select_recorded_sample_rules")).fetchall()
    return [
        SpeciesSampleRule(
            species_id=species_id,
            derived_path=derived_paths[slug],
            licenses=tuple(occurrence_config["licenses"]),
            require_coordinates=bool(occurrence_config["require_coordinates"]),
            cap=int(sample_config["cap"]),
        )
        for slug, species_id, occurrence_config, sample_config in rows
    ]


def postgis_summary(conn: psycopg.Connection) -> SampleSummary:
    records, species, ids_md5 = conn.execute(load_sql(PACKAGE, "select_sample_summary")).fetchone() or (
        0,
        0,
        "",
    )
    return SampleSummary(records, species, ids_md5)


def duckdb_summary(rules: list[SpeciesSampleRule]) -> SampleSummary:
    if not rules:
        return python_summary(rules)
    with duckdb.connect(":memory:") as con:
        con.execute(
            "CREATE TABLE rules (species_id INTEGER, path VARCHAR, licenses VARCHAR[], "
            "require_coordinates BOOLEAN, cap INTEGER)"
        )
        con.executemany(
            "INSERT INTO rules VALUES (?, ?, ?, ?, ?)",
            [
                [r.species_id, str(r.derived_path), list(r.licenses), r.require_coordinates, r.cap]
                for r in rules
            ],
        )
        row = con.execute(
            sql_text(PACKAGE, "select_duckdb_sample_summary"),
            [[str(r.derived_path) for r in rules]],
        ).fetchone()
    records, species, ids_md5 = row if row else (0, 0, "")
    return SampleSummary(int(records), int(species), ids_md5)


def python_summary(rules: list[SpeciesSampleRule]) -> SampleSummary:
    picked: dict[int, list[int]] = {}
    for rule in rules:
        with rule.derived_path.open(newline="", encoding="utf-8") as handle:
            ids = [
                int(row["id"])
                for row in csv.DictReader(handle)
                if (not row["license"] or row["license"] in rule.licenses)
                and (not rule.require_coordinates or row["longitude"])
            ]
        picked[rule.species_id] = [gbif_id for gbif_id, _ in pick_sample(ids, rule.cap)]
    return summarize_ids(picked)
