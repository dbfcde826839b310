"""Whether a download's query asked for a registry species: then the download answers for it even when it
holds none of its records (GBIF has none matching the query), where a download that did not ask says
nothing of it.

The query is the predicate GBIF wrote into the download's metadata (``DownloadInfo.query``), JSON such as
``{"type":"and","predicates":[{"type":"in","key":"TAXON_KEY","values":["2435474"]},
{"type":"equals","key":"COUNTRY","value":"AU"}]}``. Read narrowly, so that "asked" is never a guess: the
query's top-level conditions (the predicate itself, or the members of a top-level ``and``) must name the
species' backbone key in every taxon condition, and every country or state condition must take the
registry's area for the species. Anything else (a query that is not JSON, an ``or`` at the top, a species
the registry names without a key, a query narrower in area than the registry) did not ask.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from surveillance_pipeline.gbif.registry import Species

# Predicate keys that select by taxon: each takes a backbone key (TAXON_KEY its descendants too, as the
# search's taxonKey does).
TAXON_CONDITIONS = frozenset({"TAXON_KEY", "SPECIES_KEY", "ACCEPTED_TAXON_KEY"})


@lru_cache(maxsize=64)
def _conditions(query: str) -> tuple[tuple[str, frozenset[str] | None], ...] | None:
    """The query's top-level conditions as (key, the values it takes; None: not equals/in); None when
    the query is not a predicate read here."""
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
        key = str(member.get("key") or "").upper()
        kind = member.get("type")
        if kind == "equals":
            values: frozenset[str] | None = frozenset({str(member.get("value"))})
        elif kind == "in" and isinstance(member.get("values"), list):
            values = frozenset(str(value) for value in member["values"])
        else:
            values = None
        conditions.append((key, values))
    return tuple(conditions)


def query_asks_for(query: str | None, species: Species) -> bool:
    """Whether a download of ``query`` holds every record GBIF has of the species in its registry area
    (within the query's other conditions: years, basis of record and the like narrow every species alike)."""
    if query is None or species.taxon_key is None:
        return False
    conditions = _conditions(query)
    if conditions is None:
        return False
    taxon_named = False
    for key, values in conditions:
        if key in TAXON_CONDITIONS:
            if values is None or str(species.taxon_key) not in values:
                return False
            taxon_named = True
        elif key == "COUNTRY":
            if values is None or not species.country or species.country not in values:
                return False
        elif key == "STATE_PROVINCE":
            wanted = species.state_province.strip().casefold()
            if values is None or not wanted or wanted not in {value.strip().casefold() for value in values}:
                return False
    return taxon_named
