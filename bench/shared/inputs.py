"""GBIF-shaped bench inputs: derived CSVs and raw snapshots of any size, the same bytes on every machine.

Values come from integer arithmetic on the row number (a multiplicative scramble, no ``random``, no
``hash()``), so a rerun of the bench loads exactly the same bytes. Ids ascend, as a derived file's do.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from surveillance_pipeline.gbif.licenses import LICENSES
from surveillance_pipeline.gbif.raw_snapshots import RawSnapshot
from surveillance_pipeline.gbif.registry import Species
from surveillance_pipeline.occurrences.derive import DERIVED_COLUMNS

# Knuth's multiplicative constant: spreads consecutive row numbers over the whole 32-bit range.
SCRAMBLE = 2_654_435_761
FIRST_ID = 4_000_000_000
ID_STEP = 7
LICENSE_URIS = {
    "CC0 1.0": "http://creativecommons.org/publicdomain/zero/1.0/legalcode",
    "CC BY 4.0": "http://creativecommons.org/licenses/by/4.0/legalcode",
    "CC BY-NC 4.0": "http://creativecommons.org/licenses/by-nc/4.0/legalcode",
}
BLOCK_ROWS = 100_000


def _scramble(row: int, salt: int) -> int:
    return ((row + salt) * SCRAMBLE) & 0xFFFFFFFF


def occurrence_values(
    row: int, variant: int
) -> tuple[int, int | None, float | None, float | None, str | None]:
    """(id, year, longitude, latitude, license) of row ``row``; ``variant`` changes years only."""
    mix = _scramble(row, 0)
    year = None if mix % 50 == 0 else 1950 + (mix + variant * 7) % 76
    if mix % 20 == 1:
        longitude = latitude = None
    else:
        # Tasmania, five decimals, as many publishers round.
        longitude = round(144.5 + (_scramble(row, 1) % 400_000) / 100_000, 5)
        latitude = round(-43.6 + (_scramble(row, 2) % 400_000) / 100_000, 5)
    license_name = None if mix % 100 == 3 else LICENSES[mix % len(LICENSES)]
    return FIRST_ID + row * ID_STEP, year, longitude, latitude, license_name


def _csv_lines(rows: int, variant: int) -> Iterator[str]:
    yield ",".join(DERIVED_COLUMNS) + "\n"
    for row in range(rows):
        gbif_id, year, longitude, latitude, license_name = occurrence_values(row, variant)
        yield (
            f"{gbif_id},{'' if year is None else year},"
            f"{'' if longitude is None else repr(longitude)},{'' if latitude is None else repr(latitude)},"
            f"{license_name or ''}\n"
        )


def write_derived_csv(path: Path, rows: int, variant: int = 0) -> Path:
    """A derived-CSV-shaped file of ``rows`` records (written once; reused when already there)."""
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.staging")
    with staging.open("w", encoding="utf-8", newline="") as handle:
        block: list[str] = []
        for line in _csv_lines(rows, variant):
            block.append(line)
            if len(block) >= BLOCK_ROWS:
                handle.write("".join(block))
                block.clear()
        handle.write("".join(block))
    staging.replace(path)
    return path


def raw_snapshot(species: Species, rows: int, first_row: int) -> RawSnapshot:
    """A raw snapshot of ``rows`` GBIF search records for ``species`` (ids disjoint per ``first_row``)."""
    records: list[dict[str, Any]] = []
    for row in range(first_row, first_row + rows):
        gbif_id, year, longitude, latitude, license_name = occurrence_values(row, 0)
        record: dict[str, Any] = {
            "key": gbif_id,
            "gbifID": str(gbif_id),
            "issues": [],
            "scientificName": species.scientific_name,
            "species": species.scientific_name,
            "license": LICENSE_URIS[license_name] if license_name else None,
        }
        if species.taxon_key is not None:
            record.update(
                taxonKey=species.taxon_key, speciesKey=species.taxon_key, acceptedTaxonKey=species.taxon_key
            )
        if year is not None:
            record["year"] = year
        if longitude is not None:
            record.update(decimalLongitude=longitude, decimalLatitude=latitude)
        records.append(record)
    return RawSnapshot(species.request(), "2026-01-01T00:00:00Z", "bench", records)


def trivial_cli_command(dagster: str) -> list[str]:
    """One ``dagster asset materialize`` of a trivial asset: the reference every CLI timing is set against."""
    # A program of its own at bench/'s top, which dagster loads by file.
    definitions = Path(__file__).resolve().parents[1] / "trivial_definitions.py"
    return [dagster, "asset", "materialize", "-f", str(definitions), "--select", "trivial"]
