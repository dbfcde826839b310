"""The small map each occurrences partition shows in the UI: the species' points counted on a grid.

Drawn from the table and kept beside the data under the job key its rows were loaded with
(core.figures.kept_figure). The map is a view for people, never an input of any row.
"""

from __future__ import annotations

from pathlib import Path

import psycopg

from surveillance_pipeline.core.figures import kept_figure, markdown_image, points_map_png
from surveillance_pipeline.core.sql_files import load_sql
from surveillance_pipeline.gbif.registry import Species

PACKAGE = "surveillance_pipeline.occurrences"
GRID_DEGREES = 0.05


def occurrences_map(conn: psycopg.Connection, species: Species, job_key: str, folder: Path) -> str:
    """Markdown embedding the map of ``species``' points as the table holds them under ``job_key``."""

    def draw() -> bytes:
        query = load_sql(PACKAGE, "select_occurrence_grid")
        cells = conn.execute(query, {"grid": GRID_DEGREES, "species_id": species.species_id}).fetchall()
        title = f"{species.scientific_name}: {sum(c[2] for c in cells):,} records with a point"
        return points_map_png(
            [(float(lon), float(lat), int(n)) for lon, lat, n in cells], title, GRID_DEGREES
        )

    png = kept_figure(folder, species.slug, job_key, draw)
    assert png is not None
    return markdown_image(png, f"{species.slug} occurrences")
