"""make bench, verification: every partition's fingerprint recomputed (``verify_target``) against the
least psql does with the same rows: a bare ``SELECT count(*)`` plus a hash scan
(``sum(hashtext(t::text))`` over every row), each timed as its own psql process.

The rows are one species of occurrences loaded through ``load_occurrences`` from a generated derived CSV
(bench/shared/inputs.py), in the bench's scratch warehouse; after the load, ``VACUUM ANALYZE`` (so neither
side pays for hint bits or a cold planner) and one untimed pass of each. Plain ``make bench`` runs it
(``--verify-sizes``); its figures: bench/results/verification.md and .json.
"""

from __future__ import annotations

import os
import subprocess  # noqa: S404  # psql is run as a user runs it
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from bench.shared.bench_species import forget_occurrences, load_project
from bench.shared.inputs import write_derived_csv
from bench.shared.scratch import libpq_environment
from bench.shared.targets import RATIO_HEADER, Target, ratio_rows, verdicts
from bench.shared.timing import ratio
from surveillance_pipeline.core.fingerprints import verify_target
from surveillance_pipeline.occurrences.load import OCCURRENCES

COUNT = "SELECT count(*) FROM occurrences"
HASH_SCAN = "SELECT sum(hashtext(t::text)) FROM occurrences AS t"
TARGETS: dict[str, Target] = {
    "verify_vs_psql_floor": ("verification / (count + hash scan in psql), largest size", "<=", 1.5),
}


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


def measure_verification(url: str, work: Path, rows: int, reps: int) -> dict[str, Any]:
    """Verification of ``rows`` occurrences against the psql floor, ``reps`` alternating pairs (medians)."""
    path = write_derived_csv(work / f"derived-{rows}-verify.csv", rows, variant=0)
    url_environment = libpq_environment(url)
    with psycopg.connect(url, autocommit=True) as conn:
        forget_occurrences(conn)
        load_project(conn, path, None)
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
        forget_occurrences(conn)
    verified.sort()
    floors.sort()
    return {"rows": rows, "verify": verified, "floor": floors}


def measure(url: str, work: Path, sizes: list[int], reps: int) -> dict[str, Any]:
    """The section at each size, in the scratch warehouse ``url`` (the bench species' rows replaced)."""
    section: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "reps": reps,
        "load_before": [round(x, 2) for x in os.getloadavg()],
        "sizes": [measure_verification(url, work, rows, reps) for rows in sizes],
        "load_after": [round(x, 2) for x in os.getloadavg()],
    }
    section["ratios"] = ratios(section)
    section["verdicts"] = verdicts(TARGETS, section["ratios"])
    return section


def median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def ratios(section: dict[str, Any]) -> dict[str, float]:
    """Verification over its floor at the largest size measured."""
    if not section["sizes"]:
        return {}
    largest = section["sizes"][-1]
    return {"verify_vs_psql_floor": ratio(median(largest["verify"]), median(largest["floor"]))}


def markdown(section: dict[str, Any]) -> str:
    lines = [
        "## Verification against a count and a hash scan in psql",
        "",
        "Verification of a table target (`verify_target`: every partition's rows counted and hashed in one "
        "scan, compared with the fingerprints their loads recorded) against psql's least: "
        f"`{COUNT}` plus `{HASH_SCAN}`, each its own psql process ({section['date']}, "
        f"{section['reps']} alternating pairs, medians).",
        "",
        "| rows | verification s | count + hash scan in psql s | ratio |",
        "| ---: | ---: | ---: | ---: |",
    ]
    for size in section["sizes"]:
        verify, floor = median(size["verify"]), median(size["floor"])
        lines.append(f"| {size['rows']:,} | {verify:.2f} | {floor:.2f} | {verify / floor:.2f} |")
    lines += ["", *RATIO_HEADER, *ratio_rows(TARGETS, section["ratios"], {})]
    return "\n".join(lines) + "\n"
