"""Whether a download's query asked for a registry species: then the download answers for it even when it
holds none of its records (GBIF has none matching the query), where a download that did not ask says
nothing of it.

The query is the one the download's metadata names (``DownloadInfo.query``). Read here only when it is the
predicate itself, as GBIF wrote it in 2014 and as a request is sent: JSON such as
``{"type":"and","predicates":[{"type":"in","key":"TAXON_KEY","values":["2435474"]},
{"type":"equals","key":"COUNTRY","value":"AU"}]}``. GBIF's archives of later years write the query in
words (``{ "and" : [ "TaxonKey is Thylacinus cynocephalus (Harris, 1808)", "Country is Australia" ] }``,
gbif/occurrence's DownloadMetadataBuilder): a name with its authorship and a country's title, which this
module does not guess at, so such a download never answers for a species it holds none of.

Read narrowly, so that "asked" is never a guess: the query's top-level conditions (the predicate itself,
or the members of a top-level ``and``) must name the species' backbone key in every taxon condition; every
country or state condition must take the registry's area for the species; and every other condition must
be one that narrows every species alike (NARROWING_EVERY_SPECIES: years, basis of record, issues...). A
condition on place of another kind (a geometry, a distance, GADM areas, a continent, coordinates), a
nested ``or``, ``and`` or ``not``, a species the registry names without a key: not asked.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

from surveillance_pipeline.gbif.registry import Species

# Predicate keys that select by taxon and take a backbone key: TAXON_KEY the taxon's descendants too, as
# the search's taxonKey does; SPECIES_KEY a species' records at any rank below it. (ACCEPTED_TAXON_KEY
# leaves out records identified below the species: narrower than the search.)
TAXON_CONDITIONS = frozenset({"TAXON_KEY", "SPECIES_KEY"})
# Conditions that narrow the records of every species alike, never the place: a download under them holds
# all GBIF has of a species it asked for, within them.
NARROWING_EVERY_SPECIES = frozenset(
    {
        "BASIS_OF_RECORD",
        "COORDINATE_UNCERTAINTY_IN_METERS",
        "DATASET_KEY",
        "DEGREE_OF_ESTABLISHMENT",
        "ESTABLISHMENT_MEANS",
        "EVENT_DATE",
        "HAS_COORDINATE",
        "HAS_GEOSPATIAL_ISSUE",
        "INSTITUTION_CODE",
        "ISSUE",
        "LICENSE",
        "MEDIA_TYPE",
        "MONTH",
        "OCCURRENCE_STATUS",
        "PUBLISHING_ORG",
        "YEAR",
    }
)


def _key_name(key: object) -> str:
    """A predicate key in GBIF's spelling: TAXON_KEY whether written so or as taxonKey."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", str(key or "")).upper()


@lru_cache(maxsize=64)
def _conditions(query: str) -> tuple[tuple[str, frozenset[str] | None, bool], ...] | None:
    """The query's top-level conditions as (key, the values it takes (None: not equals/in), whether it
    matches case); None when the query is not a predicate read here."""
    try:
        predicate = json.loads(query)
    except ValueError:
        return None
    if not isinstance(predicate, dict):
        return None
    members: Any = predicate.get("predicates") if predicate.get("type") == "and" else [predicate]
    if not isinstance(members, list):
        return None
    conditions = []
    for member in members:
        if not isinstance(member, dict):
            return None
        kind = member.get("type")
        if kind == "equals":
            values: frozenset[str] | None = frozenset({str(member.get("value"))})
        elif kind == "in" and isinstance(member.get("values"), list):
            values = frozenset(str(value) for value in member["values"])
        else:
            values = None
        # A member without a key (within, geoDistance, a nested and/or/not) gets none: not read.
        conditions.append((_key_name(member.get("key")), values, member.get("matchCase") is True))
    return tuple(conditions)


def _takes(values: frozenset[str] | None, wanted: str, match_case: bool) -> bool:
    """Whether an equals/in condition takes ``wanted`` (an empty ``wanted``: the registry has no filter
    there, so a condition narrows it)."""
    if values is None or not wanted:
        return False
    if match_case:
        return wanted in values
    return wanted.strip().casefold() in {value.strip().casefold() for value in values}


def query_asks_for(query: str | None, species: Species) -> bool:
    """Whether a download of ``query`` holds every record GBIF has of the species in its registry area
    (within conditions that narrow every species alike)."""
    if query is None or species.taxon_key is None:
        return False
    conditions = _conditions(query)
    if conditions is None:
        return False
    taxon_named = False
    for key, values, match_case in conditions:
        if key in TAXON_CONDITIONS:
            if values is None or str(species.taxon_key) not in values:
                return False
            taxon_named = True
        elif key == "COUNTRY":
            if not _takes(values, species.country, True):
                return False
        elif key == "STATE_PROVINCE":
            if not _takes(values, species.state_province, match_case):
                return False
        elif key not in NARROWING_EVERY_SPECIES:
            return False
    return taxon_named
