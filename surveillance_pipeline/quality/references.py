"""The reference layers of the quality tests: Natural Earth 1:50m, shipped in ``quality/reference/``.

Countries (admin-0), land, populated places (for the capitals), urban areas and admin-1 provinces (this 50m
file has them for Australia, Brazil, Canada and the USA only), public domain (PROVENANCE.md beside them).
They are versioned inputs: the table ``quality_references`` is loaded under a job key whose input is the
files' sha256, and every test that reads a layer has that layer's sha256 in its part of the key of
``occurrence_quality``. Dagster-free.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from surveillance_pipeline.core.errors import InputError
from surveillance_pipeline.core.keys import JobKeyParts, canonical_json, sha256_file, sha256_hex
from surveillance_pipeline.core.refresh import WHOLE_TARGET, RefreshOutcome, refresh_partition
from surveillance_pipeline.core.sql_files import load_sql
from surveillance_pipeline.core.targets import Target

PACKAGE = "surveillance_pipeline.quality"
QUALITY_REFERENCES = Target("quality_references", PACKAGE, "create_quality_references")
# The side of the grid cells the layers' pieces are classified by (insert_quality_reference_cells.sql):
# half a degree, some 55 km: 74,284 cells of land and 69,869 of countries are covered whole by one piece,
# and the layers load in 5.9 s. A quarter degree listed 317,000 of land and took 19 s a load (each test
# that materializes the flags loads them), for a refresh of 100,000 records 0.3 s quicker.
REFERENCE_CELL_DEGREES = 0.5
REFERENCE_FOLDER = Path(__file__).with_name("reference")

# Layer name -> its file in REFERENCE_FOLDER.
LAYER_FILES = {
    "countries": "ne_50m_admin_0_countries.json.gz",
    "land": "ne_50m_land.json.gz",
    "places": "ne_50m_populated_places_simple.json.gz",
    "provinces": "ne_50m_admin_1_states_provinces.json.gz",
    "urban": "ne_50m_urban_areas.json.gz",
}
# A country's capital, as Natural Earth's populated places class it ("alt": a second seat, such as Bolivia's).
CAPITAL_CLASSES = ("Admin-0 capital", "Admin-0 capital alt")
# Natural Earth 4.0.0 gives some countries ISO_A2 -99; their ISO code by ADM0_A3 (the rest have none).
ISO_A2_BY_ADM0_A3 = {"FRA": "FR", "NOR": "NO", "KOS": "XK"}
NO_CODE = "-99"


@dataclass(frozen=True)
class ReferenceLayers:
    """The folder the layers are read from (the shipped one unless a test gives another)."""

    folder: Path = REFERENCE_FOLDER

    def path(self, layer: str) -> Path:
        return self.folder / LAYER_FILES[layer]

    def sha256s(self) -> dict[str, str]:
        return {layer: _layer_sha256(self.path(layer)) for layer in sorted(LAYER_FILES)}

    def parts(self) -> JobKeyParts:
        config = {"cell_degrees": REFERENCE_CELL_DEGREES}
        return QUALITY_REFERENCES.key_parts(sha256_hex(canonical_json(self.sha256s()).encode()), config)


@cache
def _layer_sha256_cached(path: Path, size: int, mtime_ns: int) -> str:
    return sha256_file(path)


def _layer_sha256(path: Path) -> str:
    """The file's sha256, hashed once per process for one size and modification time."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        raise InputError(path, "file", None, "reference layer not found") from None
    return _layer_sha256_cached(path, stat.st_size, stat.st_mtime_ns)


def _features(path: Path) -> list[dict[str, Any]]:
    try:
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            document = json.load(handle)
    except (OSError, ValueError) as error:
        raise InputError(path, "file", None, f"not a gzip-compressed GeoJSON file: {error}") from None
    features = document.get("features") if isinstance(document, dict) else None
    if not isinstance(features, list) or not features:
        raise InputError(path, "features", None, "no features")
    return features


def _property(path: Path, index: int, feature: dict[str, Any], name: str) -> Any:
    properties = feature.get("properties")
    if not isinstance(properties, dict) or name not in properties:
        raise InputError(path, f"feature {index}", name, "missing property")
    return properties[name]


def _geometry(path: Path, index: int, feature: dict[str, Any]) -> str:
    geometry = feature.get("geometry")
    if not isinstance(geometry, dict) or "type" not in geometry:
        raise InputError(path, f"feature {index}", "geometry", "missing geometry")
    return json.dumps(geometry, separators=(",", ":"))


def country_code(iso_a2: Any, adm0_a3: Any) -> str | None:
    """ISO 3166-1 alpha-2 of a Natural Earth country, or None where it has none."""
    if isinstance(iso_a2, str) and iso_a2 != NO_CODE and len(iso_a2) == 2:
        return iso_a2
    return ISO_A2_BY_ADM0_A3.get(str(adm0_a3))


# What each table layer reads: its file's layer, the properties of its country code (ISO alpha-2, then
# ADM0_A3 where that is -99) and of its name, and the only feature classes kept (None: every feature).
FEATURE_READS: tuple[tuple[str, str, str | None, str | None, str | None, tuple[str, ...] | None], ...] = (
    ("countries", "countries", "ISO_A2", "ADM0_A3", "ADMIN", None),
    ("land", "land", None, None, None, None),
    ("urban", "urban", None, None, None, None),
    ("capitals", "places", "iso_a2", "adm0_a3", "name", CAPITAL_CLASSES),
    ("provinces", "provinces", "iso_a2", "adm0_a3", "name", None),
)


def reference_rows(layers: ReferenceLayers) -> Iterator[tuple[str, int, str | None, str | None, str]]:
    """(layer, feature number, code, name, GeoJSON geometry) of every feature the tests read."""
    for layer, source, iso_a2, adm0_a3, name, kept in FEATURE_READS:
        path = layers.path(source)
        for index, feature in enumerate(_features(path)):
            if kept is not None and _property(path, index, feature, "featurecla") not in kept:
                continue
            code = None
            if iso_a2 is not None and adm0_a3 is not None:
                code = country_code(
                    _property(path, index, feature, iso_a2), _property(path, index, feature, adm0_a3)
                )
            label = str(_property(path, index, feature, name)) if name is not None else None
            yield layer, index, code, label, _geometry(path, index, feature)


def load_quality_references(conn: psycopg.Connection, layers: ReferenceLayers, run_id: str) -> RefreshOutcome:
    """Make ``quality_references`` hold these layers, or skip when it already does (same files)."""

    def replace_rows(connection: psycopg.Connection) -> int:
        table = sql.Identifier(QUALITY_REFERENCES.name)
        connection.execute(sql.SQL("DELETE FROM {}").format(table))
        connection.execute(load_sql(PACKAGE, "create_incoming_reference_features"))
        with connection.cursor().copy(
            "COPY incoming_reference_features (layer, feature, code, name, geojson) FROM STDIN"
        ) as copy:
            for row in reference_rows(layers):
                copy.write_row(row)
        pieces = connection.execute(
            load_sql(PACKAGE, "insert_quality_references").format(table=table)
        ).rowcount
        connection.execute(
            "SET LOCAL jit = off"
        )  # nearly a million cells: compiling costs more than it saves
        cells = connection.execute(
            load_sql(PACKAGE, "insert_quality_reference_cells").format(table=table),
            {"cell": REFERENCE_CELL_DEGREES},
        ).rowcount
        # The planner's estimates of the new rows, before the first statement that probes them runs: with
        # none, it scanned the 630,000 rows for cells (the lab's 71 partitions took 31 s instead of 6).
        connection.execute(sql.SQL("ANALYZE {}").format(table))
        return pieces + cells

    return refresh_partition(
        conn,
        target=QUALITY_REFERENCES,
        partition_key=WHOLE_TARGET,
        parts=layers.parts(),
        replace_rows=replace_rows,
        run_id=run_id,
    )
