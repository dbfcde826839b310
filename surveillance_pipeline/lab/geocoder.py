"""The lab's geocoder: a fixed gazetteer, so the lab run geocodes without a network."""

from __future__ import annotations

from surveillance_pipeline.geocoding.service import FOUND, NOT_FOUND, GeocodeAnswer, normalize_locality
from surveillance_pipeline.lab.gazetteer import LAB_GAZETTEER


class LabGeocoder:
    """The lab's fixed gazetteer: the same answer for the same text, everywhere, with no network."""

    service = "lab-gazetteer-v1"

    def __init__(self) -> None:
        self.places = {normalize_locality(name): point for name, point in LAB_GAZETTEER.items()}

    def geocode(self, normalized: str) -> GeocodeAnswer:
        point = self.places.get(normalized)
        if point is None:
            return GeocodeAnswer(NOT_FOUND)
        return GeocodeAnswer(FOUND, longitude=point[0], latitude=point[1])
