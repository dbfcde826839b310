"""Write the lab's district layer, ``lab/data/lab_districts.geojson``: a few coarse Tasmanian districts.

Deterministic: the same bytes on every run, so the committed file can be regenerated and compared. The
districts are simple polygons over the main island and the two Bass Strait island groups; the sea between
them is in no district, so the lab exercises both "within" and "nearest". Neighbouring districts share
edges exactly, so a point on a border is in two regions and the lower region id must win.

    python -m surveillance_pipeline.lab.districts      # rewrites lab/data/lab_districts.geojson
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

LAB_LAYER = "lab_districts.geojson"


def lab_layer_path() -> Path:
    """The packaged district layer, the region layer's default."""
    return Path(str(resources.files("surveillance_pipeline.lab").joinpath("data", LAB_LAYER)))


# region_id, name, outer ring (longitude, latitude), counter-clockwise, first vertex not repeated.
DISTRICTS: tuple[tuple[str, str, tuple[tuple[float, float], ...]], ...] = (
    ("TAS-C", "Central Highlands", ((146.0, -42.5), (147.2, -42.5), (147.2, -41.6), (146.0, -41.6))),
    ("TAS-E", "East Coast", ((147.2, -42.5), (148.4, -42.5), (148.4, -41.6), (147.2, -41.6))),
    ("TAS-FI", "Furneaux Group", ((147.7, -40.5), (148.5, -40.5), (148.5, -39.6), (147.7, -39.6))),
    ("TAS-KI", "King Island", ((143.8, -40.15), (144.15, -40.15), (144.15, -39.55), (143.8, -39.55))),
    ("TAS-N", "North", ((146.2, -41.6), (147.5, -41.6), (147.5, -40.9), (146.2, -40.9))),
    ("TAS-NE", "North East", ((147.5, -41.6), (148.4, -41.6), (148.4, -40.8), (147.5, -40.8))),
    ("TAS-NW", "North West", ((144.6, -41.6), (146.2, -41.6), (146.2, -40.6), (144.6, -40.6))),
    ("TAS-S", "South", ((146.6, -43.6), (148.1, -43.6), (148.1, -42.5), (146.6, -42.5))),
    (
        "TAS-SW",
        "South West",
        ((145.5, -43.6), (146.6, -43.6), (146.6, -42.5), (146.0, -42.5), (146.0, -43.0), (145.5, -43.0)),
    ),
    ("TAS-W", "West Coast", ((144.9, -43.0), (146.0, -43.0), (146.0, -41.6), (144.9, -41.6))),
)


def lab_districts_geojson() -> bytes:
    features = [
        {
            "type": "Feature",
            "properties": {"region_id": region_id, "name": name},
            "geometry": {"type": "Polygon", "coordinates": [[*map(list, ring), list(ring[0])]]},
        }
        for region_id, name, ring in DISTRICTS
    ]
    document = {"type": "FeatureCollection", "name": "lab_districts", "features": features}
    return (json.dumps(document, sort_keys=True, indent=1) + "\n").encode("utf-8")


def main() -> None:
    path: Path = lab_layer_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(lab_districts_geojson())
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
