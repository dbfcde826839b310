"""What one GBIF occurrence record must satisfy, stated once for every reader of records.

Ingest (search pages and downloads), derive, the daily batches and the deliveries all read gbifIDs,
years, coordinates and licenses, from JSON values or from text fields. Each asks here, so a record one
path accepts, no other path refuses. The ``*_problem`` functions return what is wrong (None: nothing), and
the caller names the file, line and field.

Text is checked by the ``*_PATTERN`` regular expressions below, each written once in the syntax Python's
``re`` and RE2 (pyarrow's compute functions) read alike: ASCII ``[0-9]`` (``\\d`` would take other
scripts' digits in Python), no look-around. The row readers match them with ``re.fullmatch``; the
columnar download reader matches the same strings, ``anchored``, over a whole column at once. A value
is checked as it stands in its field: a reader that trims text terms does not trim these.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

# The largest gbifID PostgreSQL's bigint holds.
MAX_GBIF_ID = 2**63 - 1
# Years a record may carry; anything outside is a typo in the source, refused rather than loaded.
YEAR_RANGE = (1600, 2100)
# Each coordinate term with its limit in degrees.
COORDINATE_TERMS = (("decimalLatitude", 90.0), ("decimalLongitude", 180.0))
# GBIF's flag for records published at 0,0: kept, but without a geometry.
ZERO_COORDINATE = "ZERO_COORDINATE"

# At most 19 digits (bigint) and 4 (a year): Python's int() refuses very long digit strings outright.
GBIF_ID_PATTERN = r"[0-9]{1,19}"
YEAR_PATTERN = r"[0-9]{1,4}"
# Other whole numbers a record carries (taxonKey, speciesKey, acceptedTaxonKey): within bigint.
WHOLE_NUMBER_PATTERN = r"-?[0-9]{1,18}"
# What Python and PostgreSQL read as the same double. float() alone also takes "nan", "inf", "1_0", " 1",
# "+1", "1.", ".5" and other scripts' digits; PostgreSQL refuses "1e-400" (underflow), which float()
# reads as 0.0. Two exponent digits keep every match far from both ends of a double. GBIF writes
# coordinates as Java doubles: "-41.5", "147.123456", "1.0E-4".
DECIMAL_PATTERN = r"-?[0-9]{1,20}(?:\.[0-9]{1,20})?(?:[eE][-+]?[0-9]{1,2})?"

_GBIF_ID_TEXT = re.compile(GBIF_ID_PATTERN)
_YEAR_TEXT = re.compile(YEAR_PATTERN)
_WHOLE_NUMBER_TEXT = re.compile(WHOLE_NUMBER_PATTERN)
_DECIMAL_TEXT = re.compile(DECIMAL_PATTERN)


def anchored(pattern: str) -> str:
    """``pattern`` matching a whole value, for a search-style matcher (RE2's ``match_substring_regex``)."""
    return f"^(?:{pattern})$"


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


def year_text_problem(text: str, *, in_range: bool = True) -> str | None:
    """An optional year written as text: empty, or four digits in YEAR_RANGE.

    ``in_range=False`` checks the spelling only: a GBIF download leaves the range to derive, which refuses
    the species holding such a record rather than the whole download (GBIF's own years start at 1500).
    """
    if not text or (_YEAR_TEXT.fullmatch(text) and (not in_range or year_problem(int(text)) is None)):
        return None
    if not in_range:
        return f"expected empty or a year (up to four digits), got {text[:40]!r}"
    return f"expected empty or a year in {YEAR_RANGE[0]}..{YEAR_RANGE[1]}, got {text[:40]!r}"


def whole_number_text_problem(text: str) -> str | None:
    """An optional whole number written as text (a taxon key): empty, or digits within bigint."""
    if not text or _WHOLE_NUMBER_TEXT.fullmatch(text):
        return None
    return f"expected a whole number, got {text[:40]!r}"


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


def coordinate_texts_problem(texts: Iterable[tuple[str, str, float]]) -> tuple[str, str] | None:
    """A record's coordinates written as text, ``(name, text, limit)`` each: all empty (no place), or each a
    decimal number within its limit. The (name, problem) of the first that is neither, in the order given."""
    given = tuple(texts)
    if not any(text for _, text, _ in given):
        return None
    for name, text, limit in given:
        if not text:
            return name, "missing while the other coordinate is present"
        problem = decimal_text_problem(text, limit)
        if problem:
            return name, problem
    return None


def published_at_zero(
    latitude: float | None, longitude: float | None, issues: list[str] | tuple[str, ...]
) -> bool:
    """A record GBIF flags, or that sits exactly at 0,0: its coordinates are a placeholder, not a place."""
    return (latitude == 0 and longitude == 0) or ZERO_COORDINATE in issues
