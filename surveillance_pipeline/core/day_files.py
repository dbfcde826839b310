"""Files named by a day, ``YYYY-MM-DD.csv``: the one test of such a name, for every folder that holds them.

A daily batch is named by its day, and that name becomes a Dagster partition key, a batch date in the
warehouse and a file name again. So the name is taken only in exactly that shape, with a real date:
``date.fromisoformat`` alone (Python 3.11) also reads ``20261102`` and the week date ``2026-W44-1``,
which would give two partition keys (and two file names) for one day.
"""

from __future__ import annotations

import re
from datetime import date

# ASCII digits only: ``\\d`` would also take other scripts' digits.
_DAY_FILE_NAME = re.compile(r"([0-9]{4}-[0-9]{2}-[0-9]{2})\.csv")


def day_of_file_name(name: str) -> date | None:
    """The day a file name ``YYYY-MM-DD.csv`` names; None for any other name or an impossible date."""
    match = _DAY_FILE_NAME.fullmatch(name)
    if match is None:
        return None
    try:
        return date.fromisoformat(match.group(1))
    except ValueError:  # 2026-13-01, 2026-02-30
        return None


def is_day_file_name(name: str) -> bool:
    return day_of_file_name(name) is not None
