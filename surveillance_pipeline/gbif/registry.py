"""The species registry: which species we track and the GBIF request that fetches each.

The registry is a file (``species.csv``), not code: adding a species is a data change. Each row's slug is
its partition key; ``species_id`` is our stable key for it in PostGIS.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

REGISTRY_FILE = "species.csv"
SEARCH_ENDPOINT = "occurrence/search"
# Raw snapshots read from GBIF downloads record this endpoint, the downloads read and the taxon.
DOWNLOAD_ENDPOINT = "occurrence/download"
# A record's fields that hold a backbone key its taxon may be asked for by.
TAXON_KEY_FIELDS = ("taxonKey", "speciesKey", "acceptedTaxonKey")


@dataclass(frozen=True)
class Species:
    species_id: int
    slug: str
    scientific_name: str
    vernacular_name: str
    # GBIF backbone key; None until checked against GBIF's species match (then the request names the taxon
    # by key instead of by name, which changes the request and so refreshes the raw snapshot).
    taxon_key: int | None
    kingdom: str
    country: str
    state_province: str
    lab_records: int

    def request(self) -> dict[str, Any]:
        """The GBIF occurrence-search request for this species, as recorded in its raw snapshot.

        Paging (offset/limit) is transport, not identity, so it is not part of the request.
        """
        return {
            "endpoint": SEARCH_ENDPOINT,
            "params": {
                "country": self.country,
                "occurrenceStatus": "PRESENT",
                "stateProvince": self.state_province,
                **self.taxon_filter(),
            },
        }

    def matches(self, record: dict[str, Any]) -> bool:
        """The record is of this taxon as GBIF answers the request: for a key, the record's own key, its
        species key or its accepted key is that key; for a name, GBIF's interpreted species name is it."""
        if self.taxon_key is not None:
            return self.taxon_key in {record.get(name) for name in TAXON_KEY_FIELDS}
        return record.get("species") == self.scientific_name

    def taxon_filter(self) -> dict[str, Any]:
        """How GBIF is asked for this taxon: by backbone key once known, else by scientific name."""
        if self.taxon_key is not None:
            return {"taxonKey": self.taxon_key}
        return {"scientificName": self.scientific_name}


@cache
def load_registry() -> tuple[Species, ...]:
    """All species, in registry order (species_id ascending)."""
    text = resources.files(__package__).joinpath(REGISTRY_FILE).read_text(encoding="utf-8")
    rows = list(csv.DictReader(text.splitlines()))
    species = tuple(
        Species(
            species_id=int(row["species_id"]),
            slug=row["slug"],
            scientific_name=row["scientific_name"],
            vernacular_name=row["vernacular_name"],
            taxon_key=int(row["taxon_key"]) if row["taxon_key"] else None,
            kingdom=row["kingdom"],
            country=row["country"],
            state_province=row["state_province"],
            lab_records=int(row["lab_records"]),
        )
        for row in rows
    )
    _check_unique(species)
    return tuple(sorted(species, key=lambda s: s.species_id))


def _check_unique(species: tuple[Species, ...]) -> None:
    for attribute in ("species_id", "slug", "taxon_key"):
        values = [getattr(s, attribute) for s in species if getattr(s, attribute) is not None]
        duplicates = sorted({v for v in values if values.count(v) > 1}, key=str)
        if duplicates:
            raise ValueError(f"{REGISTRY_FILE}: duplicate {attribute}: {duplicates}")


def species_by_slug(slug: str) -> Species:
    for species in load_registry():
        if species.slug == slug:
            return species
    raise KeyError(f"{slug!r} is not in the species registry ({REGISTRY_FILE})")


def partition_keys() -> list[str]:
    return [s.slug for s in load_registry()]
