"""Species that are not in the registry, for tests and the bench: their rows can never be mistaken for the
lab's (ids from 900,000 up; the lab's area, Tasmania; no GBIF taxon key)."""

from __future__ import annotations

from surveillance_pipeline.gbif.registry import Species


def synthetic_species(species_id: int, slug: str, scientific_name: str, vernacular_name: str) -> Species:
    return Species(
        species_id=species_id,
        slug=slug,
        scientific_name=scientific_name,
        vernacular_name=vernacular_name,
        taxon_key=None,
        kingdom="Animalia",
        country="AU",
        state_province="Tasmania",
        lab_records=0,
    )
