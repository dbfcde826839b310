"""The lab GBIF source: occurrence-search pages for the registry's species, the same bytes everywhere.

Every value is drawn from sha256 over ``lab|<slug>|<record>|<field>|<attempt>``: no ``random``, no ``hash()``,
so the pages are identical on every machine and Python. Records come back in generation order (not by key),
as GBIF's own order is not ours to rely on; ingest sorts them.

Like GBIF's own data, a small share of the records carries each problem an analyst filters for
(CoordinateCleaner-style tests): fossil and living specimens, introduced or managed organisms, coarse,
missing or placeholder coordinate uncertainty, coarse coordinate precision, years before 1900, extra
GBIF issue flags, coordinates on a capital, a country or province centroid, GBIF's headquarters, near
0,0 or with equal absolute latitude and longitude, duplicates of the record before, and a country code
that is not the one the coordinates lie in. Each is decided by a draw of its own, at the share its
constant below names; none makes a record absent, none puts one at 0,0. The points of a species that
does not live at sea are drawn again until they lie on land (Natural Earth's 1:50m land, the layer the
sea test reads), but for a few kept offshore as GPS and georeferencing leave some.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable, Mapping
from dataclasses import asdict
from functools import cache
from typing import Any, TypeVar

from surveillance_pipeline.core.keys import canonical_json, modules_source_sha256, sha256_hex
from surveillance_pipeline.gbif.client import LAB_SOURCE
from surveillance_pipeline.gbif.registry import Species, load_registry
from surveillance_pipeline.lab import gazetteer
from surveillance_pipeline.lab.gazetteer import LAB_GAZETTEER, LAB_UNKNOWN_LOCALITIES

# The lab records never change, so every lab snapshot stands for this one retrieval.
LAB_RETRIEVED = "2026-11-02T00:00:00Z"

LICENSE_URIS = (
    # weight, URI as GBIF serves it
    (2, "http://creativecommons.org/licenses/by/4.0/legalcode"),
    (1, "http://creativecommons.org/publicdomain/zero/1.0/legalcode"),
    (1, "http://creativecommons.org/licenses/by-nc/4.0/legalcode"),
)
BASIS_OF_RECORD = (
    # Fossil and living (zoo, garden) specimens are 10 per mille each: rare, as in GBIF, yet there for the
    # basis-of-record filter every analysis applies.
    (156, "HUMAN_OBSERVATION"),
    (20, "PRESERVED_SPECIMEN"),
    (20, "MACHINE_OBSERVATION"),
    (2, "LIVING_SPECIMEN"),
    (2, "FOSSIL_SPECIMEN"),
)
# Tasmania and the Bass Strait islands, in micro-degrees.
LATITUDE_RANGE = (-43_600_000, -39_600_000)
LONGITUDE_RANGE = (144_500_000, 148_500_000)
YEARS = (1950, 2025)
MISSING_YEAR_PER_MILLE = 60
# Of the records with a year, this many per mille date from before 1900 (from OLD_YEARS): museum
# collections' old records, which a temporal filter drops.
OLD_YEAR_PER_MILLE = 10
OLD_YEARS = (1850, 1899)
MISSING_COORDINATES_PER_MILLE = 50
# Each lab dataset's publishing institution, by dataset index: a dataset always has the same one.
DATASET_INSTITUTIONS = ("TMAG", "AM", "iNaturalist", "CSIRO", "UTAS", "NHMUK")
DATASETS = len(DATASET_INSTITUTIONS)
# Per mille of all records; the rest carry no establishmentMeans, as most GBIF records do not. Introduced
# and managed (planted, farmed) organisms are what a native-range analysis leaves out.
ESTABLISHMENT_MEANS = (
    (20, "INTRODUCED"),
    (5, "MANAGED"),
    (30, "NATIVE"),
    (945, None),
)
# Half the records give no individualCount, as GBIF's do; the others count 1 to INDIVIDUAL_COUNT_MAX.
INDIVIDUAL_COUNT_PER_MILLE = 500
INDIVIDUAL_COUNT_MAX = 20
# coordinateUncertaintyInMeters, per mille of the records with coordinates (the rest: 10 to 1,000 m).
# Missing, as for many publishers; a placeholder GBIF and CoordinateCleaner know as a default of some
# georeferencing tool rather than a measure; coarse, over 10 km, which a fine-scale analysis drops.
UNCERTAINTY_MISSING_PER_MILLE = 50
UNCERTAINTY_PLACEHOLDER_PER_MILLE = 10
UNCERTAINTY_PLACEHOLDERS = (301, 3036, 999, 9999)
UNCERTAINTY_COARSE_PER_MILLE = 30
UNCERTAINTY_COARSE_RANGE = (12_000, 50_000)
# coordinatePrecision, per mille of the records with coordinates: most publishers give none; 15 per mille
# are coarse (0.1 or 1 degree), points a precision filter drops.
COORDINATE_PRECISIONS = (
    (700, None),
    (95, 0.00001),
    (95, 0.0001),
    (95, 0.001),
    (8, 0.1),
    (7, 1.0),
)
# GBIF's issue flags besides COORDINATE_ROUNDED, each on this many per mille of the records (the
# coordinate ones only where there are coordinates): what an analyst's issue filter looks for.
EXTRA_ISSUE_PER_MILLE = 3
EXTRA_ISSUES = (
    "COUNTRY_COORDINATE_MISMATCH",
    "RECORDED_DATE_INVALID",
    "TAXON_MATCH_FUZZY",
    "TAXON_MATCH_HIGHERRANK",
    "PRESUMED_NEGATED_LONGITUDE",
    "COORDINATE_PRECISION_INVALID",
)
COORDINATE_ISSUES = frozenset(
    ("COUNTRY_COORDINATE_MISMATCH", "PRESUMED_NEGATED_LONGITUDE", "COORDINATE_PRECISION_INVALID")
)
# Points publishers' errors put records on, as CoordinateCleaner tests for them, (latitude, longitude) to
# five decimals like every lab point: Canberra as Natural Earth places Australia's capital
# (149.1290262442992, -35.283028545372076); the centroids of Australia and of Tasmania; GBIF's headquarters
# in Copenhagen.
CAPITAL_POINT = (-35.28303, 149.12903)
COUNTRY_CENTROID_POINT = (-25.73289, 134.491)
PROVINCE_CENTROID_POINT = (-41.94104, 146.60017)
INSTITUTION_POINT = (55.67, 12.58)
# Per ten thousand records with coordinates, one draw deciding among them (None: in Tasmania as drawn):
# rare, yet each seen in the lab.
# Near zero: each coordinate 0.1 to 0.4 degrees (never 0,0 itself, which GBIF flags ZERO_COORDINATE);
# equal absolute: latitude is minus longitude, longitude 40 to 43 degrees.
ERROR_POINTS_PER_TEN_THOUSAND = (
    (10, "capital"),
    (5, "country-centroid"),
    (5, "province-centroid"),
    (5, "institution"),
    (5, "near-zero"),
    (5, "equal-absolute"),
    (9965, None),
)
FIXED_ERROR_POINTS = {
    "capital": CAPITAL_POINT,
    "country-centroid": COUNTRY_CENTROID_POINT,
    "province-centroid": PROVINCE_CENTROID_POINT,
    "institution": INSTITUTION_POINT,
}
NEAR_ZERO_RANGE = (100_000, 400_000)
EQUAL_ABSOLUTE_RANGE = (40_000_000, 43_000_000)
# Of the records with coordinates, this many per mille repeat the place and dataset of the record before
# them (when it has coordinates): the duplicates a de-duplication step removes.
DUPLICATE_PER_MILLE = 10
# This many per mille of the records with coordinates lie in another country than the one they name
# (countryCode AU, as GBIF's country=AU answers them): on New Zealand's Canterbury Plains, across the
# Tasman Sea (latitude and longitude ranges in micro-degrees).
OTHER_COUNTRY_PER_MILLE = 5
OTHER_COUNTRY_LATITUDES = (-43_800_000, -43_300_000)
OTHER_COUNTRY_LONGITUDES = (171_600_000, 172_400_000)
# Points of a species that does not live at sea are drawn again (up to LAND_ATTEMPTS times) until they lie
# on land, Natural Earth's 1:50m land as the quality tests read it; this many per mille keep their first
# draw wherever it is: a coastal record offshore, as GPS and georeferencing leave a few. A marine species'
# points are drawn over the whole area, sea and land.
KEPT_AT_SEA_PER_MILLE = 5
LAND_ATTEMPTS = 64
# Of the records without coordinates, this many per mille carry a ``locality`` text to geocode.
LOCALITY_PER_MILLE = 600
# The lab's place names, then texts no gazetteer resolves; spellings vary as publishers' do.
LOCALITY_TEXTS = (*LAB_GAZETTEER, *LAB_UNKNOWN_LOCALITIES)
LOCALITY_SPELLINGS = (
    lambda text: text,
    lambda text: text.upper(),
    lambda text: f"  {text.lower()} ",
    lambda text: text.replace(" ", "  "),
)


def _draw(*parts: object) -> int:
    """A 64-bit unsigned integer determined only by ``parts``."""
    text = "|".join(str(p) for p in ("lab", *parts))
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")


T = TypeVar("T")


@cache
def _total_weight(weighted: tuple[tuple[int, Any], ...]) -> int:
    return sum(weight for weight, _ in weighted)


def _pick(weighted: tuple[tuple[int, T], ...], value: int) -> T:
    point = value % _total_weight(weighted)
    for weight, item in weighted:
        if point < weight:
            return item
        point -= weight
    raise AssertionError("unreachable")


@cache
def _dataset_key(index: int) -> str:
    digest = hashlib.sha256(f"lab|dataset|{index}".encode()).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-4{digest[13:16]}-8{digest[17:20]}-{digest[20:32]}"


def _gbif_ids(species: Species) -> list[int]:
    """Distinct 10-digit gbifIDs in a band of their own per species, so no two species share one."""
    base = 1_000_000_000 + species.species_id * 40_000_000
    seen: set[int] = set()
    ids: list[int] = []
    for index in range(species.lab_records):
        attempt = 0
        while True:
            candidate = base + _draw(species.slug, index, "key", attempt) % 40_000_000
            if candidate not in seen:
                break
            attempt += 1
        seen.add(candidate)
        ids.append(candidate)
    return ids


def _drawer(species: Species, index: int) -> Callable[[str], int]:
    """``_draw(slug, index, field)`` for one record, its common prefix hashed once: a record takes some
    twenty draws."""
    prefix = hashlib.sha256(f"lab|{species.slug}|{index}|".encode())

    def draw(field: str) -> int:
        digest = prefix.copy()
        digest.update(field.encode("utf-8"))
        return int.from_bytes(digest.digest()[:8], "big")

    return draw


def _micro(low: int, high: int, value: int) -> float:
    """Degrees from whole micro-degrees in ``low..high``, to five decimals like every lab point."""
    return (low + value % (high - low + 1)) // 10 * 10 / 1_000_000


def _point(species: Species, draw: Callable[[str], int]) -> tuple[float, float]:
    """(latitude, longitude) of a record with coordinates: on a known error point for a few, in another
    country for a few, in Tasmania (on land, unless the species lives at sea) for the others."""
    kind = _pick(ERROR_POINTS_PER_TEN_THOUSAND, draw("error-point"))
    if kind in FIXED_ERROR_POINTS:
        return FIXED_ERROR_POINTS[kind]
    if kind == "near-zero":
        latitude = _micro(*NEAR_ZERO_RANGE, draw("near-zero-latitude"))
        return latitude, _micro(*NEAR_ZERO_RANGE, draw("near-zero-longitude"))
    if kind == "equal-absolute":
        longitude = _micro(*EQUAL_ABSOLUTE_RANGE, draw("equal-absolute-longitude"))
        return -longitude, longitude
    if draw("other-country") % 1000 < OTHER_COUNTRY_PER_MILLE:
        latitude = _micro(*OTHER_COUNTRY_LATITUDES, draw("other-country-latitude"))
        return latitude, _micro(*OTHER_COUNTRY_LONGITUDES, draw("other-country-longitude"))
    on_land = species.terrestrial or species.habitat == "freshwater"
    keep_first = not on_land or draw("kept-at-sea") % 1000 < KEPT_AT_SEA_PER_MILLE
    for attempt in range(LAND_ATTEMPTS):
        # Whole micro-degrees, rounded to five decimals as many publishers do. The first attempt draws as
        # the lab always has, so a point already on land stays where it was.
        suffix = "" if attempt == 0 else f"|{attempt}"
        latitude = _in_range(LATITUDE_RANGE, draw(f"latitude{suffix}"))
        longitude = _in_range(LONGITUDE_RANGE, draw(f"longitude{suffix}"))
        if keep_first or _on_land(longitude, latitude):
            break
    return latitude, longitude


def _in_range(bounds: tuple[int, int], value: int) -> float:
    """Degrees from whole micro-degrees in ``bounds`` (upper bound excluded), to five decimals."""
    return (bounds[0] + value % (bounds[1] - bounds[0])) // 10 * 10 / 1_000_000


@cache
def _lab_land() -> Any:
    """Natural Earth's 1:50m land within the lab's area, prepared for point tests (shapely)."""
    import gzip
    import json

    import shapely
    from shapely.geometry import box, shape

    from surveillance_pipeline.quality.references import LAYER_FILES, REFERENCE_FOLDER

    west, east = (bound / 1e6 for bound in LONGITUDE_RANGE)
    south, north = (bound / 1e6 for bound in LATITUDE_RANGE)
    area = box(west - 1, south - 1, east + 1, north + 1)
    with gzip.open(REFERENCE_FOLDER / LAYER_FILES["land"], "rt", encoding="utf-8") as handle:
        features = json.load(handle)["features"]
    pieces = [shape(feature["geometry"]).intersection(area) for feature in features]
    land = shapely.union_all([piece for piece in pieces if not piece.is_empty])
    shapely.prepare(land)
    return land


def _on_land(longitude: float, latitude: float) -> bool:
    import shapely

    return bool(shapely.contains_xy(_lab_land(), longitude, latitude))


def _placement(
    species: Species, index: int, draw: Callable[[str], int]
) -> tuple[int, tuple[float, float] | None]:
    """A record's dataset index and (latitude, longitude), None without coordinates.

    A duplicate takes both from the record before it, as that record was drawn (its own error point or
    duplicate included): recomputed from the draws, so no state passes between records.
    """
    dataset = draw("dataset") % DATASETS
    if draw("coordinates-missing") % 1000 < MISSING_COORDINATES_PER_MILLE:
        return dataset, None
    if index > 0 and draw("duplicate") % 1000 < DUPLICATE_PER_MILLE:
        before = _placement(species, index - 1, _drawer(species, index - 1))
        if before[1] is not None:
            return before
    return dataset, _point(species, draw)


def _uncertainty(draw: Callable[[str], int]) -> float | None:
    """coordinateUncertaintyInMeters: a float, as GBIF's JSON gives it; None for a record without one."""
    point = draw("uncertainty-kind") % 1000
    if point < UNCERTAINTY_MISSING_PER_MILLE:
        return None
    point -= UNCERTAINTY_MISSING_PER_MILLE
    if point < UNCERTAINTY_PLACEHOLDER_PER_MILLE:
        placeholder = draw("uncertainty-placeholder") % len(UNCERTAINTY_PLACEHOLDERS)
        return float(UNCERTAINTY_PLACEHOLDERS[placeholder])
    point -= UNCERTAINTY_PLACEHOLDER_PER_MILLE
    if point < UNCERTAINTY_COARSE_PER_MILLE:
        low, high = UNCERTAINTY_COARSE_RANGE
        return float(low + draw("uncertainty-coarse") % (high - low + 1))
    return float(10 * (1 + draw("uncertainty") % 100))


def _record(species: Species, index: int, key: int) -> dict[str, Any]:
    draw = _drawer(species, index)
    genus, _, epithet = species.scientific_name.partition(" ")
    dataset, coordinates = _placement(species, index, draw)
    record: dict[str, Any] = {
        "basisOfRecord": _pick(BASIS_OF_RECORD, draw("basis")),
        "countryCode": species.country,
        "country": "Australia",
        "datasetKey": _dataset_key(dataset),
        "gbifID": str(key),
        "genus": genus,
        "institutionCode": DATASET_INSTITUTIONS[dataset],
        "issues": [],
        "key": key,
        "kingdom": species.kingdom,
        "license": _pick(LICENSE_URIS, draw("license")),
        "occurrenceStatus": "PRESENT",
        "scientificName": species.scientific_name,
        "species": species.scientific_name,
        "specificEpithet": epithet,
        "stateProvince": species.state_province,
        "taxonRank": "SPECIES",
    }
    if species.taxon_key is not None:
        # The lab knows only the keys the registry knows; it never invents a GBIF key.
        record.update(
            taxonKey=species.taxon_key, speciesKey=species.taxon_key, acceptedTaxonKey=species.taxon_key
        )
    establishment = _pick(ESTABLISHMENT_MEANS, draw("establishment"))
    if establishment is not None:
        record["establishmentMeans"] = establishment
    if draw("individual-count-present") % 1000 < INDIVIDUAL_COUNT_PER_MILLE:
        record["individualCount"] = 1 + draw("individual-count") % INDIVIDUAL_COUNT_MAX
    if draw("year-missing") % 1000 >= MISSING_YEAR_PER_MILLE:
        first, last = OLD_YEARS if draw("year-old") % 1000 < OLD_YEAR_PER_MILLE else YEARS
        year = first + draw("year") % (last - first + 1)
        month = 1 + draw("month") % 12
        day = 1 + draw("day") % 28
        record.update(year=year, month=month, day=day, eventDate=f"{year:04d}-{month:02d}-{day:02d}")
    if coordinates is not None:
        record.update(decimalLatitude=coordinates[0], decimalLongitude=coordinates[1], geodeticDatum="WGS84")
        uncertainty = _uncertainty(draw)
        if uncertainty is not None:
            record["coordinateUncertaintyInMeters"] = uncertainty
        precision = _pick(COORDINATE_PRECISIONS, draw("precision"))
        if precision is not None:
            record["coordinatePrecision"] = precision
        record["issues"] = ["COORDINATE_ROUNDED"] if draw("rounded") % 4 == 0 else []
    elif draw("locality-present") % 1000 < LOCALITY_PER_MILLE:
        text = LOCALITY_TEXTS[draw("locality") % len(LOCALITY_TEXTS)]
        record["locality"] = LOCALITY_SPELLINGS[draw("locality-spelling") % len(LOCALITY_SPELLINGS)](text)
    extra = draw("extra-issue") % 1000
    if extra < EXTRA_ISSUE_PER_MILLE * len(EXTRA_ISSUES):
        issue = EXTRA_ISSUES[extra // EXTRA_ISSUE_PER_MILLE]
        if coordinates is not None or issue not in COORDINATE_ISSUES:
            # Sorted, as GBIF's readers (and ours) hold a record's issues.
            record["issues"] = sorted([*record["issues"], issue])
    return record


def lab_records(slug: str) -> tuple[dict[str, Any], ...]:
    """Every lab record of one species of the registry in use, in the lab's own (generation) order."""
    return _species_records(next(s for s in load_registry() if s.slug == slug))


@cache
def _species_records(species: Species) -> tuple[dict[str, Any], ...]:
    # Cached by the whole registry entry, not the slug: another registry's entry (another count of lab
    # records) is another answer, as answer_version says.
    return tuple(_record(species, index, key) for index, key in enumerate(_gbif_ids(species)))


def species_for_params(params: Mapping[str, Any]) -> Species | None:
    """The registry species whose request these params are; None when no lab species matches."""
    return _species_by_params(load_registry()).get(_params_text(params))


def _params_text(params: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((name, str(value)) for name, value in params.items()))


@cache
def _species_by_params(registry: tuple[Species, ...]) -> dict[tuple[tuple[str, str], ...], Species]:
    """Each species of a registry by its request's params (the first, should two ask the same): built once
    per registry, not once per page (a page asked for every species' request again, 71 of them)."""
    found: dict[tuple[tuple[str, str], ...], Species] = {}
    for species in registry:
        found.setdefault(_params_text(species.request()["params"]), species)
    return found


# The lab generator's own source (this module and its gazetteer), hashed at import: the code this process
# draws records with. Any edit to how records are drawn, a comment included, is a new version of every
# answer (costing one full compare).
GENERATOR_SHA256 = modules_source_sha256(sys.modules[__name__], gazetteer)


class LabGbifClient:
    """Serves GBIF occurrence-search pages from the deterministic lab data."""

    source = LAB_SOURCE
    snapshot_retrieved: str | None = LAB_RETRIEVED

    def search_occurrences(self, params: Mapping[str, Any], *, offset: int, limit: int) -> dict[str, Any]:
        species = species_for_params(params)
        records = _species_records(species) if species else ()
        page = list(records[offset : offset + limit])
        return {
            "count": len(records),
            "endOfRecords": offset + len(page) >= len(records),
            "facets": [],
            "limit": limit,
            "offset": offset,
            "results": page,
        }

    def answer_version(self, params: Mapping[str, Any]) -> str | None:
        """The lab's answer is a function of its generator and the species these params ask for, so
        their sha256 versions it: an unchanged lab skips without drawing 26,391 records again (0.8 of
        the lab's 1.0 s gbif_raw skip). A subclass that serves other pages (the tests' edited lab) is
        known only by its answers: None."""
        if type(self).search_occurrences is not LabGbifClient.search_occurrences:
            return None
        species = species_for_params(params)
        answer = {
            "generator": GENERATOR_SHA256,
            "params": dict(_params_text(params)),
            "species": asdict(species) if species is not None else None,
        }
        return sha256_hex(canonical_json(answer).encode("utf-8"))
