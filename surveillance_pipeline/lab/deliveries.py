"""Lab deliveries of the devil's records, for trying the snapshot rule by hand and in tests.

    python -m surveillance_pipeline.lab.deliveries A 2026-11-02   # the lab's 2,000 devil records
    python -m surveillance_pipeline.lab.deliveries B 2026-11-09   # a week later: one year corrected
    python -m surveillance_pipeline.lab.deliveries A 2026-11-16   # A re-delivered under a new name

B differs from A in one record: the one with the lowest md5(id) among those with a year gets year - 1.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from surveillance_pipeline.core.partition_files import replace_file
from surveillance_pipeline.core.settings import data_dir
from surveillance_pipeline.gbif.licenses import normalize_license
from surveillance_pipeline.lab.gbif_client import lab_records
from surveillance_pipeline.samples.rules import md5_text
from surveillance_pipeline.snapshots.deliveries import DELIVERY_HEADER
from surveillance_pipeline.snapshots.devil import DEVIL_SLUG


def _devil_rows() -> list[tuple[int, int | None, str]]:
    rows = [(r["key"], r.get("year"), normalize_license(r["license"]) or "") for r in lab_records(DEVIL_SLUG)]
    return sorted(rows)


def _to_bytes(rows: list[tuple[int, int | None, str]]) -> bytes:
    lines = [DELIVERY_HEADER] + [f"{i},{'' if y is None else y},{lic}" for i, y, lic in rows]
    return ("\n".join(lines) + "\n").encode("utf-8")


def delivery_a() -> bytes:
    return _to_bytes(_devil_rows())


def delivery_b() -> bytes:
    rows = _devil_rows()
    corrected = min((r for r in rows if r[1] is not None), key=lambda r: (md5_text(r[0]), r[0]))
    return _to_bytes(
        [(i, y - 1 if (i, y, lic) == corrected and y is not None else y, lic) for i, y, lic in rows]
    )


DELIVERIES = {"A": delivery_a, "B": delivery_b}


def write_lab_delivery(root: Path, kind: str, date: str) -> Path:
    """Write delivery ``kind`` (A or B) as ``<root>/deliveries/sarcophilus-harrisii/<date>.csv``."""
    path = root / "deliveries" / DEVIL_SLUG / f"{date}.csv"
    replace_file(path, DELIVERIES[kind]())
    return path


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("kind", choices=sorted(DELIVERIES))
    parser.add_argument("date", help="the delivery's name, YYYY-MM-DD; the newest name is the one loaded")
    arguments = parser.parse_args()
    print(write_lab_delivery(data_dir(), arguments.kind, arguments.date))


if __name__ == "__main__":
    main()
