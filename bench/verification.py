"""make bench, verification: every partition's fingerprint recomputed (``verify_target``) against the
least psql does with the same rows: a bare ``SELECT count(*)`` plus a hash scan
(``sum(hashtext(t::text))`` over every row), each timed as its own psql process.

The rows are one species of occurrences loaded through ``load_occurrences`` from a generated derived CSV
(bench/inputs.py), in the bench's scratch warehouse; after the load, ``VACUUM ANALYZE`` (so neither side
pays for hint bits or a cold planner) and one untimed pass of each.
"""

from __future__ import annotations

import os
import subprocess  # noqa: S404  # psql is run as a user runs it
import time
from pathlib import Path
from typing import Any

import psycopg

from bench.inputs import write_derived_csv
from surveillance_pipeline.core.fingerprints import verify_target
from surveillance_pipeline.occurrences.load import OCCURRENCES

COUNT = "SELECT count(*) FROM occurrences"
HASH_SCAN = "SELECT sum(hashtext(t::text)) FROM occurrences AS t"


def _psql(url_environment: dict[str, str], statement: str) -> float:
    started = time.perf_counter()
    # A fixed argv, no shell; psql from PATH, as a user runs it.
    subprocess.run(  # noqa: S603
        ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-c", statement],  # noqa: S607
        env={**os.environ, **url_environment},
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - started


def measure_verification(
    url: str, url_environment: dict[str, str], work: Path, rows: int, reps: int, load: Any, forget: Any
) -> dict[str, Any]:
    """Verification of ``rows`` occurrences against the psql floor, ``reps`` alternating pairs (medians)."""
    path = write_derived_csv(work / f"derived-{rows}-verify.csv", rows, variant=0)
    with psycopg.connect(url, autocommit=True) as conn:
        forget(conn)
        load(conn, path, None)
        conn.execute("VACUUM ANALYZE occurrences")

        def verify() -> float:
            started = time.perf_counter()
            verdicts = verify_target(conn, OCCURRENCES)
            seconds = time.perf_counter() - started
            if not verdicts or not all(v.holds for v in verdicts):
                raise RuntimeError(f"verification found a difference the bench did not make: {verdicts}")
            return seconds

        def floor() -> float:
            return _psql(url_environment, COUNT) + _psql(url_environment, HASH_SCAN)

        verify()
        floor()
        verified, floors = [], []
        for _ in range(reps):
            verified.append(verify())
            floors.append(floor())
        forget(conn)
    verified.sort()
    floors.sort()
    return {"rows": rows, "verify": verified, "floor": floors}


def median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def markdown(section: list[dict[str, Any]]) -> list[str]:
    lines = [
        "",
        "Verification of a table target (`verify_target`: every partition's rows counted and hashed in one "
        "scan, compared with the fingerprints their loads recorded) against psql's least: "
        f"`{COUNT}` plus `{HASH_SCAN}`, each its own psql process.",
        "",
        "| rows | verification s | count + hash scan in psql s | ratio |",
        "| ---: | ---: | ---: | ---: |",
    ]
    for size in section:
        verify, floor = median(size["verify"]), median(size["floor"])
        lines.append(f"| {size['rows']:,} | {verify:.2f} | {floor:.2f} | {verify / floor:.2f} |")
    return lines
