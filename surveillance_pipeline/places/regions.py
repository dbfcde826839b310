"""Regions and region_assignment: every occurrence with a point gets one region, by explicit orders only.

A point inside (or on the border of) regions gets the covering region with the lowest id; a point outside
every region gets the nearest by distance on the WGS84 spheroid (rounded to the millimetre), then the
lowest id. Neither input order nor index order can decide. The layer file's sha256 is part of the job key,
so another layer reloads every assignment and the same layer skips.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from surveillance_pipeline.core.errors import InputError
from surveillance_pipeline.core.fingerprints import Fingerprint
from surveillance_pipeline.core.keys import JobKeyParts, canonical_json, sha256_file
from surveillance_pipeline.core.partition_files import read_memo, replace_file
from surveillance_pipeline.core.record_delta import Delta, RecordChanges, apply_record_delta, too_large
from surveillance_pipeline.core.refresh import (
    NOTHING_CHANGED,
    SKIPPED,
    WHOLE_TARGET,
    HeldKeys,
    RefreshOutcome,
    read_held_keys,
    refresh_partition,
    upstream_job_key,
)
from surveillance_pipeline.core.settings import PROJECT_ROOT
from surveillance_pipeline.core.sql_files import load_sql
from surveillance_pipeline.core.targets import Target
from surveillance_pipeline.gbif.registry import Species
from surveillance_pipeline.occurrences.load import OCCURRENCES
from surveillance_pipeline.places.geocoded import GEOCODED_LOCALITIES

PACKAGE = "surveillance_pipeline.places"
REGIONS = Target("regions", PACKAGE, "create_regions")
# Schema 2: keyed by (species_id, id), not id; 3: the assigned point kept (create_region_assignment.sql).
REGION_ASSIGNMENT = Target(
    "region_assignment", PACKAGE, "create_region_assignment", schema_version=3, partition_column="species_id"
)
# A delta pays while few records moved: past this share of the species' records, it reassigns whole.
# On the largest species of the bench's 1M download (247,207 records, the lab's districts), the delta took
# 0.3 s with 1% of its points moved, 1.8 s with 20%, 2.7 s with 30% and 3.2 s with 50%; reassigning whole
# took 2.4-3.8 s (2026-12-06, /tmp script, not committed): it stops paying between a third and a half.
DELTA_SHARE_LIMIT = 0.3
NEXT_ASSIGNMENT = "next_region_assignment"


@dataclass(frozen=True)
class RegionLayer:
    """A polygon layer (GeoJSON or GeoPackage) and the feature properties that name each region."""

    path: Path
    id_property: str = "region_id"
    name_property: str = "name"

    @classmethod
    def configured(cls, path: str, id_property: str, name_property: str, default: str = "") -> RegionLayer:
        """The layer a user configured, else ``default`` (the deployment's: definitions binds the lab's
        districts); a relative path is from the project."""
        if not (path or default):
            raise InputError(Path("region_assignment config"), "layer", None, "no region layer configured")
        chosen = Path(path or default)
        if not chosen.is_absolute():
            chosen = PROJECT_ROOT / chosen
        return cls(chosen, id_property, name_property)

    def sha256(self) -> str:
        try:
            return sha256_file(self.path)
        except FileNotFoundError:
            raise InputError(self.path, "file", None, "region layer not found") from None

    def parts(self) -> JobKeyParts:
        # The file's bytes, not its path: the same layer moved elsewhere is the same input.
        return REGIONS.key_parts(self.sha256(), self.config())

    def config(self) -> dict[str, str]:
        return {"id_property": self.id_property, "name_property": self.name_property}


def read_layer(layer: RegionLayer) -> list[tuple[str, str | None, bytes]]:
    """(region id, name, WKB in WGS84) per feature, sorted by id; InputError for a missing or repeated id."""
    import geopandas  # imported here: reading a layer is rare, and geopandas takes a second to import

    frame = geopandas.read_file(layer.path)
    if frame.crs is not None and frame.crs.to_epsg() != 4326:
        frame = frame.to_crs(4326)
    for name in (layer.id_property, layer.name_property):
        if name not in frame.columns:
            raise InputError(layer.path, "features", name, f"no such property (has: {sorted(frame.columns)})")
    regions: dict[str, tuple[str, str | None, bytes]] = {}
    for index, (region_id, name, geometry) in enumerate(
        zip(frame[layer.id_property], frame[layer.name_property], frame.geometry, strict=True)
    ):
        where = f"feature {index}"
        if region_id is None or str(region_id).strip() == "":
            raise InputError(layer.path, where, layer.id_property, "empty region id")
        text = str(region_id)
        if text in regions:
            raise InputError(layer.path, where, layer.id_property, f"region id {text!r} repeats")
        if geometry is None or geometry.is_empty or geometry.geom_type not in ("Polygon", "MultiPolygon"):
            raise InputError(layer.path, where, "geometry", f"expected a polygon, got {geometry!r:.60}")
        regions[text] = (text, None if name is None else str(name), geometry.wkb)
    if not regions:
        raise InputError(layer.path, "features", None, "the layer has no regions")
    return [regions[key] for key in sorted(regions)]


def load_regions(conn: psycopg.Connection, layer: RegionLayer, run_id: str) -> RefreshOutcome:
    """Make ``regions`` hold this layer, or skip when it already does (same bytes, same properties)."""

    def replace_rows(connection: psycopg.Connection) -> int:
        table = sql.Identifier(REGIONS.name)
        connection.execute(sql.SQL("DELETE FROM {}").format(table))
        connection.execute(load_sql(PACKAGE, "create_incoming_regions"))
        with connection.cursor().copy("COPY incoming_regions (region_id, name, wkb) FROM STDIN") as copy:
            for row in read_layer(layer):
                copy.write_row(row)
        return connection.execute(load_sql(PACKAGE, "insert_regions").format(table=table)).rowcount

    return refresh_partition(
        conn,
        target=REGIONS,
        partition_key=WHOLE_TARGET,
        parts=layer.parts(),
        replace_rows=replace_rows,
        run_id=run_id,
    )


# PostGIS's spatial functions carry high planner costs, so this query crosses the JIT threshold although it
# runs in milliseconds per partition; compiling it cost 1.3-1.8 s per partition (seen in EXPLAIN ANALYZE).
NO_JIT = "SET LOCAL jit = off"


def _assignments(occurrences: str, geocoded: str) -> sql.Composed:
    return load_sql(PACKAGE, "select_region_assignments").format(
        regions=sql.Identifier(REGIONS.name),
        occurrences=sql.Identifier(occurrences),
        geocoded=sql.Identifier(geocoded),
    )


# assign_points' points are the records of this one species in temporary tables.
POINTS_SPECIES = 0


def assign_points(conn: psycopg.Connection, points: list[tuple[int, float, float]]) -> list[tuple[Any, ...]]:
    """(id, point_source, region_id, method, distance_m) for (id, longitude, latitude) points, by id.

    The same query the asset runs, over given points: for tests and for checking a layer by hand.
    """
    with conn.transaction():
        conn.execute(NO_JIT)
        conn.execute(load_sql(PACKAGE, "create_assignment_points"))
        with conn.cursor().copy("COPY assignment_points (id, species_id, geom) FROM STDIN") as copy:
            for point_id, longitude, latitude in points:
                copy.write_row((point_id, POINTS_SPECIES, f"SRID=4326;POINT({longitude!r} {latitude!r})"))
        conn.execute("ANALYZE assignment_points")
        rows = conn.execute(
            _assignments("assignment_points", "assignment_geocoded"), {"species_id": POINTS_SPECIES}
        ).fetchall()
        # The point each row was assigned by is the one given: left out.
        return [(id_, source, region, method, distance) for id_, source, _, region, method, distance in rows]


def insert_assignments(table: sql.Identifier) -> sql.Composed:
    """The one statement that writes a species' (``%(species_id)s``) assignments into ``table``: straight
    from occurrences, whose GiST index on geom is what the within test is driven by (no copy of the points
    first). Run with ``NO_JIT``."""
    assignments = _assignments(OCCURRENCES.name, GEOCODED_LOCALITIES.name)
    return load_sql(PACKAGE, "insert_region_assignments").format(table=table, assignments=assignments)


# The inputs of a species' assignment: (name in the job key, upstream target, whether it is per species).
ASSIGNMENT_INPUTS = (
    ("occurrences", OCCURRENCES.name, True),
    ("geocoded_localities", GEOCODED_LOCALITIES.name, True),
    ("regions", REGIONS.name, False),
)


def assignment_parts(conn: psycopg.Connection, species: Species, layer: RegionLayer) -> JobKeyParts:
    """Inputs: what occurrences, geocoded_localities and regions hold now (share-locked upstream keys)."""
    inputs = {
        name: upstream_job_key(conn, target, species.slug if per_species else WHOLE_TARGET)
        for name, target, per_species in ASSIGNMENT_INPUTS
    }
    return assignment_parts_of(inputs, layer)


def assignment_parts_of(inputs: dict[str, str], layer: RegionLayer) -> JobKeyParts:
    """The inputs' canonical JSON itself is the key's input, not its hash: a delta can tell whether the
    layer is the one the held rows were assigned under."""
    return REGION_ASSIGNMENT.key_parts(canonical_json(inputs), layer.config())


def held_assignment_inputs(conn: psycopg.Connection) -> HeldKeys:
    """What the assignment's inputs hold, read once for a step's species (refresh_region_assignment's
    ``held``)."""
    return read_held_keys(conn, *(target for _, target, _ in ASSIGNMENT_INPUTS))


def likely_assignment_parts(held: HeldKeys, species: Species, layer: RegionLayer) -> JobKeyParts | None:
    """assignment_parts as ``held`` says they will be; None when an input holds nothing, or an edit."""
    inputs = {
        name: held.get(target, species.slug if per_species else WHOLE_TARGET)
        for name, target, per_species in ASSIGNMENT_INPUTS
    }
    if any(key is None for key in inputs.values()):
        return None
    return assignment_parts_of({name: str(key) for name, key in inputs.items()}, layer)


def refresh_region_assignment(
    conn: psycopg.Connection,
    *,
    species: Species,
    layer: RegionLayer,
    run_id: str,
    held: HeldKeys | None = None,
) -> RefreshOutcome:
    """Make ``region_assignment`` hold this species' regions under the loaded layer, or skip.

    When only the records changed (the layer and config the same), only the records whose point moved,
    appeared or went are reassigned (``reassign_moved_points``).

    ``held``: what the inputs held when the step began, from which a skip is decided in one statement
    (refresh_partition's ``likely_parts``).
    """

    def replace_rows(connection: psycopg.Connection) -> int:
        table = sql.Identifier(REGION_ASSIGNMENT.name)
        connection.execute(
            sql.SQL("DELETE FROM {} WHERE species_id = %s").format(table), [species.species_id]
        )
        connection.execute(NO_JIT)
        return connection.execute(insert_assignments(table), {"species_id": species.species_id}).rowcount

    def apply_changes(
        connection: psycopg.Connection,
        held_rows: Fingerprint,
        loaded_under: Mapping[str, Any],
        loading: JobKeyParts,
    ) -> Delta | None:
        return reassign_moved_points(connection, species, held_rows, loaded_under, loading)

    return refresh_partition(
        conn,
        target=REGION_ASSIGNMENT,
        partition_key=species.slug,
        parts=lambda connection: assignment_parts(connection, species, layer),
        replace_rows=replace_rows,
        run_id=run_id,
        partition_value=species.species_id,
        likely_parts=likely_assignment_parts(held, species, layer) if held is not None else None,
        apply_changes=apply_changes,
    )


def reassign_moved_points(
    conn: psycopg.Connection,
    species: Species,
    held_rows: Fingerprint,
    loaded_under: Mapping[str, Any],
    loading: JobKeyParts,
) -> Delta | None:
    """A species' assignment brought to its new input by the records whose point differs from the one
    kept with their row (a region depends on the point and the layer alone): those are assigned by the
    full reload's statement over temporary tables of their points, and apply_record_delta swaps their rows.
    None (a full reload) when the layer is not the one the held rows were assigned under."""
    try:
        before, now = json.loads(loaded_under["input"]), json.loads(loading.input)
    except (KeyError, TypeError, ValueError):
        return None  # assigned under an older key recipe (a hash of the inputs): nothing tells the layer
    if not isinstance(before, dict) or before.get("regions") != now["regions"]:
        return None
    names = {
        "occurrences": sql.Identifier(OCCURRENCES.name),
        "geocoded": sql.Identifier(GEOCODED_LOCALITIES.name),
        "held": sql.Identifier(REGION_ASSIGNMENT.name),
    }
    parameters = {"species_id": species.species_id}
    conn.execute(NO_JIT)
    conn.execute(load_sql(PACKAGE, "create_assignment_changes").format(**names), parameters)
    counted = conn.execute(load_sql(PACKAGE, "select_assignment_change_counts")).fetchone()
    assert counted is not None
    added, changed, removed = (int(count) for count in counted)
    rows = held_rows.rows + added - removed
    if too_large(added + changed + removed, rows, held_rows.rows, DELTA_SHARE_LIMIT):
        # Decided before any point is assigned (the counts apply_record_delta would find): a delta found
        # too large after assigning them cost a reload and a half (17.8 s against a first load's 7.3 s
        # with 70% of a 1M download's records changed, 2026-12-08 at 52bbcac).
        return Delta(RecordChanges(added, changed, removed, rows, applied=False), None)
    conn.execute(load_sql(PACKAGE, "create_assignment_points"))
    conn.execute(load_sql(PACKAGE, "insert_assignment_changed_points").format(**names), parameters)
    conn.execute("ANALYZE assignment_points")
    next_table = sql.Identifier(NEXT_ASSIGNMENT)
    conn.execute(load_sql(PACKAGE, "create_next_region_assignment").format(table=names["held"]))
    statement = load_sql(PACKAGE, "insert_region_assignments").format(
        table=next_table, assignments=_assignments("assignment_points", "assignment_geocoded")
    )
    conn.execute(statement, parameters)
    delta = apply_record_delta(
        conn,
        target=REGION_ASSIGNMENT,
        partition_ref=str(species.species_id),
        next_table=NEXT_ASSIGNMENT,
        held=held_rows,
        share_limit=DELTA_SHARE_LIMIT,
        only_ids="assignment_changes",
    )
    conn.execute("DROP TABLE IF EXISTS assignment_changes, assignment_points, assignment_geocoded")
    return delta


@dataclass(frozen=True)
class RegionCount:
    region_id: str
    name: str
    within: int
    nearest: int


def region_counts(conn: psycopg.Connection, species: Species) -> list[RegionCount]:
    """Per region (by id), how many of the species' records fell within it or were given it as nearest."""
    query = load_sql(PACKAGE, "select_region_counts").format(
        table=sql.Identifier(REGION_ASSIGNMENT.name), regions=sql.Identifier(REGIONS.name)
    )
    rows = conn.execute(query, {"species_id": species.species_id}).fetchall()
    return [RegionCount(str(r[0]), str(r[1]), int(r[2]), int(r[3])) for r in rows]


# Bump when the counts kept for a job key could differ from what region_counts reads for it.
COUNTS_MEMO_VERSION = 1


def outcome_region_counts(
    conn: psycopg.Connection, species: Species, outcome: RefreshOutcome, memo_path: Path
) -> list[RegionCount]:
    """``region_counts`` of the partition ``outcome`` left, for the UI: kept in a memo under the job key.

    Counting is a scan of the species' rows (2 s for a 5M-record download's 71 species, on every run). A
    partition that skipped with nothing changed holds exactly the rows its load wrote for that key (its
    watch or fingerprint says so), so the counts kept for the key are its counts. Anything else (a load, a
    repair, a memo for another key or version, or none) counts the rows and keeps the result.
    """
    if outcome.action == SKIPPED and outcome.reason == NOTHING_CHANGED:
        kept = read_memo(memo_path, version=COUNTS_MEMO_VERSION, job_key=outcome.job_key)
        try:
            if kept is not None:
                return [RegionCount(*row) for row in kept["counts"]]
        except (TypeError, KeyError):
            pass  # a damaged memo costs a count, never a wrong one
    counts = region_counts(conn, species)
    memo = {
        "version": COUNTS_MEMO_VERSION,
        "job_key": outcome.job_key,
        "counts": [[c.region_id, c.name, c.within, c.nearest] for c in counts],
    }
    replace_file(memo_path, canonical_json(memo).encode("utf-8"))
    return counts
