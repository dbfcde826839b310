"""The lab's fixed gazetteer: a few Tasmanian places, the only ones the lab geocoder knows.

The lab GBIF source writes these names (in assorted spellings) into the ``locality`` of some records that
have no coordinates, plus a few descriptions no gazetteer could resolve.
"""

from __future__ import annotations

# name -> (longitude, latitude), WGS84; approximate town or landmark centres.
LAB_GAZETTEER: dict[str, tuple[float, float]] = {
    "Hobart": (147.3272, -42.8821),
    "Launceston": (147.1441, -41.4332),
    "Devonport": (146.3497, -41.1806),
    "Burnie": (145.9069, -41.0556),
    "Strahan": (145.3281, -42.1531),
    "Queenstown": (145.5560, -42.0806),
    "Cradle Mountain": (145.9508, -41.6835),
    "St Helens": (148.2406, -41.3206),
    "Maria Island": (148.0740, -42.6380),
    "Freycinet Peninsula": (148.2955, -42.1235),
    "Whitemark": (148.0136, -40.1231),
    "Currie": (143.8597, -39.9310),
}

# Locality texts that name no place a geocoder can find: they are asked once and recorded as not found.
LAB_UNKNOWN_LOCALITIES = ("Behind the old shearing shed", "Creek crossing past the second gate", "Unknown")
