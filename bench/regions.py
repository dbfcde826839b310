"""make bench, regions (``--only-regions``): ``refresh_region_assignment`` against its limit.

The limit is one PostGIS statement, ``INSERT INTO`` a table shaped and indexed like region_assignment
``SELECT`` from occurrences (and geocoded points): the project's own statement, alone, into a plain table,
so the ratio is what the refresh around it costs (the DELETE of the old rows, the watch's triggers, the
fingerprint, the state row). The plain statement a user would write first (point by point: the covering
region by the GiST index, else the least spheroid distance among the 8 nearest by ``<->``) is timed too, up
to ``naive_max_rows`` (on Natural Earth it is ~5x slower than the project, ~25 s per 100k records), and
its rows are compared with the project's (EXCEPT ALL both ways): a statement that gives other rows would
not be the same work.

One bench species per size in a scratch database, its points generated in PostgreSQL (seeded
ST_GeneratePoints): most inside the layer's regions, a share in the sea off their coast, a few without
coordinates (a third of those geocoded). Two layers: the lab's ten districts, and Natural Earth's admin-1
(all 100 features loaded, as a user would configure the file; the points in the Australian states).
Each size loads once; then the project (a real reload: its state row is forgotten first) and the limit
alternate, medians quoted. The fingerprint the refresh takes after its rows, and the limit into a table
with the watch's triggers (core/fingerprints.py), are timed on their own too. The section's figures:
bench/results/regions.md and .json.
"""

from __future__ import annotations

import gzip
import os
import resource
import statistics
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from bench.shared.report import write_section
from surveillance_pipeline.core.fingerprints import mark_refreshing, partition_fingerprint, watch_table
from surveillance_pipeline.core.keys import sha256_hex
from surveillance_pipeline.core.refresh import ensure_state_tables, refresh_partition
from surveillance_pipeline.core.sql_files import load_sql
from surveillance_pipeline.lab.districts import lab_layer_path
from surveillance_pipeline.occurrences.load import OccurrenceRules, load_occurrences
from surveillance_pipeline.places.geocoded import GEOCODED_LOCALITIES
from surveillance_pipeline.places.regions import (
    NO_JIT,
    REGION_ASSIGNMENT,
    REGIONS,
    RegionLayer,
    insert_assignments,
    load_regions,
    refresh_region_assignment,
)
from surveillance_pipeline_tests.support.paths import CARRIED_DATA
from surveillance_pipeline_tests.support.scratch_databases import scratch_database
from surveillance_pipeline_tests.support.species import synthetic_species

PACKAGE = "bench"
RUN_ID = "bench-regions"
# Not a registry species: the bench's rows can never be mistaken for the lab's.
SPECIES = synthetic_species(900_002, "bench-regions", "Benchmarkia regionalis", "bench")
POINTS = "bench_region_points"
LIMIT = "region_assignment_limit"
NAIVE = "region_assignment_naive"
WATCHED_LIMIT = "region_assignment_limit_watched"
# Carried in the repository for the tests (gzipped when large), as ../shared/data lays it out.
NATURAL_EARTH = "regions/naturalearth-admin1-50m/ne_50m_admin_1_states_provinces.json"
# Shares of the records: in the sea off the coast, and without coordinates; the rest inside a region.
SEA_SHARE = 0.06
MISSING_SHARE = 0.03
SEA_BAND_DEGREES = 0.25
# How many index-nearest regions the plain statement measures on the spheroid.
LIMIT_CANDIDATES = 8
FIRST_ID = 6_000_000_000


@dataclass(frozen=True)
class BenchLayer:
    # What --region-layers calls it.
    key: str
    name: str
    layer: RegionLayer
    # The regions the points are generated in (a LIKE pattern over region_id).
    regions: str


def layers(work: Path) -> list[BenchLayer]:
    carried = CARRIED_DATA / NATURAL_EARTH
    path = work / Path(NATURAL_EARTH).name
    if carried.exists():
        path.write_bytes(carried.read_bytes())
    else:
        path.write_bytes(gzip.decompress(carried.with_name(f"{carried.name}.gz").read_bytes()))
    natural_earth = RegionLayer(path, id_property="iso_3166_2", name_property="name")
    return [
        BenchLayer("lab", "lab districts (10)", RegionLayer(lab_layer_path()), "%"),
        BenchLayer("natural-earth", "Natural Earth admin-1 (100), points in AU", natural_earth, "AU-%"),
    ]


def log(message: str) -> None:
    print(f"[bench regions {datetime.now(UTC):%H:%M:%S}] {message}", file=sys.stderr, flush=True)


def peak_rss_mb() -> float:
    """This process's peak resident set so far (Linux reports kilobytes)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def load_bench_species(conn: psycopg.Connection, work: Path, bench: BenchLayer, rows: int, seed: int) -> int:
    """Generate the species' points, load them through load_occurrences and geocoded_localities' refresh."""
    points = sql.Identifier(POINTS)
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(points))
    sea = round(rows * SEA_SHARE)
    missing = round(rows * MISSING_SHARE)
    conn.execute(
        load_sql(PACKAGE, "create_region_bench_points").format(table=points),
        {
            "regions": bench.regions,
            "inside": rows - sea - missing,
            "sea": sea,
            "missing": missing,
            "band": SEA_BAND_DEGREES,
            "seed": seed,
            "first_id": FIRST_ID,
        },
    )
    derived = work / f"regions-{rows}-{seed}.csv"
    with derived.open("wb") as handle, conn.cursor() as cursor:
        with cursor.copy(load_sql(PACKAGE, "copy_region_bench_records").format(table=points)) as copy:
            for block in copy:
                handle.write(block)
    outcome = load_occurrences(conn, species=SPECIES, derived=derived, rules=OccurrenceRules(), run_id=RUN_ID)
    derived.unlink()

    def replace_geocoded(connection: psycopg.Connection) -> int:
        geocoded = sql.Identifier(GEOCODED_LOCALITIES.name)
        connection.execute(
            sql.SQL("DELETE FROM {} WHERE species_id = %s").format(geocoded), [SPECIES.species_id]
        )
        return connection.execute(
            load_sql(PACKAGE, "insert_region_bench_geocoded").format(geocoded=geocoded, table=points),
            {"species_id": SPECIES.species_id},
        ).rowcount

    refresh_partition(
        conn,
        target=GEOCODED_LOCALITIES,
        partition_key=SPECIES.slug,
        parts=GEOCODED_LOCALITIES.key_parts(sha256_hex(f"{rows}:{seed}".encode()), {}),
        replace_rows=replace_geocoded,
        run_id=RUN_ID,
        partition_value=SPECIES.species_id,
    )
    conn.execute(sql.SQL("DROP TABLE {}").format(points))
    conn.execute("VACUUM ANALYZE occurrences")
    conn.execute("VACUUM ANALYZE geocoded_localities")
    return outcome.rows


def create_limit_tables(conn: psycopg.Connection) -> None:
    """Empty tables shaped and indexed like region_assignment; the second watched as every target is."""
    for name in (LIMIT, WATCHED_LIMIT, NAIVE):
        table = sql.Identifier(name)
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table))
        conn.execute(REGION_ASSIGNMENT.create_statement(table))
    watch_table(conn, REGION_ASSIGNMENT, WATCHED_LIMIT)


def run_project(conn: psycopg.Connection, layer: RegionLayer) -> float:
    """One real reload: the state row forgotten, so the refresh deletes and rewrites the species' rows."""
    conn.execute(
        "DELETE FROM target_state WHERE target = %s AND partition_key = %s",
        [REGION_ASSIGNMENT.name, SPECIES.slug],
    )
    started = time.perf_counter()
    outcome = refresh_region_assignment(conn, species=SPECIES, layer=layer, run_id=RUN_ID)
    seconds = time.perf_counter() - started
    if outcome.action != "loaded":
        raise RuntimeError(f"expected a reload, got {outcome.action} ({outcome.reason})")
    return seconds


def run_limit(conn: psycopg.Connection, table_name: str, watched: bool) -> float:
    """The project's statement alone into ``table_name`` (emptied first, untimed)."""
    table = sql.Identifier(table_name)
    conn.execute(sql.SQL("TRUNCATE {}").format(table))
    started = time.perf_counter()
    with conn.transaction():
        conn.execute(NO_JIT)
        if watched:
            mark_refreshing(conn)
        conn.execute(insert_assignments(table), {"species_id": SPECIES.species_id})
    return time.perf_counter() - started


def run_naive(conn: psycopg.Connection) -> float:
    table = sql.Identifier(NAIVE)
    conn.execute(sql.SQL("TRUNCATE {}").format(table))
    statement = load_sql(PACKAGE, "insert_region_assignment_naive").format(
        table=table,
        occurrences=sql.Identifier("occurrences"),
        geocoded=sql.Identifier(GEOCODED_LOCALITIES.name),
        regions=sql.Identifier(REGIONS.name),
    )
    started = time.perf_counter()
    with conn.transaction():
        conn.execute(NO_JIT)
        conn.execute(statement, {"species_id": SPECIES.species_id, "k": LIMIT_CANDIDATES})
    return time.perf_counter() - started


def time_fingerprint(conn: psycopg.Connection) -> float:
    started = time.perf_counter()
    partition_fingerprint(conn, REGION_ASSIGNMENT, str(SPECIES.species_id))
    return time.perf_counter() - started


def differences(conn: psycopg.Connection, other: str) -> tuple[int, int]:
    """Rows only the project's table holds, and rows only ``other`` holds."""
    row = conn.execute(
        load_sql(PACKAGE, "select_region_assignment_differences").format(
            project=sql.Identifier(REGION_ASSIGNMENT.name), limit=sql.Identifier(other)
        ),
        {"species_id": SPECIES.species_id},
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def measure_size(
    url: str, work: Path, bench: BenchLayer, rows: int, reps: int, seed: int, naive_max_rows: int, warmup: int
) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        ensure_state_tables(conn)
        load_regions(conn, bench.layer, RUN_ID)
        log(f"{bench.name}: generating and loading {rows:,} records")
        loaded = load_bench_species(conn, work, bench, rows, seed)
        create_limit_tables(conn)
        # The first run of the project is a first load into an empty table, and the first of each
        # statement a first planner look: a warm-up pair makes every timed reload replace rows, as a
        # user's does (at 5M, with --region-warmup 0, the first pair pays for that instead).
        for _ in range(warmup):
            run_project(conn, bench.layer)
            run_limit(conn, LIMIT, watched=False)
        project, limit, watched, fingerprint = [], [], [], []
        for rep in range(reps):
            log(f"{bench.name}, {rows:,}: pair {rep + 1} of {reps}")
            project.append(run_project(conn, bench.layer))
            limit.append(run_limit(conn, LIMIT, watched=False))
            watched.append(run_limit(conn, WATCHED_LIMIT, watched=True))
            fingerprint.append(time_fingerprint(conn))
        only_project, only_limit = differences(conn, LIMIT)
        naive: list[float] = []
        naive_differ = None
        if rows <= naive_max_rows:
            naive.append(run_naive(conn))
            naive_differ = differences(conn, NAIVE)
        assigned = conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE method = 'nearest') FROM region_assignment "
            "WHERE species_id = %s",
            [SPECIES.species_id],
        ).fetchone()
        assert assigned is not None
        conn.execute(
            sql.SQL("DROP TABLE {}, {}, {}").format(
                sql.Identifier(LIMIT), sql.Identifier(WATCHED_LIMIT), sql.Identifier(NAIVE)
            )
        )
    return {
        "layer": bench.name,
        "records": rows,
        "loaded": loaded,
        "assigned": int(assigned[0]),
        "nearest": int(assigned[1]),
        "only_project": only_project,
        "only_limit": only_limit,
        "project": sorted(project),
        "limit": sorted(limit),
        "limit_watched": sorted(watched),
        "fingerprint": sorted(fingerprint),
        "naive": naive,
        "naive_differ": naive_differ,
        "peak_rss_mb": round(peak_rss_mb(), 1),
    }


def measure_regions(
    server_url: str,
    work: Path,
    sizes: list[int],
    reps: int,
    seed: int,
    naive_max_rows: int,
    warmup: int,
    chosen: list[str],
) -> dict[str, Any]:
    results: list[dict[str, Any]] = []
    load_before = [round(x, 2) for x in os.getloadavg()]
    for bench in layers(work):
        if chosen and bench.key not in chosen:
            continue
        for rows in sizes:
            with scratch_database(server_url, f"surveillance_bench_regions_{os.getpid()}") as url:
                results.append(measure_size(url, work, bench, rows, reps, seed, naive_max_rows, warmup))
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "load_before": load_before,
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "reps": reps,
        "warmup": warmup,
        "layers": chosen,
        "seed": seed,
        "sizes": results,
    }


def _differ(pair: tuple[int, int] | list[int] | None) -> str:
    if pair is None:
        return "-"
    return "none" if tuple(pair) == (0, 0) else f"{pair[0]} / {pair[1]}"


def markdown(section: dict[str, Any]) -> str:
    # Plain make bench passes its own command; --only-regions' is rebuilt from what it was asked.
    command = section.get("command") or (
        f"python -m bench --only-regions --region-sizes {','.join(str(s) for s in section['sizes_asked'])} "
        f"--reps {section['reps']} --region-warmup {section['warmup']}"
        f"{' --region-layers ' + ','.join(section['layers']) if section['layers'] else ''}"
    )
    lines = [
        "## region_assignment vs one PostGIS statement",
        "",
        f"{section['date']}; load average before {section['load_before']}, after {section['load_after']}; "
        f"medians of {section['reps']} alternating runs; seed {section['seed']}. Command: `{command}`.",
        "",
        "Project: `refresh_region_assignment`, a real reload (DELETE, the statement, fingerprint, state "
        "row). "
        "Limit: the same INSERT ... SELECT alone into a plain table like region_assignment; `+watch`: into "
        "one with the watch's triggers. Fingerprint: the hash scan the refresh takes after writing. Plain "
        f"statement: point by point, the covering region, else the least spheroid distance among the "
        f"{LIMIT_CANDIDATES} index-nearest (one run, small sizes only). Rows differ: project vs limit, "
        "project vs plain statement (EXCEPT ALL both ways). Peak RSS: the bench's Python process.",
        "",
        "| layer | records | assigned (nearest) | project s | limit s | ratio | limit+watch s "
        "| fingerprint s | plain statement s | rows differ | peak RSS MB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for size in section["sizes"]:
        project = statistics.median(size["project"])
        limit = statistics.median(size["limit"])
        naive = f"{size['naive'][0]:.2f}" if size["naive"] else "-"
        differ = f"{_differ((size['only_project'], size['only_limit']))}; {_differ(size['naive_differ'])}"
        lines.append(
            f"| {size['layer']} | {size['records']:,} | {size['assigned']:,} ({size['nearest']:,}) "
            f"| {project:.2f} | {limit:.2f} | {project / limit:.2f}x "
            f"| {statistics.median(size['limit_watched']):.2f} "
            f"| {statistics.median(size['fingerprint']):.2f} | {naive} | {differ} "
            f"| {size['peak_rss_mb']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def run_only(
    server_url: str,
    work: Path,
    out: Path,
    sizes: list[int],
    reps: int,
    *,
    seed: int = 1,
    naive_max_rows: int = 200_000,
    warmup: int = 1,
    chosen: list[str] | None = None,
) -> str:
    """``--only-regions``: the section alone, written to bench/results/regions.md and .json (and printed)."""
    section = measure_regions(server_url, work, sizes, reps, seed, naive_max_rows, warmup, chosen or [])
    section["sizes_asked"] = sizes
    return write_section(out, "regions", section, markdown(section))
