"""License normalization: GBIF's URIs and enum names to the three short names we publish."""

from __future__ import annotations

CC0 = "CC0 1.0"
CC_BY = "CC BY 4.0"
CC_BY_NC = "CC BY-NC 4.0"
LICENSES = (CC0, CC_BY, CC_BY_NC)

_BY_TOKEN = {
    # Occurrence search and DwC-A serve URIs; simple-CSV downloads serve enum names.
    "creativecommons.org/publicdomain/zero/1.0": CC0,
    "creativecommons.org/licenses/by/4.0": CC_BY,
    "creativecommons.org/licenses/by-nc/4.0": CC_BY_NC,
    "cc0_1_0": CC0,
    "cc_by_4_0": CC_BY,
    "cc_by_nc_4_0": CC_BY_NC,
    "cc0 1.0": CC0,
    "cc by 4.0": CC_BY,
    "cc by-nc 4.0": CC_BY_NC,
}


def normalize_license(value: str | None) -> str | None:
    """The short name for a GBIF license value; None for an empty one; ValueError when unknown."""
    if value is None or not value.strip():
        return None
    text = value.strip().lower()
    for prefix in ("https://", "http://"):
        text = text.removeprefix(prefix)
    text = text.removesuffix("/legalcode").removesuffix("/")
    try:
        return _BY_TOKEN[text]
    except KeyError:
        raise ValueError(f"unknown license {value!r} (known: {', '.join(LICENSES)})") from None
