"""What one GBIF occurrence record must satisfy, stated once for every reader of records.

Ingest (search pages and downloads), derive, the daily batches and the deliveries all read gbifIDs,
years, coordinates and licenses, from JSON values or from text fields. Each asks here, so a record one
path accepts, no other path refuses. The ``*_problem`` functions return what is wrong (None: nothing), and
the caller names the file, line and field.
"""

from __future__ import annotations

import math
import re

# The largest gbifID PostgreSQL's bigint holds.
MAX_GBIF_ID = 2**63 - 1
# Years a record may carry; anything outside is a typo in the source, refused rather than loaded.
YEAR_RANGE = (1600, 2100)
# Each coordinate term with its limit in degrees.
COORDINATE_TERMS = (("decimalLatitude", 90.0), ("decimalLongitude", 180.0))
# GBIF's flag for records published at 0,0: kept, but without a geometry.
ZERO_COORDINATE = "ZERO_COORDINATE"

# At most 19 digits (bigint) and 4 (a year): Python's int() refuses very long digit strings outright.
_GBIF_ID_TEXT = re.compile(r"[0-9]{1,19}")
_YEAR_TEXT = re.compile(r"[0-9]{1,4}")
# What both Python and PostgreSQL read as the same double; float() alone also takes "nan", "1_0", " 1".
_DECIMAL_TEXT = re.compile(r"-?[0-9]{1,20}(\.[0-9]{1,20})?([eE][-+]?[0-9]{1,3})?")


def valid_gbif_id(key: int) -> bool:
    return 0 < key <= MAX_GBIF_ID


def gbif_id_text_problem(text: str) -> str | None:
    """A gbifID written as text (a batch, a delivery, a download's column)."""
    if _GBIF_ID_TEXT.fullmatch(text) and valid_gbif_id(int(text)):
        return None
    return f"expected a gbifID in 1..{MAX_GBIF_ID}, got {text[:40]!r}"


def year_problem(year: int) -> str | None:
    if YEAR_RANGE[0] <= year <= YEAR_RANGE[1]:
        return None
    return f"{year} is outside {YEAR_RANGE[0]}..{YEAR_RANGE[1]}"


def year_text_problem(text: str) -> str | None:
    """An optional year written as text: empty, or four digits in YEAR_RANGE."""
    if not text or (_YEAR_TEXT.fullmatch(text) and year_problem(int(text)) is None):
        return None
    return f"expected empty or a year in {YEAR_RANGE[0]}..{YEAR_RANGE[1]}, got {text[:40]!r}"


def coordinate_problem(value: float, limit: float) -> str | None:
    if not math.isfinite(value):
        return f"{value!r} is not a finite number"
    if not -limit <= value <= limit:
        return f"{value} is outside -{limit:g}..{limit:g}"
    return None


def decimal_text_problem(text: str, limit: float) -> str | None:
    """A coordinate written as text, in the one notation Python and PostgreSQL read alike."""
    if not _DECIMAL_TEXT.fullmatch(text):
        return f"expected a decimal number, got {text[:40]!r}"
    return coordinate_problem(float(text), limit)


def published_at_zero(
    latitude: float | None, longitude: float | None, issues: list[str] | tuple[str, ...]
) -> bool:
    """A record GBIF flags, or that sits exactly at 0,0: its coordinates are a placeholder, not a place."""
    return (latitude == 0 and longitude == 0) or ZERO_COORDINATE in issues
