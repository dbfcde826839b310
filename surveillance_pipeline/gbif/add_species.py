"""Add a species to your own registry by its scientific name, through GBIF's species match.

    export SURVEILLANCE_SPECIES_FILE=$PWD/species.csv
    python -m surveillance_pipeline.gbif.add_species --init          # start it from the lab registry
    python -m surveillance_pipeline.gbif.add_species "Vombatus ursinus" --vernacular "common wombat"
    GBIF_SOURCE=api python -m surveillance_pipeline.gbif.add_species "Helianthus annuus" --country AU

The registry written is ``--registry`` or ``SURVEILLANCE_SPECIES_FILE``, never the packaged one. With
``GBIF_SOURCE=lab`` (the default) the name is matched offline against the lab's species only; with ``api`` or
``download`` it is matched by GBIF's v1 species match at ``GBIF_BASE_URL``. Only an exact match of an accepted
species is taken, and its backbone key becomes the row's taxon_key. Without --country/--state-province the
new species gets the area every species of the registry shares (pass '' for no filter).
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import re
from pathlib import Path
from typing import Any

from surveillance_pipeline.core.settings import (
    GBIF_BASE_URL_VARIABLE,
    GBIF_SOURCE_VARIABLE,
    SPECIES_FILE_VARIABLE,
)
from surveillance_pipeline.gbif.api import DEFAULT_BASE_URL, ApiGbifClient, GbifRequestError
from surveillance_pipeline.gbif.client import API_SOURCE, DOWNLOAD_SOURCE, LAB_SOURCE, SOURCES
from surveillance_pipeline.gbif.match_registry import judge
from surveillance_pipeline.gbif.registry import (
    COUNTRY,
    Species,
    inside_package,
    packaged_registry_path,
    parse_registry,
    read_registry,
    registry_path,
    write_registry,
)


class AddSpeciesError(ValueError):
    """A species that cannot be added, and why, in words for the user."""


def target_registry(registry: str | None) -> Path:
    """The file to add to: ``--registry``, else ``SURVEILLANCE_SPECIES_FILE``; relative to the current
    directory. Refused when neither is given or when it lies inside the package."""
    named = registry or os.environ.get(SPECIES_FILE_VARIABLE, "").strip()
    if not named:
        raise AddSpeciesError(
            f"no registry of your own to add to: set {SPECIES_FILE_VARIABLE} to a file you own (for example "
            f"`export {SPECIES_FILE_VARIABLE}=$PWD/species.csv`) and run again, with --init the first time "
            "to start it from the lab registry. The packaged registry is never edited."
        )
    path = Path(named).expanduser().resolve()
    if inside_package(path):
        raise AddSpeciesError(
            f"{path} is inside the installed package, which an upgrade replaces; point "
            f"{SPECIES_FILE_VARIABLE} (or --registry) at a file outside it"
        )
    return path


def init_registry(path: Path) -> None:
    """Start a registry of one's own as a copy of the packaged lab registry."""
    if path.exists():
        raise AddSpeciesError(f"{path} already exists: drop --init to add to it")
    write_registry(path, packaged_registry_path().read_text(encoding="utf-8"))


def lab_species_match(name: str) -> dict[str, Any]:
    """The lab's stand-in for GBIF's species match, shaped like GBIF's answer: an exact accepted species for
    a name of the lab's (with its backbone key where the packaged registry knows one), else ``NONE``."""
    wanted = " ".join(name.split()).casefold()
    for species in read_registry(packaged_registry_path()):
        if species.scientific_name.casefold() == wanted:
            match: dict[str, Any] = {
                "scientificName": species.scientific_name,
                "canonicalName": species.scientific_name,
                "rank": "SPECIES",
                "status": "ACCEPTED",
                "confidence": 100,
                "matchType": "EXACT",
                "kingdom": species.kingdom,
                "synonym": False,
            }
            if species.taxon_key is not None:
                match["usageKey"] = species.taxon_key
            return match
    return {"confidence": 100, "matchType": "NONE", "synonym": False, "note": "not a lab species"}


def species_match(name: str, source: str, base_url: str) -> dict[str, Any]:
    """GBIF's species match for the source in use: offline for the lab, GBIF's v1 API otherwise."""
    if source == LAB_SOURCE:
        match = lab_species_match(name)
        if match["matchType"] == "NONE":
            count = len(read_registry(packaged_registry_path()))
            raise AddSpeciesError(
                f"{name!r} is not one of the lab's {count} species: with {GBIF_SOURCE_VARIABLE}=lab (the "
                f"default) names are matched offline against those only. To match it against GBIF, run with "
                f"{GBIF_SOURCE_VARIABLE}=api (and {GBIF_BASE_URL_VARIABLE} if not {DEFAULT_BASE_URL})."
            )
        return match
    if source in (API_SOURCE, DOWNLOAD_SOURCE):
        # A download's records carry GBIF's backbone keys too, so its species are matched by GBIF as well.
        try:
            return ApiGbifClient(base_url).species_match(name)
        except GbifRequestError as error:
            raise AddSpeciesError(f"could not ask GBIF's species match about {name!r}: {error}") from None
    expected = ", ".join(SOURCES)
    raise AddSpeciesError(f"{GBIF_SOURCE_VARIABLE}={source!r}: expected one of {expected}")


def slug_of(name: str) -> str:
    """The partition key for a name: lower case, spaces as hyphens, any other character dropped."""
    text = "-".join(name.lower().split())
    return re.sub(r"-{2,}", "-", re.sub(r"[^a-z0-9-]", "", text)).strip("-")


def _area(existing: tuple[Species, ...], country: str | None, state_province: str | None) -> tuple[str, str]:
    shared = {(s.country, s.state_province) for s in existing}
    if country is None or state_province is None:
        if len(shared) != 1:
            # No silent worldwide default: a registry of mixed areas gives no answer to copy.
            raise AddSpeciesError(
                "the registry's species do not share one area to give the new one: say which with --country "
                "and --state-province ('' for no filter)"
            )
        (default_country, default_state) = next(iter(shared))
        country = default_country if country is None else country
        state_province = default_state if state_province is None else state_province
    country = country.strip().upper()
    if country and not COUNTRY.fullmatch(country):
        raise AddSpeciesError(f"--country {country!r}: expected a two-letter ISO code such as AU, or ''")
    return country, " ".join(state_province.split())


def add_species(
    path: Path,
    name: str,
    match: dict[str, Any],
    *,
    vernacular: str | None = None,
    country: str | None = None,
    state_province: str | None = None,
    kingdom: str | None = None,
) -> Species:
    """Append the species GBIF's ``match`` names to the registry at ``path``; the new row as a Species."""
    verdict = judge(name, match)
    if not verdict.accepted:
        raise AddSpeciesError(
            f"GBIF's species match did not find {name!r} as an exact accepted species ({verdict.note}); "
            "check the spelling, or give the accepted name"
        )
    text = path.read_text(encoding="utf-8")
    existing = parse_registry(text, path)
    scientific_name = " ".join(str(match.get("canonicalName") or name).split())
    slug = slug_of(scientific_name)
    if not slug:
        raise AddSpeciesError(f"{scientific_name!r} leaves no letters or digits for a slug")
    for species in existing:
        same = [
            what
            for what, clash in (
                (f"slug {slug}", species.slug == slug),
                (
                    f"taxon key {verdict.taxon_key}",
                    verdict.taxon_key and species.taxon_key == verdict.taxon_key,
                ),
                ("name", species.scientific_name.casefold() == scientific_name.casefold()),
            )
            if clash
        ]
        if same:
            raise AddSpeciesError(
                f"{scientific_name} is already in {path} as species {species.species_id} "
                f"({species.slug}, {species.scientific_name}): same {' and '.join(same)}; nothing added"
            )
    lab = {s.scientific_name: s for s in read_registry(packaged_registry_path())}.get(scientific_name)
    area_country, area_state = _area(existing, country, state_province)
    added = Species(
        species_id=max((s.species_id for s in existing), default=0) + 1,
        slug=slug,
        scientific_name=scientific_name,
        vernacular_name=" ".join(
            (vernacular if vernacular is not None else lab.vernacular_name if lab else "").split()
        ),
        taxon_key=verdict.taxon_key,
        kingdom=(kingdom if kingdom is not None else str(match.get("kingdom") or "")).strip(),
        country=area_country,
        state_province=area_state,
        # Only the lab's own species have lab records; any other would get an empty lab page anyway.
        lab_records=lab.lab_records if lab else 0,
    )
    write_registry(path, _with_row(text, added))
    return added


def _with_row(text: str, species: Species) -> str:
    """The registry text with one row appended, keeping the file's columns (extra ones left empty)."""
    reader = csv.DictReader(io.StringIO(text, newline=""))
    rows = list(reader)
    fields = list(reader.fieldnames or [])
    row = {name: "" for name in fields}
    row.update(
        species_id=str(species.species_id),
        slug=species.slug,
        scientific_name=species.scientific_name,
        vernacular_name=species.vernacular_name,
        taxon_key="" if species.taxon_key is None else str(species.taxon_key),
        kingdom=species.kingdom,
        country=species.country,
        state_province=species.state_province,
        lab_records=str(species.lab_records),
    )
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows([*rows, row])
    return out.getvalue()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m surveillance_pipeline.gbif.add_species",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("name", nargs="?", help="the scientific name, e.g. 'Vombatus ursinus'")
    parser.add_argument("--vernacular", help="common name (default: the lab's, else empty)")
    parser.add_argument("--country", help="ISO country code filter, e.g. AU ('' for none)")
    parser.add_argument("--state-province", help="stateProvince filter, e.g. Tasmania ('' for none)")
    parser.add_argument("--kingdom", help="default: the kingdom GBIF's match gives")
    parser.add_argument("--registry", help=f"registry file to add to (default: ${SPECIES_FILE_VARIABLE})")
    parser.add_argument("--init", action="store_true", help="first copy the lab registry to that file")
    arguments = parser.parse_args(argv)
    if not arguments.name and not arguments.init:
        parser.error("give a scientific name (or --init to only start a registry)")
    try:
        path = target_registry(arguments.registry)
        if arguments.init:
            init_registry(path)
            print(f"started {path} from the lab registry")
        if not arguments.name:
            _remind_variable(path)
            return
        if not path.exists():
            raise AddSpeciesError(f"{path} does not exist: add --init to start it from the lab registry")
        source = os.environ.get(GBIF_SOURCE_VARIABLE) or LAB_SOURCE
        base_url = os.environ.get(GBIF_BASE_URL_VARIABLE) or DEFAULT_BASE_URL
        added = add_species(
            path,
            arguments.name,
            species_match(arguments.name, source, base_url),
            vernacular=arguments.vernacular,
            country=arguments.country,
            state_province=arguments.state_province,
            kingdom=arguments.kingdom,
        )
    except (AddSpeciesError, OSError, ValueError) as error:
        raise SystemExit(f"add_species: {error}") from None
    key = (
        "no backbone key (the lab knows none)" if added.taxon_key is None else f"taxon key {added.taxon_key}"
    )
    area = f"{added.country or 'any country'} / {added.state_province or 'any stateProvince'}"
    print(
        f"added species {added.species_id} {added.slug}: {added.scientific_name}"
        f"{f' ({added.vernacular_name})' if added.vernacular_name else ''}, {key}, "
        f"kingdom {added.kingdom or '-'}, area {area}\n  to {path}\n"
        f"The partition {added.slug} appears when the Dagster code location reloads "
        "(Deployment > Reload in the UI, or restart `dagster dev`)."
    )
    _remind_variable(path)


def _remind_variable(path: Path) -> None:
    if registry_path() != path:
        print(
            f"Note: the pipeline reads {registry_path()} ({SPECIES_FILE_VARIABLE} "
            f"{'is unset' if not os.environ.get(SPECIES_FILE_VARIABLE) else 'names it'}); "
            f"set {SPECIES_FILE_VARIABLE}={path} where Dagster runs for it to read this file."
        )


if __name__ == "__main__":
    main()
