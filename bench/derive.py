"""``make bench BENCH_ARGS=--only-derive``: gbif_derived's derive next to a DuckDB derive of the same bytes.

At each size a GBIF-shaped DwC-A (bench/shared/gbif_download.py, from the download cache) is indexed and split
into raw snapshots as gbif_raw does (untimed: that is gbif_raw's work, measured in the downloads
section). Then, over every species of the download (the per-download total), one after the other and
alternating for ``--derive-reps`` repetitions:

- the *project*: one process calling ``occurrences.derive.derive_to_file`` for each species' raw snapshot,
  the call gbif_derived makes, into ``<slug>.csv``;
- the *limit*: one process running DuckDB over the same records files (gzip'd TSV), writing each
  species' derived CSV with one ``COPY``: the same columns, rules and bytes (license names, 0,0 and
  ZERO_COORDINATE dropped, coordinates in the shortest round-trip form), without the checks the project
  makes (taxon, ranges, key order).

Every derived file of the two is compared by sha256: unequal bytes are not the same work, and the table
says so. Each process is timed from start to exit with its peak RSS (bench/shared/processes.py's launcher);
the largest species is also timed inside each process, for the case of one species holding most of a
download. The section's figures: bench/results/derive.md and .json.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.shared.gbif_download import cached_dwca
from bench.shared.processes import GB, ProcessRun, run_measured
from bench.shared.report import log, write_section
from surveillance_pipeline.core.keys import sha256_file
from surveillance_pipeline.gbif.download_index import ensure_index
from surveillance_pipeline.gbif.downloads import describe_download
from surveillance_pipeline.gbif.ingest import ingest_species_from_downloads
from surveillance_pipeline.gbif.records import RECORD_COLUMNS
from surveillance_pipeline.gbif.registry import load_registry
from surveillance_pipeline.gbif.rules import ZERO_COORDINATE

TARGET = 2.0

PROJECT_SCRIPT = """
import json, sys, time
from pathlib import Path
from surveillance_pipeline.gbif.registry import species_by_slug
from surveillance_pipeline.occurrences.derive import derive_to_file
raw, out = Path(sys.argv[1]), Path(sys.argv[2])
seconds = {}
for header in sorted(raw.glob("*.json")):
    started = time.perf_counter()
    derive_to_file(header, species_by_slug(header.stem), out / f"{header.stem}.csv")
    seconds[header.stem] = time.perf_counter() - started
print(json.dumps(seconds))
"""

# The same derive in DuckDB: the records file's columns by name, empty fields as NULL (written empty).
LIMIT_SCRIPT = """
import json, sys, time
from pathlib import Path
import duckdb
raw, out, columns = Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3])
zero = sys.argv[4]
def text(value):
    return "'" + value.replace("'", "''") + "'"
types = "{" + ", ".join(f"{text(name)}: 'VARCHAR'" for name in columns) + "}"
connection = duckdb.connect()
seconds = {}
for records in sorted(raw.glob("*.records.tsv.gz")):
    slug = records.name.split(".")[0]
    started = time.perf_counter()
    connection.execute(f'''
COPY (
    WITH r AS (
        SELECT CAST("key" AS BIGINT) AS id,
               CAST("year" AS INTEGER) AS year,
               CAST(decimalLongitude AS DOUBLE) AS lon,
               CAST(decimalLatitude AS DOUBLE) AS lat,
               rtrim(regexp_replace(regexp_replace(lower(trim(license)), '^https?://', ''),
                                    '/legalcode$', ''), '/') AS token,
               (lat = 0 AND lon = 0)
                   OR regexp_matches(coalesce(issues, ''), {text('(^|;)[ ]*' + zero + '[ ]*(;|$)')}) AS zero
        FROM read_csv({text(str(records))}, delim = '\\t', quote = '', escape = '', header = false,
                      columns = {types}, compression = 'gzip', nullstr = '')
    )
    SELECT id, year,
           CASE WHEN zero THEN NULL ELSE lon END AS longitude,
           CASE WHEN zero THEN NULL ELSE lat END AS latitude,
           CASE token
               WHEN 'creativecommons.org/publicdomain/zero/1.0' THEN 'CC0 1.0'
               WHEN 'cc0_1_0' THEN 'CC0 1.0' WHEN 'cc0 1.0' THEN 'CC0 1.0'
               WHEN 'creativecommons.org/licenses/by/4.0' THEN 'CC BY 4.0'
               WHEN 'cc_by_4_0' THEN 'CC BY 4.0' WHEN 'cc by 4.0' THEN 'CC BY 4.0'
               WHEN 'creativecommons.org/licenses/by-nc/4.0' THEN 'CC BY-NC 4.0'
               WHEN 'cc_by_nc_4_0' THEN 'CC BY-NC 4.0' WHEN 'cc by-nc 4.0' THEN 'CC BY-NC 4.0'
           END AS license
    FROM r
) TO {text(str(out / (slug + ".csv")))} (FORMAT csv, HEADER true)
''')
    seconds[slug] = time.perf_counter() - started
print(json.dumps(seconds))
"""


def prepare_raw(zip_path: Path, folder: Path) -> tuple[Path, int]:
    """gbif_raw's output for the download: every species' raw snapshot (header and records file)."""
    registry = load_registry()
    index = ensure_index(describe_download(zip_path), folder / "index", registry)
    raw = folder / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    species = 0
    for entry in registry:
        if ingest_species_from_downloads([index], entry, raw / f"{entry.slug}.json") is not None:
            species += 1
    shutil.rmtree(folder / "index", ignore_errors=True)
    return raw, species


def _digests(folder: Path) -> dict[str, str]:
    return {path.stem: sha256_file(path) for path in sorted(folder.glob("*.csv"))}


def _reset(folder: Path) -> Path:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


def measure_derive_size(
    work: Path, cache: Path, records: int, seed: int, reps: int, rss_cap_kb: int
) -> dict[str, Any]:
    result: dict[str, Any] = {"records": records, "seed": seed}
    folder = work / f"derive-{records}"
    logs = folder / "logs"
    try:
        generated, _ = cached_dwca(cache, records, seed)
        log(f"derive {records:,}: raw snapshots as gbif_raw writes them (untimed)")
        raw, species = prepare_raw(generated.path, folder)
        largest = max(generated.records_per_species, key=lambda slug: generated.records_per_species[slug])
        result.update(
            species=species, largest=largest, largest_records=generated.records_per_species[largest]
        )
        python = sys.executable
        runs: dict[str, list[ProcessRun]] = {"project": [], "limit": []}
        inner: dict[str, list[dict[str, float]]] = {"project": [], "limit": []}
        digests: dict[str, dict[str, str]] = {}
        for rep in range(reps):
            for path in ("limit", "project"):
                out = _reset(folder / path)
                log(f"derive {records:,}: {path} ({rep + 1}/{reps})")
                if path == "project":
                    argv = [python, "-c", PROJECT_SCRIPT, str(raw), str(out)]
                else:
                    argv = [python, "-c", LIMIT_SCRIPT, str(raw), str(out)]
                    argv += [json.dumps(list(RECORD_COLUMNS)), ZERO_COORDINATE]
                run = run_measured(f"{path}-{rep}", argv, {}, logs, rss_cap_kb)
                runs[path].append(run)
                if not run.ok:
                    raise RuntimeError(f"{path}: {run.error}")
                inner[path].append(json.loads(run.stdout.strip().splitlines()[-1]))
                digests[path] = _digests(out)
        for path in ("project", "limit"):
            result[path] = {
                "seconds": statistics.median(run.seconds for run in runs[path]),
                "work_seconds": statistics.median(sum(times.values()) for times in inner[path]),
                "max_rss_mb": max(run.max_rss_kb for run in runs[path]) / 1024,
                "largest_seconds": statistics.median(times.get(largest, 0.0) for times in inner[path]),
            }
        project, limit = digests["project"], digests["limit"]
        result["files"] = len(project)
        result["unequal"] = sorted(slug for slug in project if limit.get(slug) != project[slug])
        result["unequal"] += sorted(set(limit) - set(project))
        result["ratio"] = result["project"]["work_seconds"] / result["limit"]["work_seconds"]
        result["process_ratio"] = result["project"]["seconds"] / result["limit"]["seconds"]
        result["largest_ratio"] = result["project"]["largest_seconds"] / result["limit"]["largest_seconds"]
    except Exception as error:  # noqa: BLE001 - recorded in the table, the bench goes on
        log(f"derive {records:,}: failed: {error}")
        result["error"] = str(error)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return result


def measure_derive(
    work: Path, cache: Path, sizes: list[int], seed: int, reps: int, rss_cap_gb: float
) -> dict[str, Any]:
    section: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "seed": seed,
        "reps": reps,
        "cache": str(cache),
        "load_before": [round(x, 2) for x in os.getloadavg()],
    }
    rss_cap_kb = int(rss_cap_gb * GB)
    section["sizes"] = [
        measure_derive_size(work, cache, records, seed, reps, rss_cap_kb) for records in sorted(set(sizes))
    ]
    section["load_after"] = [round(x, 2) for x in os.getloadavg()]
    return section


def markdown(section: dict[str, Any], command: str) -> str:
    lines = [
        f"### gbif_derived against a DuckDB derive of the same bytes: `{command}`",
        "",
        f"Measured {section['date']} (seed {section['seed']}, {section['reps']} repetition(s) alternating, "
        "medians; each side one process over every species of the download, timed start to exit, peak RSS "
        "from `wait4`). The project calls `derive_to_file` per species (gbif_derived's derive); the limit "
        "is DuckDB reading the same records files and `COPY`ing each species' CSV. *work s* is the sum of "
        "the per-species calls inside the process (what gbif_derived spends in a run, where Dagster and "
        "the project are imported already); *process s* adds starting the interpreter and imports "
        "(importing the project imports Dagster, about 1.2 s). The ratio is of the work. *sha256* says "
        "whether every derived file of the two is the same bytes.",
        "",
        "| records | species | project work s | limit work s | project / limit | project process s "
        "| limit process s | project MB | limit MB | largest species (records) | its project s "
        "| its limit s | its ratio | sha256 |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- |",
    ]
    for size in section["sizes"]:
        if "error" in size:
            lines.append(f"| {size['records']:,} | failed: {size['error'][:120]} |" + " |" * 12)
            continue
        project, limit = size["project"], size["limit"]
        same = "equal" if not size["unequal"] else f"{len(size['unequal'])} of {size['files']} differ"
        lines.append(
            f"| {size['records']:,} | {size['species']} | {project['work_seconds']:.1f} "
            f"| {limit['work_seconds']:.1f} | {size['ratio']:.2f} | {project['seconds']:.1f} "
            f"| {limit['seconds']:.1f} | {project['max_rss_mb']:.0f} | {limit['max_rss_mb']:.0f} "
            f"| {size['largest']} ({size['largest_records']:,}) | {project['largest_seconds']:.2f} "
            f"| {limit['largest_seconds']:.2f} | {size['largest_ratio']:.2f} | {same} |"
        )
    measured = [s for s in section["sizes"] if "error" not in s]
    if len(measured) >= 2:
        small, large = measured[0], measured[-1]
        growth = large["project"]["max_rss_mb"] / small["project"]["max_rss_mb"]
        lines += ["", f"Project peak RSS growth {large['records']:,} / {small['records']:,}: {growth:.2f}."]
    worst = max((s["ratio"] for s in measured), default=None)
    if worst is not None:
        verdict = "met" if worst <= TARGET else "not met"
        lines += ["", f"Target: project / limit <= {TARGET:g} at every size: worst {worst:.2f}, {verdict}."]
    lines += ["", f"Noise: load average {section['load_before']} before, {section['load_after']} after.", ""]
    return "\n".join(lines)


def write(out: Path, section: dict[str, Any], command: str) -> str:
    """bench/results/derive.md and .json: this section's last run, with the command that made it."""
    return write_section(out, "derive", {**section, "command": command}, markdown(section, command))
