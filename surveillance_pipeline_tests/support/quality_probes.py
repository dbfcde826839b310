"""GBIF-shaped records planted to trip each quality test just inside its limit, and not just outside it.

The devil's lab records are replaced by a clean base (60 records on land in central Tasmania, each at a
point of its own) and probes, each one record with one thing changed. Where a probe sits at a distance
from a reference point, the point is placed with pyproj's geodesic on the WGS84 ellipsoid, from the
reference point as this module reads it from the shipped Natural Earth files with shapely: a reading of
the defaults independent of the SQL under test.
"""

from __future__ import annotations

import copy
import gzip
import json
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from pyproj import Geod
from shapely.geometry import shape

from surveillance_pipeline.quality.references import LAYER_FILES, REFERENCE_FOLDER

GEOD = Geod(ellps="WGS84")
BASE_RECORDS = 60
FIRST_KEY = 4_100_000_000
DATASET = "11111111-2222-4333-8444-555555555555"
OTHER_DATASET = "66666666-7777-4888-8999-000000000000"
GBIF_HQ = (12.58, 55.67)
# On Tasmania's east coast near St Helens, facing the open sea.
EAST_COAST = (148.33, -41.3)


@dataclass(frozen=True)
class Probe:
    name: str
    changes: dict[str, Any]
    # Flag column -> what it must be for this record (the other flags are checked where said).
    expected: dict[str, bool | None] = field(default_factory=dict)


@cache
def _features(layer: str) -> list[dict[str, Any]]:
    with gzip.open(REFERENCE_FOLDER / LAYER_FILES[layer], "rt", encoding="utf-8") as handle:
        features: list[dict[str, Any]] = json.load(handle)["features"]
        return features


def canberra() -> tuple[float, float]:
    for feature in _features("places"):
        if feature["properties"]["name"] == "Canberra":
            longitude, latitude = feature["geometry"]["coordinates"]
            return float(longitude), float(latitude)
    raise AssertionError("Canberra is not in the populated places")


def centroid(layer: str, name_property: str, name: str) -> tuple[float, float]:
    for feature in _features(layer):
        if feature["properties"][name_property] == name:
            point = shape(feature["geometry"]).centroid
            return float(point.x), float(point.y)
    raise AssertionError(f"{name} is not in {layer}")


def east_of(point: tuple[float, float], metres: float) -> tuple[float, float]:
    longitude, latitude, _ = GEOD.fwd(point[0], point[1], 90.0, metres)
    return float(longitude), float(latitude)


@cache
def _coast_near(layer: str, point: tuple[float, float], code: str | None) -> tuple[list[float], list[float]]:
    """The vertices, 0.0005 degrees (about 50 m) apart at most, of every polygon of ``layer`` (of the
    country ``code``, where given) within half a degree of ``point``. (The cut along the half-degree box
    adds vertices of its own, some 40 km off: never the nearest to a point a few km out.)"""
    from shapely import get_coordinates, segmentize
    from shapely.geometry import box

    area = box(point[0] - 0.5, point[1] - 0.5, point[0] + 0.5, point[1] + 0.5)
    longitudes: list[float] = []
    latitudes: list[float] = []
    for feature in _features(layer):
        if code is not None and feature["properties"]["ISO_A2"] != code:
            continue
        near = shape(feature["geometry"]).intersection(area)
        if not near.is_empty:
            for x, y in get_coordinates(segmentize(near.boundary, 0.0005)):
                longitudes.append(float(x))
                latitudes.append(float(y))
    return longitudes, latitudes


def offshore(
    start: tuple[float, float], metres: float, layer: str, code: str | None = None
) -> tuple[float, float]:
    """The point due east of ``start`` (on the coast) whose geodesic distance to the nearest vertex of
    ``layer`` near it is ``metres`` (to a metre): pyproj's WGS84 geodesic, not the SQL under test."""
    longitudes, latitudes = _coast_near(layer, start, code)

    def distance_to_land(along: float) -> tuple[float, tuple[float, float]]:
        point = east_of(start, along)
        _, _, distances = GEOD.inv(
            [point[0]] * len(longitudes), [point[1]] * len(latitudes), longitudes, latitudes
        )
        return float(min(distances)), point

    low, high = 0.0, 4 * metres
    for _ in range(40):
        middle = (low + high) / 2
        low, high = (middle, high) if distance_to_land(middle)[0] < metres else (low, middle)
    distance, point = distance_to_land(high)
    assert abs(distance - metres) < 1.0, (start, metres, distance)
    return point


def _at(point: tuple[float, float]) -> dict[str, Any]:
    return {"decimalLongitude": point[0], "decimalLatitude": point[1]}


def base_point(index: int) -> tuple[float, float]:
    """Central Tasmania, inland: a 6 x 10 grid over 146.0-146.9 E, 42.4-41.8 S."""
    return round(146.0 + 0.1 * (index % 10), 5), round(-42.4 + 0.1 * (index // 10), 5)


def probe_point(offset: int) -> tuple[float, float]:
    """Where a probe that is not about its place lies: between the base's points, each at one of its own."""
    return round(146.05 + 0.1 * (offset % 10), 5), round(-42.35 + 0.1 * (offset // 10), 5)


def probes() -> list[Probe]:
    inside, outside = base_point(0), base_point(1)
    return [
        Probe("serious issue", {"issues": ["TAXON_MATCH_FUZZY"]}, {"flag_gbif_issues": True}),
        Probe("harmless issue", {"issues": ["COORDINATE_ROUNDED"]}, {"flag_gbif_issues": False}),
        Probe("fossil", {"basisOfRecord": "FOSSIL_SPECIMEN"}, {"flag_basis": True}),
        Probe("living", {"basisOfRecord": "LIVING_SPECIMEN"}, {"flag_basis": True}),
        Probe("preserved", {"basisOfRecord": "PRESERVED_SPECIMEN"}, {"flag_basis": False}),
        Probe(
            "uncertainty at the limit",
            {"coordinateUncertaintyInMeters": 10000.0},
            {"flag_uncertainty": False},
        ),
        Probe("uncertainty over", {"coordinateUncertaintyInMeters": 10000.5}, {"flag_uncertainty": True}),
        Probe("placeholder 3036", {"coordinateUncertaintyInMeters": 3036.0}, {"flag_uncertainty": True}),
        Probe("not a placeholder", {"coordinateUncertaintyInMeters": 3037.0}, {"flag_uncertainty": False}),
        Probe("no uncertainty", {"coordinateUncertaintyInMeters": None}, {"flag_uncertainty": None}),
        Probe("precision at the limit", {"coordinatePrecision": 0.01}, {"flag_precision": False}),
        Probe("precision coarser", {"coordinatePrecision": 0.011}, {"flag_precision": True}),
        Probe("1899", {"year": 1899, "eventDate": "1899-05-01"}, {"flag_old": True}),
        Probe("1900", {"year": 1900, "eventDate": "1900-05-01"}, {"flag_old": False}),
        Probe("near zero", _at((0.3, 0.3)), {"flag_zero": True}),
        Probe("beyond zero's radius", _at((0.36, 0.36)), {"flag_zero": False}),
        Probe("equal", _at((42.0, -42.0)), {"flag_equal": True}),
        Probe("almost equal", _at((42.0, -42.001)), {"flag_equal": False}),
        Probe("Canberra, 9.9 km", _at(east_of(canberra(), 9_900)), {"flag_capitals": True}),
        Probe("Canberra, 10.1 km", _at(east_of(canberra(), 10_100)), {"flag_capitals": False}),
        Probe(
            "Tasmania's centroid, 0.9 km",
            _at(east_of(centroid("provinces", "name", "Tasmania"), 900)),
            {"flag_centroids": True},
        ),
        Probe(
            "Tasmania's centroid, 1.1 km",
            _at(east_of(centroid("provinces", "name", "Tasmania"), 1_100)),
            {"flag_centroids": False},
        ),
        Probe(
            "Australia's centroid, 0.9 km",
            _at(east_of(centroid("countries", "ADMIN", "Australia"), 900)),
            {"flag_centroids": True, "flag_country": False},
        ),
        Probe("GBIF, 0.9 km", _at(east_of(GBIF_HQ, 900)), {"flag_gbif_hq": True, "flag_outliers": True}),
        Probe("GBIF, 1.1 km", _at(east_of(GBIF_HQ, 1_100)), {"flag_gbif_hq": False}),
        Probe("Bass Strait", _at((146.0, -40.3)), {"flag_sea": True, "flag_country": True}),
        # Off Tasmania's east coast, into the open Tasman Sea, just inside and outside each buffer.
        Probe("sea, 4.9 km off land", _at(offshore(EAST_COAST, 4_900, "land")), {"flag_sea": False}),
        Probe("sea, 5.1 km off land", _at(offshore(EAST_COAST, 5_100, "land")), {"flag_sea": True}),
        Probe(
            "sea, 9.9 km off Australia",
            _at(offshore(EAST_COAST, 9_900, "countries", "AU")),
            {"flag_sea": True, "flag_country": False},
        ),
        Probe(
            "sea, 10.1 km off Australia",
            _at(offshore(EAST_COAST, 10_100, "countries", "AU")),
            {"flag_sea": True, "flag_country": True},
        ),
        Probe("New Zealand under AU", _at((172.0, -43.5)), {"flag_country": True, "flag_sea": False}),
        Probe("in Hobart", _at((147.3272, -42.8821)), {"flag_urban": None, "flag_country": False}),
        Probe("duplicate", {**_at(inside)}, {"flag_duplicates": True}),
        Probe(
            "same point, other dataset",
            {**_at(outside), "datasetKey": OTHER_DATASET},
            {"flag_duplicates": False},
        ),
        # Records without a dataset are one group at their point, apart from those with one.
        Probe("no dataset", {**_at(outside), "datasetKey": None}, {"flag_duplicates": False}),
        Probe("no dataset, again", {**_at(outside), "datasetKey": None}, {"flag_duplicates": True}),
        Probe(
            "fossil from 1850",
            {"basisOfRecord": "FOSSIL_SPECIMEN", "year": 1850, "eventDate": "1850-01-01"},
            {"flag_basis": True, "flag_old": True},
        ),
        Probe("no coordinates", {"decimalLongitude": None, "decimalLatitude": None}, {"flag_sea": None}),
        # GBIF's issue flags are kept trimmed, each once, in order, however the download gives them.
        Probe(
            "issues unsorted, repeated, padded",
            {"issues": ["TAXON_MATCH_FUZZY", " COORDINATE_ROUNDED ", "TAXON_MATCH_FUZZY", ""]},
            {"flag_gbif_issues": True},
        ),
        Probe("one issue, padded", {"issues": [" COORDINATE_ROUNDED "]}, {"flag_gbif_issues": False}),
    ]


def planted_records(lab_records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The devil's records replaced: the base, then one record per probe (keys in that order)."""
    template = {
        name: value
        for name, value in lab_records[0].items()
        if name not in {"coordinatePrecision", "establishmentMeans", "individualCount", "locality", "issues"}
    }
    template.update(
        basisOfRecord="HUMAN_OBSERVATION",
        countryCode="AU",
        datasetKey=DATASET,
        institutionCode="TMAG",
        license="http://creativecommons.org/licenses/by/4.0/legalcode",
        year=2000,
        eventDate="2000-05-01",
        issues=[],
        coordinateUncertaintyInMeters=100.0,
    )
    records = []
    for index in range(BASE_RECORDS):
        record = copy.deepcopy(template)
        record.update(key=FIRST_KEY + index, gbifID=str(FIRST_KEY + index), **_at(base_point(index)))
        records.append(record)
    for offset, probe in enumerate(probes()):
        record = copy.deepcopy(template)
        key = FIRST_KEY + BASE_RECORDS + offset
        record.update(key=key, gbifID=str(key), **_at(probe_point(offset)))
        for name, value in probe.changes.items():
            if value is None:
                record.pop(name, None)
            else:
                record[name] = value
        records.append(record)
    return records


def probe_keys() -> dict[str, int]:
    return {probe.name: FIRST_KEY + BASE_RECORDS + offset for offset, probe in enumerate(probes())}


# Tasmania's north-east corner: its coasts, Bass Strait's islands, and the Tasman Sea out to some 90 km.
COAST_BOX = (147.6, -41.6, 149.4, -40.6)
SCATTERED_RECORDS = 1_000


def scattered_on_coasts(lab_records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The devil's records replaced by points scattered over COAST_BOX (a seeded generator; every tenth
    under New Zealand's countryCode): land, shore and sea, so that every way the statement settles the
    buffer tests (cells, sub-cells, touch cells, bounds in degrees, geodesic distances) meets some."""
    import numpy as np

    template = {
        name: value
        for name, value in planted_records(lab_records)[0].items()
        if name not in {"decimalLongitude", "decimalLatitude"}
    }
    generator = np.random.default_rng(20261207)
    west, south, east, north = COAST_BOX
    longitudes = generator.uniform(west, east, SCATTERED_RECORDS)
    latitudes = generator.uniform(south, north, SCATTERED_RECORDS)
    records = []
    for index, (longitude, latitude) in enumerate(zip(longitudes, latitudes, strict=True)):
        record = copy.deepcopy(template)
        record.update(key=FIRST_KEY + index, gbifID=str(FIRST_KEY + index))
        record.update(_at((round(float(longitude), 5), round(float(latitude), 5))))
        if index % 10 == 9:
            record["countryCode"] = "NZ"
        records.append(record)
    return records
