"""Lab daily batches: three weeks of new GBIF-shaped records, the same bytes on every machine.

python -m surveillance_pipeline.lab.batches            # writes data/batches/2026-10-01.csv ...
"""

from __future__ import annotations

import hashlib
from datetime import date, timedelta
from pathlib import Path

from surveillance_pipeline.core.partition_files import replace_file
from surveillance_pipeline.core.settings import data_dir
from surveillance_pipeline.gbif.licenses import LICENSES
from surveillance_pipeline.gbif.registry import load_registry
from surveillance_pipeline.ledger.feed import BATCH_HEADER, batch_path

FIRST_DAY = date(2026, 10, 1)
DAYS = 21
# gbifIDs of the feed live in a band of their own, well away from the lab's occurrence ids.
ID_BASE = 6_000_000_000


def _draw(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256("|".join(map(str, ("batch", *parts))).encode()).digest()[:8], "big")


def lab_batch(day_index: int) -> bytes:
    """The batch of day ``FIRST_DAY + day_index``: 40 to 79 records, sorted by id."""
    registry = load_registry()
    lines = [BATCH_HEADER]
    for n in range(40 + _draw(day_index, "size") % 40):
        gbif_id = ID_BASE + day_index * 1_000 + n
        species = registry[_draw(gbif_id, "species") % len(registry)]
        year = "" if _draw(gbif_id, "no-year") % 20 == 0 else str(2000 + _draw(gbif_id, "year") % 26)
        if _draw(gbif_id, "no-coordinates") % 25 == 0:
            longitude = latitude = ""
        else:
            longitude = f"{144.5 + (_draw(gbif_id, 'lon') % 4_000_000) / 1_000_000:.6f}"
            latitude = f"{-43.6 + (_draw(gbif_id, 'lat') % 4_000_000) / 1_000_000:.6f}"
        license_name = LICENSES[_draw(gbif_id, "license") % len(LICENSES)]
        lines.append(f"{gbif_id},{species.slug},{year},{longitude},{latitude},{license_name}")
    return ("\n".join(lines) + "\n").encode("utf-8")


def lab_batch_days() -> list[str]:
    return [(FIRST_DAY + timedelta(days=i)).isoformat() for i in range(DAYS)]


def write_lab_batches(root: Path) -> list[Path]:
    """Write every lab batch under ``<root>/batches/`` (unchanged bytes on a second call)."""
    written = []
    for day_index, day in enumerate(lab_batch_days()):
        path = batch_path(root / "batches", day)
        replace_file(path, lab_batch(day_index))
        written.append(path)
    return written


if __name__ == "__main__":
    for path in write_lab_batches(data_dir()):
        print(path)
