"""The import's limit: a GBIF download taken to a table by the shortest road the machine offers.

Three processes, one after the other: a streamed unzip of occurrence.txt, DuckDB reading the columns a load
needs and writing them as the derived CSV, and psql's ``\\copy`` of that CSV into a table shaped and indexed
like an occurrences partition (bench/sql/load_limit_occurrences.sql, the load paths' ``\\copy`` limit too).
The download section and the whole run set the project's import against it.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

import psycopg

from bench.shared.bench_species import BENCH_SPECIES, create_like_occurrences
from bench.shared.gbif_download import GeneratedDownload
from bench.shared.processes import ProcessRun, median_run, run_measured
from bench.shared.scratch import libpq_environment
from surveillance_pipeline.gbif.registry import load_registry

LIMIT_SQL = Path(__file__).resolve().parents[1] / "sql" / "load_limit_occurrences.sql"

# The limit's processes import nothing of the project, so their time and RSS are the tools' own.
UNZIP_SCRIPT = """
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as archive, archive.open("occurrence.txt") as source:
    with open(sys.argv[2], "wb") as target:
        shutil.copyfileobj(source, target, 4 << 20)
"""
DUCKDB_SCRIPT = """
import json, sys, duckdb
source, target = sys.argv[1], sys.argv[2]
keys, names = json.loads(sys.argv[3]), json.loads(sys.argv[4])
def text(value):
    return "'" + value.replace("'", "''") + "'"
key_list = ", ".join(str(int(k)) for k in keys) or "NULL"
name_list = ", ".join(text(n) for n in names) or "NULL"
query = f'''
COPY (
    WITH kept AS (
        SELECT CAST(gbifID AS BIGINT) AS id,
               CAST(year AS INTEGER) AS year,
               CAST(decimalLongitude AS DOUBLE) AS lon,
               CAST(decimalLatitude AS DOUBLE) AS lat,
               license,
               coalesce(issue, '') AS issue
        FROM read_csv({text(source)}, delim = '\\t', quote = '', escape = '', header = true,
                      all_varchar = true)
        WHERE CAST(taxonKey AS BIGINT) IN ({key_list})
           OR CAST(speciesKey AS BIGINT) IN ({key_list})
           OR CAST(acceptedTaxonKey AS BIGINT) IN ({key_list})
           OR species IN ({name_list})
    )
    SELECT id,
           year,
           CASE WHEN (lat = 0 AND lon = 0) OR contains(issue, 'ZERO_COORDINATE') THEN NULL ELSE lon END
               AS longitude,
           CASE WHEN (lat = 0 AND lon = 0) OR contains(issue, 'ZERO_COORDINATE') THEN NULL ELSE lat END
               AS latitude,
           CASE regexp_replace(lower(trim(license)), '^https?://|/legalcode$|/$', '', 'g')
               WHEN 'creativecommons.org/publicdomain/zero/1.0' THEN 'CC0 1.0'
               WHEN 'creativecommons.org/licenses/by/4.0' THEN 'CC BY 4.0'
               WHEN 'creativecommons.org/licenses/by-nc/4.0' THEN 'CC BY-NC 4.0'
           END AS license
    FROM kept
) TO {text(target)} (FORMAT csv, HEADER true)
'''
with duckdb.connect() as con:
    # Rows go out as they are read: nothing asks for their order, so nothing holds them.
    con.execute("SET preserve_insertion_order = false")
    con.execute(query)
"""


def measure_limit(
    url: str, generated: GeneratedDownload, work: Path, logs: Path, reps: int, rss_cap_kb: int
) -> dict[str, Any]:
    python = sys.executable
    occurrence = work / "limit-occurrence.txt"
    derived = work / "limit-derived.csv"
    registry = load_registry()
    keys = [s.taxon_key for s in registry if s.taxon_key is not None]
    names = [s.scientific_name for s in registry if s.taxon_key is None]
    script = LIMIT_SQL
    steps: dict[str, list[ProcessRun]] = {"unzip": [], "duckdb": [], "psql": []}
    totals: list[float] = []
    loaded = None
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            for rep in range(reps):
                unzip = run_measured(
                    f"limit-unzip-{rep}",
                    [python, "-c", UNZIP_SCRIPT, str(generated.path), str(occurrence)],
                    {},
                    logs,
                    rss_cap_kb,
                )
                steps["unzip"].append(unzip)
                if not unzip.ok:
                    break
                duck = run_measured(
                    f"limit-duckdb-{rep}",
                    [
                        python,
                        "-c",
                        DUCKDB_SCRIPT,
                        str(occurrence),
                        str(derived),
                        json.dumps(keys),
                        json.dumps(names),
                    ],
                    {},
                    logs,
                    rss_cap_kb,
                )
                steps["duckdb"].append(duck)
                occurrence.unlink(missing_ok=True)
                if not duck.ok:
                    break
                # The table with its indexes in place before the load, as the load paths' \copy limit.
                create_like_occurrences(conn, "limit_occurrences")
                psql = run_measured(
                    f"limit-psql-{rep}",
                    [
                        "psql",
                        "-X",
                        "-q",
                        "-v",
                        "ON_ERROR_STOP=1",
                        "-v",
                        f"species_id={BENCH_SPECIES.species_id}",
                    ]
                    + ["-f", str(script)],
                    libpq_environment(url),
                    logs,
                    rss_cap_kb,
                    stdin=derived,
                )
                steps["psql"].append(psql)
                derived.unlink(missing_ok=True)
                if not psql.ok:
                    break
                totals.append(unzip.seconds + duck.seconds + psql.seconds)
                row = conn.execute("SELECT count(*) FROM limit_occurrences").fetchone()
                loaded = row[0] if row else None
            conn.execute("DROP TABLE IF EXISTS limit_occurrences")
    finally:
        occurrence.unlink(missing_ok=True)
        derived.unlink(missing_ok=True)
    processes = {name: median_run(runs) for name, runs in steps.items() if runs}
    errors = [f"{name}: {p['error']}" for name, p in processes.items() if p["error"]]
    return {
        "seconds": round(statistics.median(totals), 3) if totals else None,
        "rows_loaded": loaded,
        "processes": processes,
        "error": errors[-1] if errors else None,
    }
