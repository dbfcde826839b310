"""Which species a download's query asked for, read from the predicate GBIF writes into its metadata."""

from __future__ import annotations

import dataclasses
import json

import pytest

from surveillance_pipeline.gbif.download_query import query_asks_for
from surveillance_pipeline.gbif.registry import species_by_slug

# The registry's thylacine: backbone key 2435474, area AU / Tasmania.
THYLACINE = species_by_slug("thylacinus-cynocephalus")


def _and(*conditions: dict) -> str:
    return json.dumps({"type": "and", "predicates": list(conditions)}, separators=(",", ":"))


TAXA = {"type": "in", "key": "TAXON_KEY", "values": ["2433", "2435474"]}
AU = {"type": "equals", "key": "COUNTRY", "value": "AU"}


@pytest.mark.parametrize(
    ("query", "asked"),
    [
        # The shape of the recorded download requests (rgbif's occ_download fixtures), matchCase and all.
        (_and({**TAXA, "matchCase": False}, {"type": "in", "key": "COUNTRY", "values": ["NZ", "AU"]}), True),
        ('{"type":"equals","key":"TAXON_KEY","value":"2435474"}', True),
        (_and({"type": "equals", "key": "SPECIES_KEY", "value": 2435474}, AU), True),
        # The state ignoring case and spaces, as the registry's area filter does.
        (_and(TAXA, AU, {"type": "equals", "key": "STATE_PROVINCE", "value": " tasmania"}), True),
        # Conditions every species shares narrow the answer, not which species it is for.
        (_and(TAXA, AU, {"type": "greaterThanOrEquals", "key": "YEAR", "value": "1900"}), True),
        (_and(TAXA, AU, {"type": "equals", "key": "HAS_COORDINATE", "value": "true"}), True),
        # Keys as the API also takes them.
        (_and({"type": "equals", "key": "taxonKey", "value": "2435474"}, {**AU, "key": "country"}), True),
        # A place narrowed another way, or a taxon condition narrower than the search's: not asked.
        (
            _and(TAXA, {"type": "within", "geometry": "POLYGON((140 -44,149 -44,149 -39,140 -39,140 -44))"}),
            False,
        ),
        (_and(TAXA, {"type": "equals", "key": "CONTINENT", "value": "OCEANIA"}), False),
        (
            _and(
                TAXA, {"type": "or", "predicates": [AU, {"type": "equals", "key": "COUNTRY", "value": "NZ"}]}
            ),
            False,
        ),
        (_and({**TAXA, "key": "ACCEPTED_TAXON_KEY"}, AU), False),
        (
            _and(TAXA, {"type": "equals", "key": "STATE_PROVINCE", "value": "TASMANIA", "matchCase": True}),
            False,
        ),
        # Not asked: another taxon, another area, no taxon at all, an area the query cannot be read for.
        (_and({"type": "equals", "key": "TAXON_KEY", "value": "2433"}, AU), False),
        (_and(TAXA, {"type": "equals", "key": "COUNTRY", "value": "NZ"}), False),
        (_and(TAXA, {"type": "equals", "key": "STATE_PROVINCE", "value": "Victoria"}), False),
        (_and(TAXA, {"type": "like", "key": "COUNTRY", "value": "A*"}), False),
        ('{"type":"equals","key":"ELEVATION","value":"9500"}', False),
        # A taxon condition that does not name it: the conjunction leaves it out.
        (_and(TAXA, {"type": "equals", "key": "TAXON_KEY", "value": "2433"}), False),
        # Read narrowly: an "or" at the top, a query that is not JSON or in GBIF's words, none at all.
        (json.dumps({"type": "or", "predicates": [TAXA, AU]}), False),
        (
            '{ "and" : [ "TaxonKey is Thylacinus cynocephalus (Harris, 1808)", "Country is Australia" ] }',
            False,
        ),
        ("TaxonKey: Thylacinus cynocephalus", False),
        (None, False),
    ],
)
def test_a_query_asks_for_a_species_by_its_key_and_area(query, asked):
    assert query_asks_for(query, THYLACINE) is asked


def test_a_species_the_registry_names_without_a_key_is_never_asked_for():
    """Its records are matched by name, which no predicate here is read for: a download that holds none
    of them leaves it to the search."""
    by_name = dataclasses.replace(THYLACINE, taxon_key=None)
    assert not query_asks_for(_and(TAXA, AU), by_name)
    # A registry species without an area: a query narrowed to one country does not hold all of it.
    everywhere = dataclasses.replace(THYLACINE, country="", state_province="")
    assert query_asks_for(json.dumps(TAXA), everywhere)
    assert not query_asks_for(_and(TAXA, AU), everywhere)
