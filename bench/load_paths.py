"""make bench, the load paths: one species' occurrences through the project's own load next to the least
the machine does with the same rows.

At each size (``--sizes``, 100k and 1M rows; ``--with-10m`` adds 10M): a first load and a reload through
``load_occurrences`` against ``psql \\copy`` + ``INSERT ... SELECT`` into an identical, indexed table; a skip
(a new process, the file not hashed yet) against a sha256 of the file plus one state-row read; row-by-row
``executemany`` on a 20k slice (extrapolated), the course's loader; and over the 1M rows the md5 cap
through ``refresh_species_sample`` against its bare statement. The inputs are generated in code
(bench/shared/inputs.py), the rows loaded in the runner's scratch warehouse. Plain ``make bench`` runs it
first; its figures: bench/results/load_paths.md and .json.
"""

from __future__ import annotations

import csv
import os
import subprocess  # noqa: S404  # psql is run as the user runs it
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import psycopg2
from psycopg import sql

from bench.shared.bench_species import (
    BENCH_SPECIES,
    RUN_ID,
    create_like_occurrences,
    forget_occurrences,
    load_project,
)
from bench.shared.inputs import write_derived_csv
from bench.shared.report import log, machine
from bench.shared.scratch import libpq_environment
from bench.shared.targets import RATIO_HEADER, Target, ratio_rows, verdicts
from bench.shared.timing import Measure, median_of, ratio, repeat, runs_of
from surveillance_pipeline.core.keys import forget_hashed_files, sha256_file
from surveillance_pipeline.core.refresh import LOADED, SKIPPED, ensure_state_tables
from surveillance_pipeline.core.sql_files import load_sql
from surveillance_pipeline.samples.load import PACKAGE as SAMPLES_PACKAGE
from surveillance_pipeline.samples.load import refresh_species_sample

PACKAGE = "bench"
NAIVE_ROWS = 20_000
SAMPLE_CAP = 100
SAMPLE_ROWS = 1_000_000
TARGETS: dict[str, Target] = {
    "refresh_vs_copy": ("refresh / \\copy path", "<=", 1.3),
    "executemany_vs_refresh": ("executemany / refresh", ">=", 15.0),
    "skip_vs_sha256_read": ("skip / (sha256 + state read)", "<=", 1.2),
    "sample_vs_bare": ("md5 cap / bare statement", "<=", 1.2),
    "growth_1m_to_10m": ("refresh 10M / 1M", "<=", 11.0),
}
# Ratios the table quotes without a target.
EXTRAS = {
    "first_load_vs_copy": "first load / \\copy path",
    "executemany_psycopg3_vs_refresh": "psycopg 3 executemany / refresh",
    "growth_100k_to_1m": "refresh 1M / 100k",
}


# ---------------------------------------------------------------------------------------------------------
# A first load, a reload, a skip and the \copy limit at one size


def load_limit(url: str, path: Path) -> None:
    """psql runs the script in a file, because its stdin carries the CSV for ``\\copy ... FROM pstdin``."""
    script = Path(__file__).with_name("sql") / "load_limit_occurrences.sql"
    with path.open("rb") as stdin:
        subprocess.run(  # noqa: S603  # fixed argv, no shell
            ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-v", f"species_id={BENCH_SPECIES.species_id}"]
            + ["-f", str(script)],
            stdin=stdin,
            env={**os.environ, **libpq_environment(url)},
            check=True,
        )


def read_rows(path: Path, limit: int) -> list[dict[str, Any]]:
    """The first ``limit`` CSV rows as the course's loader held them: dicts of Python values."""
    rows: list[dict[str, Any]] = []
    with path.open(encoding="utf-8", newline="") as handle:
        for record in csv.DictReader(handle):
            rows.append(
                {
                    "id": int(record["id"]),
                    "species_id": BENCH_SPECIES.species_id,
                    "year": int(record["year"]) if record["year"] else None,
                    "longitude": float(record["longitude"]) if record["longitude"] else None,
                    "latitude": float(record["latitude"]) if record["latitude"] else None,
                    "license": record["license"] or None,
                }
            )
            if len(rows) >= limit:
                break
    return rows


def measure_executemany(url: str, path: Path, reps: int) -> dict[str, Measure]:
    """Row-by-row INSERTs of a 20k slice: psycopg2's executemany (one round trip per row, the course's
    loader) and psycopg 3's (pipelined)."""
    rows = read_rows(path, NAIVE_ROWS)
    with psycopg.connect(url, autocommit=True) as conn:
        statement = (
            load_sql(PACKAGE, "insert_occurrence_row")
            .format(table=sql.Identifier("naive_occurrences"))
            .as_string(conn)
        )

        def reset() -> None:
            create_like_occurrences(conn, "naive_occurrences")

        def with_psycopg3() -> None:
            with conn.transaction(), conn.cursor() as cursor:
                cursor.executemany(statement, rows)

        results = {"psycopg3": repeat(reps, with_psycopg3, reset)}
        legacy = psycopg2.connect(url)
        try:

            def with_psycopg2() -> None:
                with legacy.cursor() as cursor:
                    cursor.executemany(statement, rows)
                legacy.commit()

            results["psycopg2"] = repeat(reps, with_psycopg2, reset)
        finally:
            legacy.close()
        conn.execute("DROP TABLE IF EXISTS naive_occurrences")
    return results


def measure_size(url: str, work: Path, rows: int, reps: int, with_limit: bool = True) -> dict[str, Any]:
    """First load, reload, skip and the \\copy limit for one species of ``rows`` records."""
    log(f"inputs of {rows:,} rows")
    first = write_derived_csv(work / f"derived-{rows}-a.csv", rows, variant=0)
    second = write_derived_csv(work / f"derived-{rows}-b.csv", rows, variant=1)
    result: dict[str, Any] = {"rows": rows, "csv_bytes": first.stat().st_size}
    with psycopg.connect(url, autocommit=True) as conn:
        ensure_state_tables(conn)

        log(f"{rows:,}: project first load")
        result["first_load"] = repeat(
            reps, lambda: load_project(conn, first, LOADED), lambda: forget_occurrences(conn)
        )
        # A reload replaces rows the table already holds: alternate the two inputs so every one loads.
        inputs = iter([second, first] * reps)
        log(f"{rows:,}: project reload (replace all rows of the species)")
        result["reload"] = repeat(reps, lambda: load_project(conn, next(inputs), LOADED))
        current = second if reps % 2 else first

        log(f"{rows:,}: skip vs sha256 + one state-row read")
        fast_reps = max(reps, 7)
        # As a user meets it: a new process, which has not hashed the file yet (the memo forgotten).
        result["skip"] = repeat(
            fast_reps, lambda: load_project(conn, current, SKIPPED), setup=forget_hashed_files
        )
        # What the memo saves when one process asks for the same file's sha256 again.
        result["skip_cached"] = repeat(fast_reps, lambda: load_project(conn, current, SKIPPED))

        def sha256_and_read() -> None:
            sha256_file(current)
            conn.execute(
                "SELECT job_key FROM target_state WHERE target = %s AND partition_key = %s",
                ["occurrences", BENCH_SPECIES.slug],
            ).fetchone()

        result["sha256_read"] = repeat(fast_reps, sha256_and_read)

        if not with_limit:
            return result
        log(f"{rows:,}: psql \\copy + INSERT ... SELECT into an identical table")
        result["copy_limit"] = repeat(
            reps, lambda: load_limit(url, first), lambda: create_like_occurrences(conn, "limit_occurrences")
        )
        conn.execute("DROP TABLE IF EXISTS limit_occurrences")
    return result


# ---------------------------------------------------------------------------------------------------------
# The md5 cap over the occurrences a 1M refresh left


def measure_sample(url: str, reps: int) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        held = conn.execute(
            "SELECT count(*) FROM occurrences WHERE species_id = %s", [BENCH_SPECIES.species_id]
        ).fetchone()
        occurrences = held[0] if held else 0

        def forget_sample() -> None:
            conn.execute("DELETE FROM target_state WHERE target = 'occurrence_sample'")

        def through_project() -> None:
            outcome, _ = refresh_species_sample(conn, species=BENCH_SPECIES, cap=SAMPLE_CAP, run_id=RUN_ID)
            if outcome.action != LOADED or outcome.rows != SAMPLE_CAP:
                raise RuntimeError(f"sample: {outcome}")

        # Autovacuum would otherwise visit the freshly loaded rows during whichever path runs first.
        conn.execute("VACUUM ANALYZE occurrences")
        bare_table = sql.Identifier("bare_sample")
        statement = load_sql(SAMPLES_PACKAGE, "insert_species_sample").format(
            occurrence_sample=bare_table, kept=sql.SQL("TRUE")
        )

        def fresh_bare_table() -> None:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(bare_table))
            conn.execute(load_sql(SAMPLES_PACKAGE, "create_occurrence_sample").format(table=bare_table))

        def bare() -> None:
            with conn.transaction():
                conn.execute(statement, {"species_id": BENCH_SPECIES.species_id, "cap": SAMPLE_CAP})

        log(f"md5 cap over {occurrences:,} occurrences: project and bare statement, alternating")
        # One untimed run of each first: the first statement over the fresh rows reads them cold, and
        # whichever path ran first paid for it.
        repeat(1, through_project, forget_sample)
        repeat(1, bare, fresh_bare_table)
        project, bare_measure = Measure(), Measure()
        for _ in range(reps):
            project.seconds += repeat(1, through_project, forget_sample).seconds
            bare_measure.seconds += repeat(1, bare, fresh_bare_table).seconds
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(bare_table))
    return {"occurrences": occurrences, "project": project, "bare": bare_measure}


# ---------------------------------------------------------------------------------------------------------
# The section


def measure(
    url: str, work: Path, sizes: list[int], reps: int, limit_max_rows: int, sample_reps: int
) -> dict[str, Any]:
    """Every size in the scratch warehouse ``url``, then executemany and (with 1M rows) the md5 cap."""
    section: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "postgres": "",
        "reps": reps,
        "load_before": [round(x, 2) for x in os.getloadavg()],
    }
    with psycopg.connect(url) as conn:
        version = conn.execute("SHOW server_version").fetchone()
        section["postgres"] = version[0] if version else ""
    section["sizes"] = [measure_size(url, work, rows, reps, rows <= limit_max_rows) for rows in sizes]
    log("executemany on a 20k slice")
    section["executemany"] = measure_executemany(url, work / f"derived-{sizes[0]}-a.csv", reps)
    if SAMPLE_ROWS in sizes:
        # The cap runs over the species at 1M rows, whatever size was measured last.
        with psycopg.connect(url, autocommit=True) as conn:
            load_project(conn, work / f"derived-{SAMPLE_ROWS}-a.csv", None)
        section["sample"] = measure_sample(url, sample_reps)
    section["load_after"] = [round(x, 2) for x in os.getloadavg()]
    section["ratios"] = ratios(section)
    section["verdicts"] = verdicts(TARGETS, section["ratios"])
    return section


def ratios(section: dict[str, Any]) -> dict[str, Any]:
    """The ratios the targets are stated in, at the largest size measured up to 1M."""
    sizes = section["sizes"]
    at_1m = next((s for s in sizes if s["rows"] == 1_000_000), sizes[-1])
    found: dict[str, Any] = {}
    refresh = median_of(at_1m["reload"])
    if "copy_limit" in at_1m:
        found["refresh_vs_copy"] = ratio(refresh, median_of(at_1m["copy_limit"]))
        found["refresh_rows"] = at_1m["rows"]
        found["first_load_vs_copy"] = ratio(median_of(at_1m["first_load"]), median_of(at_1m["copy_limit"]))
    naive = section["executemany"]
    found["executemany_vs_refresh"] = ratio(
        median_of(naive["psycopg2"]) * at_1m["rows"] / NAIVE_ROWS, refresh
    )
    found["executemany_psycopg3_vs_refresh"] = ratio(
        median_of(naive["psycopg3"]) * at_1m["rows"] / NAIVE_ROWS, refresh
    )
    found["skip_vs_sha256_read"] = ratio(median_of(at_1m["skip"]), median_of(at_1m["sha256_read"]))
    if "sample" in section:
        found["sample_vs_bare"] = ratio(
            median_of(section["sample"]["project"]), median_of(section["sample"]["bare"])
        )
    by_rows = {s["rows"]: s for s in sizes}
    if 1_000_000 in by_rows and 10_000_000 in by_rows:
        found["growth_1m_to_10m"] = ratio(
            median_of(by_rows[10_000_000]["reload"]), median_of(by_rows[1_000_000]["reload"])
        )
    if 100_000 in by_rows and 1_000_000 in by_rows:
        found["growth_100k_to_1m"] = ratio(
            median_of(by_rows[1_000_000]["reload"]), median_of(by_rows[100_000]["reload"])
        )
    return found


def markdown(section: dict[str, Any]) -> str:
    """The load paths' table: medians per size, executemany, the md5 cap, ratios and targets."""
    lines = [
        "## The load paths: one species' load, reload and skip against psql and a sha256",
        "",
        f"Measured {section['date']} on {section['machine']}, PostgreSQL {section['postgres'].split()[0]} "
        f"(`make bench`, {section['reps']} repetitions, "
        "medians; the machine was shared, see noise below).",
        "",
        "| rows | project first load s | project reload s | `\\copy` + INSERT s | reload µs/row | "
        "`\\copy` µs/row | skip ms | sha256 + read ms | skip ratio | skip, sha256 remembered ms |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for size in section["sizes"]:
        rows = size["rows"]
        limit = size.get("copy_limit")
        limit_seconds = f"{median_of(limit):.2f}" if limit else "not run"
        limit_per_row = f"{median_of(limit) / rows * 1e6:.2f}" if limit else ""
        skip, sha256_read = median_of(size["skip"]), median_of(size["sha256_read"])
        lines.append(
            f"| {rows:,} | {median_of(size['first_load']):.2f} | {median_of(size['reload']):.2f} | "
            f"{limit_seconds} | {median_of(size['reload']) / rows * 1e6:.2f} | {limit_per_row} | "
            f"{skip * 1e3:.1f} | {sha256_read * 1e3:.1f} | {skip / sha256_read:.2f} | "
            f"{median_of(size['skip_cached']) * 1e3:.1f} |"
        )
    naive = section["executemany"]
    lines += [
        "",
        "A skip is timed as a user meets it, in a process that has not hashed the file yet (the sha256 memo "
        "forgotten before each); the last column is the same skip when the process hashed the file before.",
        "",
        f"Row-by-row `executemany` of {NAIVE_ROWS:,} rows: psycopg2 {median_of(naive['psycopg2']):.2f} s, "
        f"psycopg 3 (pipelined) {median_of(naive['psycopg3']):.2f} s.",
    ]
    if "sample" in section:
        sample = section["sample"]
        lines.append(
            f"md5 cap {SAMPLE_CAP} over {sample['occurrences']:,} occurrences "
            f"({len(runs_of(sample['bare']))} pairs, alternating): "
            f"project {median_of(sample['project']):.2f} s, bare statement {median_of(sample['bare']):.2f} s."
        )
    lines += ["", *RATIO_HEADER, *ratio_rows(TARGETS, section["ratios"], EXTRAS)]
    lines += ["", f"Noise: load average {section['load_before']} before, {section['load_after']} after."]
    return "\n".join(lines) + "\n"
