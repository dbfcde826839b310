"""The lab GBIF source: occurrence-search pages for the registry's species, the same bytes everywhere.

Every value is drawn from sha256 over ``lab|<slug>|<record>|<field>|<attempt>``: no ``random``, no ``hash()``,
so the pages are identical on every machine and Python. Records come back in generation order (not by key),
as GBIF's own order is not ours to rely on; ingest sorts them.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Mapping
from dataclasses import asdict
from functools import cache
from typing import Any

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
    (8, "HUMAN_OBSERVATION"),
    (1, "PRESERVED_SPECIMEN"),
    (1, "MACHINE_OBSERVATION"),
)
# Tasmania and the Bass Strait islands, in micro-degrees.
LATITUDE_RANGE = (-43_600_000, -39_600_000)
LONGITUDE_RANGE = (144_500_000, 148_500_000)
YEARS = (1950, 2025)
MISSING_YEAR_PER_MILLE = 60
MISSING_COORDINATES_PER_MILLE = 50
DATASETS = 6
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


@cache
def _total_weight(weighted: tuple[tuple[int, str], ...]) -> int:
    return sum(weight for weight, _ in weighted)


def _pick(weighted: tuple[tuple[int, str], ...], value: int) -> str:
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


def _record(species: Species, index: int, key: int) -> dict[str, Any]:
    # _draw(slug, index, field), with the record's common prefix hashed once: a record takes a dozen draws.
    prefix = hashlib.sha256(f"lab|{species.slug}|{index}|".encode())

    def draw(field: str) -> int:
        digest = prefix.copy()
        digest.update(field.encode("utf-8"))
        return int.from_bytes(digest.digest()[:8], "big")

    genus, _, epithet = species.scientific_name.partition(" ")
    record: dict[str, Any] = {
        "basisOfRecord": _pick(BASIS_OF_RECORD, draw("basis")),
        "countryCode": species.country,
        "country": "Australia",
        "datasetKey": _dataset_key(draw("dataset") % DATASETS),
        "gbifID": str(key),
        "genus": genus,
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
    if draw("year-missing") % 1000 >= MISSING_YEAR_PER_MILLE:
        year = YEARS[0] + draw("year") % (YEARS[1] - YEARS[0] + 1)
        month = 1 + draw("month") % 12
        day = 1 + draw("day") % 28
        record.update(year=year, month=month, day=day, eventDate=f"{year:04d}-{month:02d}-{day:02d}")
    if draw("coordinates-missing") % 1000 >= MISSING_COORDINATES_PER_MILLE:
        lat_span = LATITUDE_RANGE[1] - LATITUDE_RANGE[0]
        lon_span = LONGITUDE_RANGE[1] - LONGITUDE_RANGE[0]
        # Whole micro-degrees, rounded to five decimals as many publishers do.
        latitude = (LATITUDE_RANGE[0] + draw("latitude") % lat_span) // 10 * 10
        longitude = (LONGITUDE_RANGE[0] + draw("longitude") % lon_span) // 10 * 10
        record.update(
            decimalLatitude=latitude / 1_000_000,
            decimalLongitude=longitude / 1_000_000,
            geodeticDatum="WGS84",
            coordinateUncertaintyInMeters=float(10 * (1 + draw("uncertainty") % 100)),
        )
        record["issues"] = ["COORDINATE_ROUNDED"] if draw("rounded") % 4 == 0 else []
    elif draw("locality-present") % 1000 < LOCALITY_PER_MILLE:
        text = LOCALITY_TEXTS[draw("locality") % len(LOCALITY_TEXTS)]
        record["locality"] = LOCALITY_SPELLINGS[draw("locality-spelling") % len(LOCALITY_SPELLINGS)](text)
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
