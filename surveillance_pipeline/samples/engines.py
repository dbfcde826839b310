"""The md5 sampling rule in three engines: PostGIS (the table), DuckDB and plain Python (the derived files).

The DuckDB and Python engines read the derived CSV files and apply the row-shaping config that
``occurrences`` recorded for each species, then the cap that ``occurrence_sample`` recorded: they recompute
the sample from the files, they do not read the table. All three must give the same count and ids md5.

Running the file engines costs a pass over every derived file (at 5M records, 3 s for DuckDB and 10 s for
Python, in memory that does not grow with the files; the Python engine is split over two forked processes
beside the others, ``engine_summaries``), so the check keeps the summaries it found with the
key of their inputs (``engines_inputs_key``) and, over the same inputs, reports them again instead of
recomputing what deterministic engines repeat.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg

from surveillance_pipeline.core.forked import forked
from surveillance_pipeline.core.keys import canonical_json, sha256_file_once, sha256_hex
from surveillance_pipeline.core.lazy_modules import LazyModule
from surveillance_pipeline.core.partition_files import replace_file
from surveillance_pipeline.core.sql_files import load_sql, sql_text
from surveillance_pipeline.quality.policy import drops_flagged, flagged_ids
from surveillance_pipeline.quality.rules import POLICY_KEEP_ALL
from surveillance_pipeline.samples.rules import SampleSummary, pick_sample, summarize_ids

if TYPE_CHECKING:
    import duckdb
else:
    duckdb = LazyModule("duckdb")

PACKAGE = "surveillance_pipeline.samples"


@dataclass(frozen=True)
class SpeciesSampleRule:
    """What one species' sample was built from: its derived file, the occurrences config, the cap, and
    under a policy that drops flagged records, the ids occurrence_quality flagged (the flags are PostGIS's
    work; the engines check the sampling rule over them)."""

    species_id: int
    derived_path: Path
    licenses: tuple[str, ...]
    require_coordinates: bool
    cap: int
    policy: str = POLICY_KEEP_ALL
    excluded: frozenset[int] = frozenset()


def recorded_rules(conn: psycopg.Connection, derived_paths: Mapping[str, Path]) -> list[SpeciesSampleRule]:
    """The rules each sampled species was built with, read from the state rows (checked, not assumed)."""
    rows = conn.execute(load_sql(PACKAGE, "select_recorded_sample_rules")).fetchall()
    rules = []
    for slug, species_id, occurrence_config, sample_config in rows:
        policy = str(sample_config.get("policy", POLICY_KEEP_ALL))
        rules.append(
            SpeciesSampleRule(
                species_id=species_id,
                derived_path=derived_paths[slug],
                licenses=tuple(occurrence_config["licenses"]),
                require_coordinates=bool(occurrence_config["require_coordinates"]),
                cap=int(sample_config["cap"]),
                policy=policy,
                excluded=flagged_ids(conn, species_id) if drops_flagged(policy) else frozenset(),
            )
        )
    return rules


def postgis_summary(conn: psycopg.Connection) -> SampleSummary:
    records, species, ids_md5 = conn.execute(load_sql(PACKAGE, "select_sample_summary")).fetchone() or (
        0,
        0,
        "",
    )
    return SampleSummary(records, species, ids_md5)


def duckdb_summary(rules: list[SpeciesSampleRule]) -> SampleSummary:
    """The DuckDB engine: each species' top ``cap`` by the md5 rule, one derived file at a time, then the
    summary in DuckDB too."""
    with duckdb.connect(":memory:") as con:
        con.execute("CREATE TABLE picked (species_id INTEGER, id BIGINT)")
        # The ids a policy leaves out, as a table: NOT IN over it is a hash anti-join, not a list per row.
        con.execute("CREATE TABLE excluded (species_id INTEGER, id BIGINT)")
        pick = sql_text(PACKAGE, "insert_duckdb_species_sample")
        for rule in rules:
            if rule.excluded:
                con.execute(
                    "INSERT INTO excluded SELECT $species_id, unnest(CAST($ids AS BIGINT[]))",
                    {"species_id": rule.species_id, "ids": sorted(rule.excluded)},
                )
            con.execute(
                pick,
                {
                    "species_id": rule.species_id,
                    "path": str(rule.derived_path),
                    "licenses": list(rule.licenses),
                    "require_coordinates": rule.require_coordinates,
                    "cap": rule.cap,
                },
            )
        row = con.execute(sql_text(PACKAGE, "select_duckdb_sample_summary")).fetchone()
    records, species, ids_md5 = row if row else (0, 0, "")
    return SampleSummary(int(records), int(species), ids_md5)


def python_picks(rules: list[SpeciesSampleRule]) -> dict[int, list[int]]:
    """The plain Python engine's picked ids by species id: the derived files read with the csv module, the
    pick by rules.pick_sample."""
    picked: dict[int, list[int]] = {}
    for rule in rules:
        with rule.derived_path.open(newline="", encoding="utf-8") as handle:
            # Lists by column position, not a dict per row: 5M records took 16.5 s with DictReader, 9.8 s so.
            reader = csv.reader(handle)
            header = next(reader, [])
            try:
                at_id, at_license, at_longitude = (
                    header.index(name) for name in ("id", "license", "longitude")
                )
            except ValueError:
                raise ValueError(f"{rule.derived_path}: line 1: no id, license or longitude column") from None
            licenses, coordinates_required = frozenset(rule.licenses), rule.require_coordinates
            # A generator: the ids stream into the pick, which keeps only the cap (not the species).
            ids = (
                int(row[at_id])
                for row in reader
                if row  # a blank line is no record (DictReader skipped them too)
                and (not row[at_license] or row[at_license] in licenses)
                and (not coordinates_required or row[at_longitude])
            )
            if rule.excluded:
                excluded = rule.excluded
                ids = (gbif_id for gbif_id in ids if gbif_id not in excluded)
            picked[rule.species_id] = [gbif_id for gbif_id, _ in pick_sample(ids, rule.cap)]
    return picked


def engine_summaries(conn: psycopg.Connection, rules: list[SpeciesSampleRule]) -> dict[str, SampleSummary]:
    """The three engines' summaries, by engine.

    The plain Python engine is a core's work in pure Python, which threads cannot spread (DuckDB beside it
    in a thread: 1.57 s against 1.63 s one after the other). So it runs in two forked processes, each over
    about half the derived bytes, while PostGIS and DuckDB run here. On 71 derived files of 600,000
    records in all (Python 1.2 s, DuckDB 0.4-0.5 s): 0.86-0.93 s for the three, against 1.58-1.65 s for
    Python and DuckDB one after the other; on 5M records in 71 generated files, one species holding a
    quarter of them: 5.5 s against 10.6 s (Python 8.7 s, DuckDB 1.8-2.0 s).
    """
    halves: tuple[list[SpeciesSampleRule], list[SpeciesSampleRule]] = ([], [])
    loads = [0, 0]
    sizes = {rule.species_id: _size(rule.derived_path) for rule in rules}
    # The largest files first, each to the lighter half: the halves end together whatever the skew.
    for rule in sorted(rules, key=lambda rule: (-sizes[rule.species_id], rule.species_id)):
        lighter = loads.index(min(loads))
        halves[lighter].append(rule)
        loads[lighter] += sizes[rule.species_id]
    with forked(python_picks, halves[0]) as first, forked(python_picks, halves[1]) as second:
        postgis = postgis_summary(conn)
        duckdb_found = duckdb_summary(rules)
        # A derived file without its columns fails the check here, its error's class and text kept.
        picked = {**first.result(), **second.result()}
    return {"postgis": postgis, "duckdb": duckdb_found, "python": summarize_ids(picked)}


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0  # the engine names a missing file when it opens it


# The check's name, and its memo's folder under data/memos/.
ENGINES_CHECK = "sample_engines_agree"
# Bump when an engine could summarize the same inputs differently: a kept agreement is then not reused.
ENGINES_VERSION = 1


def engines_inputs_key(
    conn: psycopg.Connection, sample_target: str, rules: list[SpeciesSampleRule]
) -> str | None:
    """sha256 of everything the three summaries depend on: the sample's partitions by job key (the caller
    names its target: samples.load imports this module), the derived files' bytes and the rules read from
    them; None when an edit of the sample was noted (then only running the engines can tell)."""
    found = conn.execute(
        load_sql(PACKAGE, "select_sample_engine_inputs"), {"target": sample_target}
    ).fetchone()
    partitions, edits = found if found is not None else ([], 1)
    if edits:
        return None
    document = {
        "engines": ENGINES_VERSION,
        "sample": partitions,
        "rules": [
            # The excluded ids are named by the sample's keys (the flags' content version under a policy).
            [
                r.species_id,
                sha256_file_once(r.derived_path),
                list(r.licenses),
                r.require_coordinates,
                r.cap,
                r.policy,
            ]
            for r in sorted(rules, key=lambda rule: rule.species_id)
        ],
    }
    return sha256_hex(canonical_json(document).encode("utf-8"))


def kept_agreement(memo_path: Path, inputs_key: str | None) -> dict[str, Any] | None:
    """The engines' summaries recorded for these inputs by an earlier check, if it recorded any."""
    if inputs_key is None:
        return None
    try:
        kept = json.loads(memo_path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return kept if isinstance(kept, dict) and kept.get("inputs_key") == inputs_key else None


def keep_agreement(memo_path: Path, inputs_key: str | None, passed: bool, lines: dict[str, str]) -> None:
    """Record the engines' summaries for these inputs: the next check over the same inputs reuses them
    (each engine is deterministic, so running them again can only repeat them)."""
    if inputs_key is None:
        return
    # No run id or time: the same inputs give the same memo, byte for byte, like every other file.
    document = {"inputs_key": inputs_key, "passed": passed, "summaries": lines}
    replace_file(memo_path, (json.dumps(document, sort_keys=True, indent=1) + "\n").encode("utf-8"))
