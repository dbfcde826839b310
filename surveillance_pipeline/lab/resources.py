"""The lab's implementations of the resources that reach outside (project_fully_featured's HNClient
pattern): the same resources as live ones, which can also answer from the built-in lab data.
definitions.py binds them; no other part of the package imports the lab.
"""

from __future__ import annotations

from surveillance_pipeline.gbif.client import GbifClient
from surveillance_pipeline.geocoding.service import Geocoder
from surveillance_pipeline.lab.gbif_client import LabGbifClient
from surveillance_pipeline.lab.geocoder import LabGeocoder
from surveillance_pipeline.orchestration.resources import GbifSource, GeocoderSource


class LabGbifSource(GbifSource):
    """``GbifSource`` that answers ``GBIF_SOURCE=lab`` (or the fallback ``lab``) from the lab's records."""

    def lab_client(self) -> GbifClient:
        return LabGbifClient()


class LabGeocoderSource(GeocoderSource):
    """``GeocoderSource`` that answers ``GEOCODER=lab`` from the lab's gazetteer."""

    def lab_geocoder(self) -> Geocoder:
        return LabGeocoder()
