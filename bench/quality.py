"""make bench, quality (``--only-quality``): ``refresh_occurrence_quality`` against plain PostGIS statements.

One bench species per size in a scratch database, its records a GBIF download's records file (a raw
snapshot header beside it), derived and loaded into ``occurrences`` by the project's own code. Its points are
drawn (seeded numpy) inland in Australia, a share anywhere in a box around it (coasts and sea), on Canberra,
at GBIF, without coordinates; terms are drawn likewise (a share of coarse uncertainty, fossils, old
years, GBIF issues).

The project's refresh (its DELETE, the COPY of the records file, the outliers over the sites, the one
statement, the watch's triggers, the fingerprint, the state row; a real reload: each repetition nudges
the uncertainty limit, which flags the same records) alternates with the limit: the same records file
COPY'd into a plain table, then one plain statement written as a user would (every test per record, the
spatial ones through EXISTS over the same indexed layers; no outliers, which plain SQL can do only
quadratically) into a table shaped like occurrence_quality. Medians of ``reps`` pairs, after one refresh of
the project alone that warms the caches. Each size runs in a process of its own, so its peak RSS is its
own: memory flat in the size is the point. The section's figures: bench/results/quality.md and .json.
"""

from __future__ import annotations

import gzip
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

from bench.shared.report import write_section
from surveillance_pipeline.core.keys import sha256_file
from surveillance_pipeline.core.refresh import ensure_state_tables
from surveillance_pipeline.core.sql_files import load_sql
from surveillance_pipeline.gbif.raw_snapshots import RawSnapshot
from surveillance_pipeline.gbif.records import RECORD_COLUMNS, RecordsWriter
from surveillance_pipeline.gbif.registry import DOWNLOAD_ENDPOINT
from surveillance_pipeline.occurrences.derive import derive_to_file
from surveillance_pipeline.occurrences.load import OccurrenceRules, load_occurrences, partition_table_name
from surveillance_pipeline.quality.flags import (
    INCOMING_COLUMNS,
    OCCURRENCE_QUALITY,
    refresh_occurrence_quality,
)
from surveillance_pipeline.quality.references import (
    QUALITY_REFERENCES,
    REFERENCE_CELL_DEGREES,
    ReferenceLayers,
    load_quality_references,
)
from surveillance_pipeline.quality.rules import QualityRules
from surveillance_pipeline_tests.support.scratch_databases import scratch_database
from surveillance_pipeline_tests.support.species import synthetic_species

PACKAGE = "bench"
RUN_ID = "bench-quality"
LIMIT = "occurrence_quality_limit"
TARGET_RATIO = 2.0
FIRST_ID = 7_000_000_000
# Australia's mainland, roughly: most points are drawn here and kept when on land.
BOX = (115.0, -38.0, 153.0, -12.0)
# Shares of the records: anywhere in the box (the coasts, and about 40% of it sea), without coordinates,
# on Canberra, at GBIF. The others lie inland, in cells one piece of land covers whole.
ANYWHERE, MISSING, CAPITAL, GBIF = 0.3, 0.03, 0.001, 0.0005
DATASETS = [f"{index:08d}-0000-4000-8000-000000000000" for index in range(40)]


def log(message: str) -> None:
    print(f"bench quality: {message}", file=sys.stderr, flush=True)


def _land_cells(conn: psycopg.Connection) -> np.ndarray:
    """The cells (lower-left corners) within the box that one piece of land covers whole."""
    rows = conn.execute(
        "SELECT cell_x * %(cell)s, cell_y * %(cell)s FROM quality_references WHERE layer = 'land_cells'"
        " AND cell_x * %(cell)s BETWEEN %(west)s AND %(east)s"
        " AND cell_y * %(cell)s BETWEEN %(south)s AND %(north)s ORDER BY 1, 2",
        {"cell": REFERENCE_CELL_DEGREES, "west": BOX[0], "south": BOX[1], "east": BOX[2], "north": BOX[3]},
    ).fetchall()
    return np.array(rows, dtype=np.float64).reshape(-1, 2)


def write_records(conn: psycopg.Connection, folder: Path, species: Any, rows: int, seed: int) -> Path:
    """The species' raw snapshot (a header and its records file), as gbif_raw writes one from downloads."""
    generator = np.random.default_rng(seed)
    # Most points inside cells of land (inland), the rest anywhere in the box (coasts, land and sea).
    cells = _land_cells(conn)
    inland = generator.random(rows) >= ANYWHERE
    chosen = cells[generator.integers(0, len(cells), rows)]
    longitude = np.where(
        inland,
        chosen[:, 0] + generator.random(rows) * REFERENCE_CELL_DEGREES,
        generator.uniform(BOX[0], BOX[2], rows),
    )
    latitude = np.where(
        inland,
        chosen[:, 1] + generator.random(rows) * REFERENCE_CELL_DEGREES,
        generator.uniform(BOX[1], BOX[3], rows),
    )
    longitude, latitude = np.round(longitude, 5), np.round(latitude, 5)
    special = generator.random(rows)
    longitude[special < CAPITAL] = 149.12903
    latitude[special < CAPITAL] = -35.28303
    at_gbif = (special >= CAPITAL) & (special < CAPITAL + GBIF)
    longitude[at_gbif], latitude[at_gbif] = 12.58, 55.67
    missing = generator.random(rows) < MISSING
    uncertainty = np.where(generator.random(rows) < 0.03, 20_000, generator.integers(5, 2000, rows))
    basis = np.where(generator.random(rows) < 0.01, "FOSSIL_SPECIMEN", "HUMAN_OBSERVATION")
    years = np.where(generator.random(rows) < 0.01, 1880, generator.integers(1950, 2025, rows))
    fuzzy = generator.random(rows) < 0.005
    datasets = generator.integers(0, len(DATASETS), rows)
    ids = FIRST_ID + np.arange(rows, dtype=np.int64) * 7
    position = {name: index for index, name in enumerate(RECORD_COLUMNS)}
    records = folder / f"{species.slug}.records.tsv.gz"
    with RecordsWriter(records) as writer:
        lines = []
        for index in range(rows):
            fields = [""] * len(RECORD_COLUMNS)
            fields[position["key"]] = str(int(ids[index]))
            fields[position["basisOfRecord"]] = str(basis[index])
            fields[position["countryCode"]] = "AU"
            fields[position["datasetKey"]] = DATASETS[int(datasets[index])]
            fields[position["license"]] = "CC_BY_4_0"
            fields[position["occurrenceStatus"]] = "PRESENT"
            fields[position["scientificName"]] = species.scientific_name
            fields[position["species"]] = species.scientific_name
            fields[position["taxonRank"]] = "SPECIES"
            fields[position["year"]] = str(int(years[index]))
            if not missing[index]:
                fields[position["decimalLatitude"]] = repr(float(latitude[index]))
                fields[position["decimalLongitude"]] = repr(float(longitude[index]))
                fields[position["coordinateUncertaintyInMeters"]] = repr(float(uncertainty[index]))
            if fuzzy[index]:
                fields[position["issues"]] = "TAXON_MATCH_FUZZY"
            lines.append("\t".join(fields) + "\n")
            if len(lines) == 100_000:
                writer.write_lines(lines)
                lines = []
        writer.write_lines(lines)
        records_sha256 = writer.commit()
    request = {
        "endpoint": DOWNLOAD_ENDPOINT,
        "downloads": [],
        "area": {"country": species.country, "stateProvince": species.state_province},
        "taxon": species.taxon_filter(),
    }
    header = RawSnapshot(request, "2026-12-06T00:00:00Z", "bench", [], records.name, records_sha256, rows)
    raw = folder / f"{species.slug}.json"
    raw.write_bytes(header.to_bytes())
    return raw


def run_limit(conn: psycopg.Connection, raw: Path, species: Any) -> float:
    """The plain statements: the records file COPY'd in, then one INSERT of every test per record."""
    snapshot_records = raw.with_name(f"{species.slug}.records.tsv.gz")
    started = time.perf_counter()
    with conn.transaction():
        conn.execute(sql.SQL("TRUNCATE {}").format(sql.Identifier(LIMIT)))
        columns = sql.SQL(", ").join(sql.SQL("{} text").format(sql.Identifier(n)) for n in INCOMING_COLUMNS)
        conn.execute(
            load_sql("surveillance_pipeline.quality", "create_incoming_quality_terms").format(columns=columns)
        )
        names = sql.SQL(", ").join(sql.Identifier(n) for n in RECORD_COLUMNS)
        with (
            gzip.open(snapshot_records, "rb") as handle,
            conn.cursor().copy(
                sql.SQL("COPY incoming_quality_terms ({}) FROM STDIN (FORMAT text, NULL '')").format(names)
            ) as copy,
        ):
            while block := handle.read(1 << 20):
                copy.write(block)
        conn.execute("SET LOCAL jit = off")
        conn.execute(
            load_sql(PACKAGE, "insert_quality_limit").format(
                table=sql.Identifier(LIMIT),
                occurrences=sql.Identifier(partition_table_name(species.species_id)),
                references=sql.Identifier(QUALITY_REFERENCES.name),
            ),
            {"species_id": species.species_id},
        )
    return time.perf_counter() - started


def measure_size(server_url: str, work: Path, rows: int, reps: int, seed: int) -> dict[str, Any]:
    """One size, in this process: the project's refresh and the limit, alternating."""
    species = synthetic_species(900_300, f"bench-quality-{rows}", "Benchmarkia qualitatis", "bench")
    species = type(species)(**{**vars(species), "country": "AU", "state_province": ""})
    with (
        scratch_database(server_url, f"bench_quality_{os.getpid()}") as url,
        psycopg.connect(url, autocommit=True) as conn,
    ):
        ensure_state_tables(conn)
        load_quality_references(conn, ReferenceLayers(), RUN_ID)
        started = time.perf_counter()
        raw = write_records(conn, work, species, rows, seed)
        log(f"{rows:,} records written in {time.perf_counter() - started:.1f} s")
        derived = work / f"{species.slug}.csv"
        derive_to_file(raw, species, derived)
        load_occurrences(conn, species=species, derived=derived, rules=OccurrenceRules(), run_id=RUN_ID)
        project, limit = [], []
        for rep in range(reps + 1):  # the first pair warms the caches and is not kept
            # A limit a hair over the default: the same records flagged, another key, so a real reload.
            rules = QualityRules.from_settings(parameters={"uncertainty": {"limit_m": 10_000.0 + 0.1 * rep}})
            began = time.perf_counter()
            outcome = refresh_occurrence_quality(
                conn, species=species, raw_path=raw, rules=rules, layers=ReferenceLayers(), run_id=RUN_ID
            )
            took = time.perf_counter() - began
            assert outcome.action == "loaded", outcome
            if rep and not _exists(conn, LIMIT):
                conn.execute(
                    sql.SQL("CREATE TABLE {} (LIKE {} INCLUDING ALL)").format(
                        sql.Identifier(LIMIT), sql.Identifier(OCCURRENCE_QUALITY.name)
                    )
                )
            if not rep:  # the warm-up: the project alone (the limit reads the same pages after it)
                log(f"{rows:,}: project {took:.1f} s (warm-up)")
                continue
            limit_took = run_limit(conn, raw, species)
            project.append(took)
            limit.append(limit_took)
            log(f"{rows:,}: project {took:.1f} s, limit {limit_took:.1f} s")
        flagged = conn.execute(
            "SELECT count(*) FILTER (WHERE first_flag IS NOT NULL) FROM occurrence_quality"
        ).fetchone()
        differing = conn.execute(
            load_sql(PACKAGE, "select_quality_limit_differences").format(table=sql.Identifier(LIMIT))
        ).fetchone()
    return {
        "rows": rows,
        "project_s": round(statistics.median(project), 2),
        "limit_s": round(statistics.median(limit), 2),
        "ratio": round(statistics.median(project) / statistics.median(limit), 3),
        "project_each_s": [round(x, 2) for x in project],
        "limit_each_s": [round(x, 2) for x in limit],
        "flagged": int(flagged[0]) if flagged else 0,
        "rows_differing_but_outliers": int(differing[0]) if differing else -1,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "records_file_sha256": sha256_file(raw.with_name(f"{species.slug}.records.tsv.gz")),
    }


def _exists(conn: psycopg.Connection, table: str) -> bool:
    row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", [table]).fetchone()
    return bool(row and row[0])


# Real GBIF search answers (the workplace's recorded responses; the carried subset without ../shared).
SHARED_BODIES = Path(__file__).resolve().parents[2] / "shared" / "data" / "gbif"
BUFFER_COLUMNS = ("records", "off land", "> 1 km", "> 2 km", "> 5 km", "off country", "> 5 km", "> 10 km")


def real_plant_points() -> list[tuple[int, str, float, float, str]]:
    """(key, species, longitude, latitude, countryCode) of every distinct plant record with a point in
    the recorded GBIF search answers."""
    seen: dict[int, tuple[int, str, float, float, str]] = {}
    for path in sorted(SHARED_BODIES.glob("api-*/bodies/*.json")):
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        results = document.get("results") if isinstance(document, dict) else None
        for record in results if isinstance(results, list) else []:
            if not isinstance(record, dict) or record.get("kingdom") != "Plantae":
                continue
            if "decimalLatitude" in record and "decimalLongitude" in record and record.get("key") not in seen:
                seen[record["key"]] = (
                    record["key"],
                    str(record.get("species") or ""),
                    float(record["decimalLongitude"]),
                    float(record["decimalLatitude"]),
                    str(record.get("countryCode") or ""),
                )
    return [seen[key] for key in sorted(seen)]


def measure_buffers(server_url: str) -> dict[str, Any]:
    """How the sea and country tests' buffers change what real (mostly coastal) records they flag."""
    points = real_plant_points()
    with (
        scratch_database(server_url, f"bench_quality_buffers_{os.getpid()}") as url,
        psycopg.connect(url, autocommit=True) as conn,
    ):
        ensure_state_tables(conn)
        load_quality_references(conn, ReferenceLayers(), RUN_ID)
        conn.execute(
            "CREATE TABLE real_points (key bigint, species text, lon float8, lat float8, country text)"
        )
        with conn.cursor().copy("COPY real_points FROM STDIN") as copy:
            for point in points:
                copy.write_row(point)
        counts = conn.execute(
            load_sql(PACKAGE, "select_quality_buffer_effect").format(points=sql.Identifier("real_points"))
        ).fetchone()
    species: dict[str, int] = {}
    for _, name, _, _, _ in points:
        species[name] = species.get(name, 0) + 1
    return {"counts": list(counts or ()), "species": species}


def markdown(section: dict[str, Any]) -> str:
    lines = [
        "# occurrence_quality against plain PostGIS statements",
        "",
        f"`{section['command']}`, {section['date']}, {section['machine']}; medians of "
        f"{section['reps']} pair{'' if section['reps'] == 1 else 's'} after a warm-up refresh. Target: the "
        f"project within {TARGET_RATIO}x of the limit. Peak RSS: the bench process's, which also draws the "
        "records.",
        "",
        "| records | project | limit | ratio | flagged | rows that differ (outliers aside) | peak RSS |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for size in section["sizes"]:
        verdict = "met" if size["ratio"] <= TARGET_RATIO else "MISSED"
        times = f"{size['project_s']} s | {size['limit_s']} s | {size['ratio']}x ({verdict})"
        lines.append(
            f"| {size['rows']:,} | {times} | {size['flagged']:,} | {size['rows_differing_but_outliers']} "
            f"| {size['peak_rss_mb']} MB |"
        )
    buffers = section.get("buffers")
    if buffers:
        top = ", ".join(
            f"{count} {name}" for name, count in sorted(buffers["species"].items(), key=lambda x: -x[1])[:3]
        )
        lines += [
            "",
            "## The sea and country buffers on real records",
            "",
            f"The plant records with a point in the recorded GBIF search answers ({top}): how many lie off",
            "Natural Earth's 50m land, or outside their country's polygon, and farther than each buffer.",
            "",
            "| " + " | ".join(BUFFER_COLUMNS) + " |",
            "|" + "---:|" * len(BUFFER_COLUMNS),
            "| " + " | ".join(f"{value:,}" for value in buffers["counts"]) + " |",
        ]
    return "\n".join(lines) + "\n"


def run_only(server_url: str, out: Path, sizes: list[int], reps: int, seed: int = 1) -> str:
    """``--only-quality``: each size in a child process; bench/results/quality.md and .json."""
    measured = []
    for rows in sizes:
        child = subprocess.run(  # noqa: S603  # fixed argv, no shell
            [sys.executable, "-m", "bench.quality", str(rows), str(reps), str(seed)],
            check=True,
            capture_output=True,
            text=True,
            env={**os.environ, "SURVEILLANCE_DATABASE_URL": server_url},
        )
        sys.stderr.write(child.stderr)
        measured.append(json.loads(child.stdout.strip().splitlines()[-1]))
    section = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{os.cpu_count()} cores",
        "reps": reps,
        "sizes": measured,
        "buffers": measure_buffers(server_url),
        "command": f'make bench BENCH_ARGS="--only-quality --reps {reps} --quality-sizes '
        f'{",".join(str(rows) for rows in sizes)}"',
    }
    return write_section(out, "quality", section, markdown(section))


if __name__ == "__main__":
    import tempfile

    size, repetitions, seed_value = (int(value) for value in sys.argv[1:4])
    with tempfile.TemporaryDirectory(prefix="surveillance-bench-quality-") as folder:
        result = measure_size(
            os.environ["SURVEILLANCE_DATABASE_URL"], Path(folder), size, repetitions, seed_value
        )
    print(json.dumps(result))
