"""Delivered files (``data/deliveries/<slug>/<YYYY-MM-DD>.csv``): ``id,year,license`` lines, checked.

The newest delivery is the one whose file name sorts last. Every line is checked before anything is
loaded, and a bad one is named by file, line and field.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from surveillance_pipeline.core.errors import InputError, text_lines
from surveillance_pipeline.core.keys import sha256_hex
from surveillance_pipeline.gbif.licenses import LICENSES
from surveillance_pipeline.gbif.rules import gbif_id_text_problem, year_text_problem

DELIVERY_HEADER = "id,year,license"


@dataclass(frozen=True)
class Delivery:
    path: Path
    data: bytes
    rows: int

    @property
    def sha256(self) -> str:
        return sha256_hex(self.data)


def newest_delivery(folder: Path) -> Path | None:
    """The delivery whose name sorts last, or None when the folder has none."""
    if not folder.is_dir():
        return None
    candidates = sorted(folder.glob("*.csv"))
    return candidates[-1] if candidates else None


def read_delivery(path: Path) -> Delivery:
    """The delivery's bytes after checking every line; InputError names the file, line and field."""
    if path.is_symlink() or not path.is_file():
        raise InputError(
            path, "file", None, "a delivery must be a regular file (not a directory or a symlink)"
        )
    data = path.read_bytes()
    lines = text_lines(path, data, DELIVERY_HEADER.split(","))
    if not lines or lines[0] != DELIVERY_HEADER:
        found = lines[0] if lines else "an empty file"
        raise InputError(path, "line 1", None, f"expected the header {DELIVERY_HEADER!r}, found {found!r}")
    if len(lines) == 1:
        # A delivery is the whole snapshot: loading an empty one would empty the table.
        raise InputError(path, "line 2", None, "no records after the header")
    seen: dict[int, int] = {}
    for number, line in enumerate(lines[1:], start=2):
        fields = line.split(",")
        if len(fields) != 3:
            raise InputError(
                path, f"line {number}", None, f"expected 3 fields (id,year,license), found {len(fields)}"
            )
        raw_id, raw_year, license_name = fields
        problem = gbif_id_text_problem(raw_id)
        if problem:
            raise InputError(path, f"line {number}", "id", problem)
        gbif_id = int(raw_id)
        if gbif_id in seen:
            raise InputError(
                path, f"line {number}", "id", f"duplicate id {gbif_id}, first on line {seen[gbif_id]}"
            )
        seen[gbif_id] = number
        problem = year_text_problem(raw_year)
        if problem:
            raise InputError(path, f"line {number}", "year", problem)
        if license_name not in LICENSES:
            raise InputError(path, f"line {number}", "license", f"unknown license {license_name!r}")
    return Delivery(path, data, len(lines) - 1)
