"""The species registry: which species we track and the GBIF request that fetches each.

The registry is a file, not code: adding a species is a data change. It is the CSV named by
``SURVEILLANCE_SPECIES_FILE`` (a file the user owns; a relative path is taken from the current directory),
else the lab registry packaged beside this module (``species.csv``). Each row's slug is its partition key;
``species_id`` is our stable key for it in PostGIS.
"""

from __future__ import annotations

import csv
import io
import os
import re
import stat
import tempfile
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from surveillance_pipeline.core.settings import SPECIES_FILE_VARIABLE

REGISTRY_FILE = "species.csv"
COLUMNS = (
    "species_id",
    "slug",
    "scientific_name",
    "vernacular_name",
    "taxon_key",
    "kingdom",
    "country",
    "state_province",
    "lab_records",
)
# Optional: where a species lives, for the quality tests (a marine or freshwater species is never flagged
# for a point at sea). Empty, or a registry without the column: terrestrial.
HABITAT_COLUMN = "habitat"
HABITATS = ("terrestrial", "marine", "freshwater")
SEARCH_ENDPOINT = "occurrence/search"
# Raw snapshots read from GBIF downloads record this endpoint, the downloads read and the taxon.
DOWNLOAD_ENDPOINT = "occurrence/download"
# A record's fields that hold a backbone key its taxon may be asked for by.
TAXON_KEY_FIELDS = ("taxonKey", "speciesKey", "acceptedTaxonKey")
# Slugs are Dagster partition keys and folder names: Dagster refuses , [ ] * and . and / splits paths.
SLUG = re.compile(r"[a-z0-9-]+")
POSITIVE = re.compile(r"[1-9][0-9]*")
COUNT = re.compile(r"0|[1-9][0-9]*")
# GBIF's ``country`` parameter and a download's ``countryCode`` are both ISO 3166-1 alpha-2, upper case.
COUNTRY = re.compile(r"[A-Z]{2}")
# The package this module belongs to: registries are never written inside it (an upgrade would lose them).
PACKAGE_DIR = Path(__file__).resolve().parent.parent


class RegistryError(ValueError):
    """A registry file that cannot be used, naming the file, the line and the field."""

    def __init__(self, path: Path | str, line: int, field: str | None, problem: str) -> None:
        self.path = str(path)
        self.line = line
        self.field = field
        where = f"line {line}" + (f", field {field}" if field else "")
        super().__init__(f"{path}: {where}: {problem}")


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
    # Empty country or state_province: no such filter, in the request and in in_area alike.
    country: str
    state_province: str
    lab_records: int
    # One of HABITATS; "" (not said) is treated as terrestrial.
    habitat: str = ""

    @property
    def terrestrial(self) -> bool:
        return self.habitat in ("", "terrestrial")

    def request(self) -> dict[str, Any]:
        """The GBIF occurrence-search request for this species, as recorded in its raw snapshot.

        Paging (offset/limit) is transport, not identity, so it is not part of the request.
        """
        params: dict[str, Any] = {}
        if self.country:
            params["country"] = self.country
        params["occurrenceStatus"] = "PRESENT"
        if self.state_province:
            params["stateProvince"] = self.state_province
        return {"endpoint": SEARCH_ENDPOINT, "params": {**params, **self.taxon_filter()}}

    def in_area(self, country_code: str | None, state_province: str | None) -> bool:
        """A record read from a download lies where the request would have asked: the same filter as
        ``request()`` sends GBIF, applied by us because a download's query need not be the registry's.

        Country codes are compared exactly (both are upper-case ISO codes); stateProvince ignoring case and
        surrounding spaces, as publishers' spellings vary. An empty registry value matches anything, even
        a missing one.
        """
        if self.country and country_code != self.country:
            return False
        if self.state_province:
            wanted = self.state_province.strip().casefold()
            return (state_province or "").strip().casefold() == wanted
        return True

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
def packaged_registry_path() -> Path:
    """The lab registry shipped with the package: read-only as far as this project is concerned."""
    return Path(str(resources.files(__package__).joinpath(REGISTRY_FILE))).resolve()


def registry_path() -> Path:
    """The registry in use: ``SURVEILLANCE_SPECIES_FILE`` when set, else the packaged lab registry."""
    named = os.environ.get(SPECIES_FILE_VARIABLE, "").strip()
    return Path(named).expanduser().resolve() if named else packaged_registry_path()


def load_registry() -> tuple[Species, ...]:
    """All species of the registry in use, in registry order (species_id ascending)."""
    return read_registry(registry_path())


@cache
def read_registry(path: Path) -> tuple[Species, ...]:
    """One registry file, read once per process and path: the partitions are fixed when the code location
    loads, so a process must keep seeing the registry they were built from. ``read_registry.cache_clear()``
    forgets it (tests; the CLIs read the file afresh with ``parse_registry``)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(
            f"species registry {path} does not exist (named by {SPECIES_FILE_VARIABLE}); create it with "
            "`python -m surveillance_pipeline.gbif.add_species --init`"
        ) from None
    return parse_registry(text, path)


def parse_registry(text: str, path: Path | str) -> tuple[Species, ...]:
    """The species of a registry CSV, checked row by row; raises RegistryError naming line and field."""
    reader = csv.DictReader(io.StringIO(text, newline=""))
    header = reader.fieldnames
    if not header:
        raise RegistryError(path, 1, None, f"empty file: expected the header {','.join(COLUMNS)}")
    missing = [name for name in COLUMNS if name not in header]
    if missing:
        raise RegistryError(path, 1, missing[0], f"missing column(s) {', '.join(missing)}")
    repeated = sorted({name for name in header if header.count(name) > 1})
    if repeated:
        raise RegistryError(path, 1, repeated[0], "column named twice")
    species: list[Species] = []
    first_seen: dict[tuple[str, object], int] = {}
    for row in reader:
        line = reader.line_num
        parsed = _species_of_row(row, path, line)
        for field in ("species_id", "slug", "taxon_key"):
            value = getattr(parsed, field)
            if value is None:
                continue
            earlier = first_seen.setdefault((field, value), line)
            if earlier != line:
                raise RegistryError(path, line, field, f"duplicate {value!r}, first on line {earlier}")
        species.append(parsed)
    return tuple(sorted(species, key=lambda s: s.species_id))


def _species_of_row(row: dict[str | Any, str | Any], path: Path | str, line: int) -> Species:
    if None in row:
        raise RegistryError(path, line, None, f"more fields than the header's {len(row) - 1}")
    present = (*COLUMNS, HABITAT_COLUMN) if HABITAT_COLUMN in row else COLUMNS
    for name in present:
        value = row[name]
        if value is None:
            raise RegistryError(path, line, name, "missing (the row has fewer fields than the header)")
        if value != value.strip():
            raise RegistryError(path, line, name, f"{value!r} has leading or trailing spaces")

    def checked(name: str, pattern: re.Pattern[str], expected: str) -> str:
        value = row[name]
        if value and not pattern.fullmatch(value):
            raise RegistryError(path, line, name, f"{value!r} is not {expected}")
        return value

    species_id = checked("species_id", POSITIVE, "a positive whole number")
    slug = checked("slug", SLUG, "a slug of a-z, 0-9 and - (it is a Dagster partition key)")
    taxon_key = checked("taxon_key", POSITIVE, "a GBIF backbone key (a positive whole number) or empty")
    country = checked("country", COUNTRY, "an upper-case ISO 3166-1 alpha-2 code (AU) or empty")
    lab_records = checked("lab_records", COUNT, "a count (0 or more)")
    habitat = row.get(HABITAT_COLUMN) or ""
    if habitat and habitat not in HABITATS:
        raise RegistryError(
            path, line, HABITAT_COLUMN, f"{habitat!r} is not one of {', '.join(HABITATS)} or empty"
        )
    for name, value in (
        ("species_id", species_id),
        ("slug", slug),
        ("scientific_name", row["scientific_name"]),
        ("lab_records", lab_records),
    ):
        if not value:
            raise RegistryError(path, line, name, "empty")
    return Species(
        species_id=int(species_id),
        slug=slug,
        scientific_name=row["scientific_name"],
        vernacular_name=row["vernacular_name"],
        taxon_key=int(taxon_key) if taxon_key else None,
        kingdom=row["kingdom"],
        country=country,
        state_province=row["state_province"],
        lab_records=int(lab_records),
        habitat=habitat,
    )


def inside_package(path: Path) -> bool:
    return path.resolve().is_relative_to(PACKAGE_DIR)


def write_registry(path: Path, text: str) -> None:
    """Replace a registry file whole, after checking the new text: written beside it, then renamed, so a
    reader (or a crash) sees the old file or the new one, never half of one. Never inside the package."""
    path = path.resolve()
    if inside_package(path):
        raise PermissionError(
            f"refusing to write {path}: it is inside the installed package, which an upgrade replaces; "
            f"set {SPECIES_FILE_VARIABLE} to a registry file you own "
            "(`python -m surveillance_pipeline.gbif.add_species --init` starts one from the lab registry)"
        )
    parse_registry(text, path)
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        mode = 0o644
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def species_by_slug(slug: str) -> Species:
    for species in load_registry():
        if species.slug == slug:
            return species
    raise KeyError(f"{slug!r} is not in the species registry ({registry_path()})")


def partition_keys() -> list[str]:
    return [s.slug for s in load_registry()]
