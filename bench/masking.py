"""``python -m bench --only-masking``: a fresh ``masked_release`` of one species next to its limit.

The limit does the same work the fastest way this machine knows, in its own short program: the species'
rows read in id order as CSV text (a page of lines per value, ``string_agg``: psycopg hands COPY's output
over a row at a time) parsed once by Arrow, the same keyed draws per record (the project's
``core.seeds.record_draws_under``: a keyed BLAKE2b of each id), one vectorised ``Geod.fwd`` over numpy
arrays, the CSV formatted by Arrow kernels from integer millionths, the GeoParquet written by pyarrow
directly (WKB points packed by numpy, the GeoParquet and pandas metadata written out by hand) and the
manifest. It holds everything in memory at once, which is fastest; the project reads pages. Its files
must equal the project's byte for byte, or it is not the same work and the section says so.

Each side runs in its own process (under bench/shared/processes.py's launcher, so ``wait4`` gives its own
peak RSS); the two alternate, and medians are kept. The rows are generated in code (bench/shared/inputs.py)
and loaded by ``load_occurrences`` into a scratch database, one bench species per size. The section's
figures: bench/results/masking.md and .json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg

# The measured programs import nothing more at start (the parent's modules are imported where the parent
# uses them): each side loads what it needs itself, and says what it times.
if TYPE_CHECKING:
    from bench.shared.processes import ProcessRun

DATABASE_URL_VARIABLE = "SURVEILLANCE_DATABASE_URL"  # core.settings' name, not imported (see above)
BENCH_SLUG = "bench-species"  # bench.shared.bench_species.BENCH_SPECIES.slug, checked by the parent
DEFAULT_SIZES = (1_000_000, 5_000_000)
TARGET = 2.0  # every asset within 2x its limit
RSS_CAP_KB = 12 * 1024 * 1024


# ---------------------------------------------------------------------------------------------------------
# The two measured programs (run as ``python -m bench.masking project|limit ...``)


def masking_rules() -> Any:
    """The donut with the default radii and no release policy: the section times the masking against
    pyproj over every record, and makes no quality flags for a policy to read. (Imported here: the
    measured programs load nothing they do not time.)"""
    from surveillance_pipeline.releases.masking import MaskingRules

    return MaskingRules(policy="keep_all")


def masking_key() -> Any:
    """The key both programs draw with: the bench's own, on generated records (no secret to keep)."""
    from surveillance_pipeline.core.seeds import SeedKey

    return SeedKey("surveillance_pipeline bench masking key")


def _rss_kb() -> int:
    for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def run_project(url: str, folder: Path) -> dict[str, Any]:
    """The project's own fresh build (``rebuild=True``: no skip), as the asset calls it."""
    # Loaded before the clock starts, as the code location has loaded it before the asset runs (Dagster
    # with it); what the build imports lazily (Arrow) is timed.
    from surveillance_pipeline.releases.masking import build_masked_release

    rss_before = _rss_kb()
    started = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        release = build_masked_release(
            conn, BENCH_SLUG, masking_rules(), folder, key=masking_key(), rebuild=True
        )
        seconds = time.perf_counter() - started
    return {"seconds": seconds, "rows": release.rows, "rss_before_kb": rss_before}


def run_limit(url: str, folder: Path, job: dict[str, Any]) -> dict[str, Any]:
    """The same release the fastest way: see the module docstring."""
    # numpy and pyproj are loaded before the clock starts, as the project's code location has them; Arrow
    # is timed on both sides.
    import numpy as np
    from pyproj import CRS, Geod

    rss_before = _rss_kb()
    started = time.perf_counter()
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    crs = CRS.from_epsg(4326).to_json_dict()
    # GeoParquet's metadata names the datum ensemble's members without their ids (as geopandas writes it).
    geo_crs = json.loads(json.dumps(crs))
    for member in geo_crs.get("datum_ensemble", {}).get("members", []):
        member.pop("id", None)
    slug = job["slug"]
    buffer = pa.BufferOutputStream()
    statement = (Path(__file__).with_name("sql") / "select_masking_limit_page.sql").read_text(
        encoding="utf-8"
    )
    with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
        conn.execute("SET LOCAL extra_float_digits = 3")
        after, page_rows = -(2**63), 1024 * 1024
        while True:
            found = conn.execute(statement, {"slug": slug, "after": after, "rows": page_rows}).fetchone()
            text, last, rows_read = found if found is not None else (None, None, 0)
            if text:
                buffer.write(text.encode("utf-8") + b"\n")
            if rows_read < page_rows:
                break
            after = last
    names = ["id", "year", "longitude", "latitude", "license"]
    types = {"id": pa.int64(), "year": pa.int64(), "longitude": pa.float64(), "latitude": pa.float64()}
    rows = pacsv.read_csv(
        pa.BufferReader(buffer.getvalue()),
        read_options=pacsv.ReadOptions(column_names=names),
        convert_options=pacsv.ConvertOptions(
            column_types={**types, "license": pa.large_string()},
            strings_can_be_null=True,
            quoted_strings_can_be_null=False,
        ),
    )
    del buffer
    count = rows.num_rows
    lon = rows.column("longitude").to_numpy()
    lat = rows.column("latitude").to_numpy()
    from surveillance_pipeline.core.seeds import record_draws_under

    area_share, turn = record_draws_under(bytes.fromhex(job["scope_key"]), rows.column("id").to_numpy())
    azimuth = turn * 360.0
    low, high = job["min_m"], job["max_m"]
    radius = np.sqrt(low**2 + area_share * (high**2 - low**2))
    new_lon, new_lat, _ = Geod(ellps="WGS84").fwd(lon, lat, azimuth, radius)
    missing = np.isnan(lon) | np.isnan(lat)
    new_lon = np.where(missing, np.nan, np.round(new_lon, 6))
    new_lat = np.where(missing, np.nan, np.round(new_lat, 6))

    large = pa.large_string()

    def fixed6(values: np.ndarray) -> pa.Array:
        micros = np.abs(np.rint(np.where(missing, 0.0, values) * 1e6)).astype(np.int64)
        sign = pa.array(np.where(np.signbit(values), "-", ""), type=large)
        whole = pc.cast(pa.array(micros // 1_000_000), large)
        fraction = pc.utf8_lpad(pc.cast(pa.array(micros % 1_000_000), large), 6, "0")
        text = pc.binary_join_element_wise(sign, whole, pa.scalar(".", large), fraction, pa.scalar("", large))
        return pc.if_else(pa.array(missing), pa.scalar("", large), text)

    license_text = pc.fill_null(rows.column("license").combine_chunks(), "")
    fields = [
        pc.cast(rows.column("id").combine_chunks(), large),
        pa.repeat(pa.scalar(slug, large), count),
        pc.fill_null(pc.cast(rows.column("year").combine_chunks(), large), ""),
        fixed6(new_lon),
        fixed6(new_lat),
        pc.binary_join_element_wise(license_text, pa.scalar("\n", large), pa.scalar("", large)),
    ]
    lines = pc.binary_join_element_wise(*fields, pa.scalar(",", large))
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int64)
    body = memoryview(lines.buffers()[2])[int(offsets[lines.offset]) : int(offsets[lines.offset + count])]
    csv_bytes = b"".join((b"id,species,year,longitude,latitude,license\n", body))
    del body, lines, fields

    # WKB points: byte order 1, type 1, x, y; null where there are no coordinates.
    wkb = np.zeros(count, dtype=[("order", "u1"), ("kind", "<u4"), ("x", "<f8"), ("y", "<f8")])
    wkb["order"], wkb["kind"], wkb["x"], wkb["y"] = 1, 1, new_lon, new_lat
    geometry = pa.FixedSizeBinaryArray.from_buffers(pa.binary(21), count, [None, pa.py_buffer(wkb.tobytes())])
    geometry = pc.if_else(pa.array(missing), pa.scalar(None, pa.binary()), pc.cast(geometry, pa.binary()))
    year = rows.column("year")
    year_is_float = 0 < year.null_count < count
    table = pa.table(
        {
            "id": rows.column("id"),
            "species": pa.repeat(pa.scalar(slug, large), count),
            "year": pc.cast(year, pa.float64()) if year_is_float else year,
            "longitude": pa.array(new_lon, from_pandas=True),
            "latitude": pa.array(new_lat, from_pandas=True),
            "license": rows.column("license"),
            "geometry": geometry,
        }
    )
    kept = ~missing
    bbox = [
        float(new_lon[kept].min()),
        float(new_lat[kept].min()),
        float(new_lon[kept].max()),
        float(new_lat[kept].max()),
    ]
    from importlib.metadata import version

    def pandas_column(name: str, pandas_type: str, numpy_type: str) -> dict[str, Any]:
        return {
            "name": name,
            "field_name": name,
            "pandas_type": pandas_type,
            "numpy_type": numpy_type,
            "metadata": None,
        }

    year_type = "float64" if year_is_float else "int64"
    pandas_meta = {
        "index_columns": [],
        "column_indexes": [],
        "columns": [
            pandas_column("id", "int64", "int64"),
            pandas_column("species", "object", "str"),
            pandas_column("year", year_type, year_type),
            pandas_column("longitude", "float64", "float64"),
            pandas_column("latitude", "float64", "float64"),
            pandas_column("license", "object", "str"),
            pandas_column("geometry", "empty", "object"),
        ],
        "attributes": {},
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": version("pandas"),
    }
    geo_meta = {
        "primary_column": "geometry",
        "columns": {
            "geometry": {"encoding": "WKB", "crs": geo_crs, "geometry_types": ["Point"], "bbox": bbox}
        },
        "version": "1.1.0",
        "creator": {"library": "geopandas", "version": version("geopandas")},
    }
    field_meta = {
        b"ARROW:extension:name": b"geoarrow.wkb",
        b"ARROW:extension:metadata": json.dumps({"crs": crs}).encode(),
    }
    schema = table.schema.set(6, table.schema.field(6).with_metadata(field_meta))
    schema = schema.with_metadata({b"pandas": json.dumps(pandas_meta), b"geo": json.dumps(geo_meta)})
    sink = pa.BufferOutputStream()
    pq.write_table(table.cast(schema), sink, compression="snappy")
    parquet_bytes = sink.getvalue().to_pybytes()
    del table, sink, rows

    files = {f"{slug}.csv": (csv_bytes, "csv"), f"{slug}.parquet": (parquet_bytes, "parquet")}
    document = {
        **job["extra"],
        "export_format": job["export_format"],
        "job_key": job["job_key"],
        "job_key_parts": job["job_key_parts"],
        "order": job["order"],
        "files": {
            name: {"sha256": hashlib.sha256(data).hexdigest(), "rows": count, "format": job["formats"][kind]}
            for name, (data, kind) in files.items()
        },
    }
    manifest = (json.dumps(document, sort_keys=True, indent=1, ensure_ascii=False) + "\n").encode()
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in [*((n, d) for n, (d, _) in files.items()), ("manifest.json", manifest)]:
        with (folder / name).open("wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "rows": count, "rss_before_kb": rss_before}


# ---------------------------------------------------------------------------------------------------------
# The section


def _job(conn: psycopg.Connection) -> dict[str, Any]:
    """What the limit needs to write the same manifest: the key, its draws' scope key, the formats."""
    from bench.shared.bench_species import BENCH_SPECIES
    from surveillance_pipeline.core.seeds import logical_run_id
    from surveillance_pipeline.quality.policy import policy_record
    from surveillance_pipeline.releases import exports, masking
    from surveillance_pipeline.releases.masking import MASKING_KEY_ID, STAGE, masked_release_parts

    if BENCH_SPECIES.slug != BENCH_SLUG:
        raise RuntimeError(
            f"bench species is {BENCH_SPECIES.slug!r}, the measured programs read {BENCH_SLUG!r}"
        )

    input_key = conn.execute(
        "SELECT job_key FROM target_state WHERE target = 'occurrences' AND partition_key = %s",
        [BENCH_SPECIES.slug],
    ).fetchone()
    if input_key is None:
        raise RuntimeError("bench species not loaded")
    rules, key = masking_rules(), masking_key()
    parts = masked_release_parts(str(input_key[0]), rules, key.id)
    logical = logical_run_id(BENCH_SPECIES.slug, str(input_key[0]))
    return {
        "slug": BENCH_SPECIES.slug,
        "scope_key": key.scope_key(masking.draw_scope(rules)).hex(),
        "min_m": rules.min_m,
        "max_m": rules.max_m,
        "job_key": parts.key,
        "job_key_parts": parts.as_dict(),
        "export_format": exports.EXPORT_FORMAT,
        "order": masking.ORDER,
        "formats": {
            "csv": exports.CSV_FORMAT,
            "parquet": f"geoparquet: EPSG:4326, {exports.PARQUET_COMPRESSION}",
        },
        "extra": {
            "masking": {
                "stage": STAGE,
                "logical_run_id": logical,
                MASKING_KEY_ID: key.id,
                "displacement": masking.DISPLACEMENT,
            },
            # keep_all: the manifest names the policy and that it left nothing out.
            "policy": policy_record(rules.policy, {}, {}),
        },
    }


def _run(side: str, url: str, work: Path, folder: Path, job: Path, logs: Path) -> ProcessRun:
    from bench.shared.processes import run_measured

    argv = [sys.executable, "-m", "bench.masking", side, "--folder", str(folder), "--job", str(job)]
    run = run_measured(side, argv, {DATABASE_URL_VARIABLE: url}, logs, RSS_CAP_KB)
    if not run.ok:
        raise RuntimeError(f"{side}: {run.error}")
    return run


def measure_size(server_url: str, work: Path, rows: int, reps: int) -> dict[str, Any]:
    from bench.shared.bench_species import load_project
    from bench.shared.inputs import write_derived_csv
    from bench.shared.report import log
    from surveillance_pipeline.core.keys import sha256_file
    from surveillance_pipeline.core.refresh import ensure_state_tables
    from surveillance_pipeline_tests.support.scratch_databases import scratch_database

    log(f"masking {rows:,}: inputs")
    derived = write_derived_csv(work / f"derived-{rows}.csv", rows)
    with scratch_database(server_url, f"surveillance_bench_masking_{os.getpid()}") as url:
        with psycopg.connect(url, autocommit=True) as conn:
            ensure_state_tables(conn)
            load_project(conn, derived, None)
            job = _job(conn)
        job_path = work / f"job-{rows}.json"
        job_path.write_text(json.dumps(job), encoding="utf-8")
        runs: dict[str, list[ProcessRun]] = {"project": [], "limit": []}
        inner: dict[str, list[float]] = {"project": [], "limit": []}
        before: dict[str, int] = {}
        for rep in range(reps):
            # Alternate which side goes first, so neither always meets a warm cache.
            for side in ("project", "limit") if rep % 2 == 0 else ("limit", "project"):
                log(f"masking {rows:,}: {side} ({rep + 1}/{reps})")
                run = _run(side, url, work, work / side / str(rows), job_path, work / "logs")
                report = json.loads(run.stdout.strip().splitlines()[-1])
                runs[side].append(run)
                inner[side].append(report["seconds"])
                before[side] = report["rss_before_kb"]
        project, limit = work / "project" / str(rows), work / "limit" / str(rows)
        hashes = {
            name: (sha256_file(project / name), sha256_file(limit / name))
            for name in sorted(p.name for p in project.iterdir())
        }
    derived.unlink()
    result: dict[str, Any] = {"rows": rows, "same_bytes": all(a == b for a, b in hashes.values())}
    result["differ"] = sorted(name for name, (a, b) in hashes.items() if a != b)
    for side in ("project", "limit"):
        result[side] = {
            "seconds": statistics.median(inner[side]),
            "runs": [round(s, 3) for s in inner[side]],
            "process_seconds": statistics.median(r.seconds for r in runs[side]),
            "max_rss_mb": max(r.max_rss_kb for r in runs[side]) / 1024,
            "rss_after_imports_mb": before[side] / 1024,
        }
    result["ratio"] = result["project"]["seconds"] / result["limit"]["seconds"]
    return result


def markdown(section: dict[str, Any]) -> str:
    lines = [
        "## masked_release: a fresh build of one species vs its limit",
        "",
        f"{section['machine']}; {section['date']}; load average before {section['load_before']}, after "
        f"{section['load_after']}; {section['reps']} alternating repetitions, medians. Seconds are the "
        "build from a process that has loaded what the code location loads (Arrow, imported lazily, is "
        "timed on both sides); RSS is the process's peak (`wait4`). Target: "
        f"project / limit <= {TARGET:g}.",
        "",
        "| rows | project s | limit s | project / limit | project peak RSS MB | limit peak RSS MB "
        "| same bytes |",
        "|---:|---:|---:|---:|---:|---:|---|",
    ]
    for size in section["sizes"]:
        project, limit = size["project"], size["limit"]
        same = "yes" if size["same_bytes"] else "NO: " + ", ".join(size["differ"])
        lines.append(
            f"| {size['rows']:,} | {project['seconds']:.2f} | {limit['seconds']:.2f} | {size['ratio']:.2f} "
            f"| {project['max_rss_mb']:.0f} | {limit['max_rss_mb']:.0f} | {same} |"
        )
    sizes = section["sizes"]
    if len(sizes) > 1:
        first, last = sizes[0], sizes[-1]
        growth = last["rows"] / first["rows"]
        lines += [
            "",
            f"From {first['rows']:,} to {last['rows']:,} rows ({growth:g}x): project time "
            f"{last['project']['seconds'] / first['project']['seconds']:.2f}x, peak RSS "
            f"{last['project']['max_rss_mb'] / first['project']['max_rss_mb']:.2f}x; limit time "
            f"{last['limit']['seconds'] / first['limit']['seconds']:.2f}x, peak RSS "
            f"{last['limit']['max_rss_mb'] / first['limit']['max_rss_mb']:.2f}x.",
        ]
    return "\n".join(lines) + "\n"


def measure_masking(server_url: str, sizes: list[int], reps: int, out: Path) -> str:
    """The section at each size, written to bench/results/masking.md and .json under ``out``; its table."""
    from bench.shared.report import write_section

    with tempfile.TemporaryDirectory(prefix="surveillance-bench-masking-") as folder:
        section = measure_masking_section(server_url, Path(folder), sizes, reps)
    return write_section(out, "masking", section, markdown(section))


def measure_masking_section(server_url: str, work: Path, sizes: list[int], reps: int) -> dict[str, Any]:
    """The section at each size, in ``work``: what ``measure_masking`` writes, and plain make bench quotes."""
    from datetime import UTC, datetime

    from bench.shared.report import machine
    from surveillance_pipeline.core.settings import DATABASE_URL_VARIABLE as PROJECT_VARIABLE

    if PROJECT_VARIABLE != DATABASE_URL_VARIABLE:
        raise RuntimeError(f"the database URL is in {PROJECT_VARIABLE}, not {DATABASE_URL_VARIABLE}")
    section: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "reps": reps,
        "load_before": [round(x, 2) for x in os.getloadavg()],
    }
    section["sizes"] = [measure_size(server_url, work, rows, reps) for rows in sorted(sizes)]
    section["load_after"] = [round(x, 2) for x in os.getloadavg()]
    return section


def main(argv: list[str] | None = None) -> int:
    """A measured program: ``project`` or ``limit``; prints its own timing as one JSON line."""
    parser = argparse.ArgumentParser(description="one side of the masked_release bench")
    parser.add_argument("side", choices=["project", "limit"])
    parser.add_argument("--folder", type=Path, required=True)
    parser.add_argument("--job", type=Path, required=True)
    args = parser.parse_args(argv)
    url = os.environ[DATABASE_URL_VARIABLE]
    if args.side == "project":
        report = run_project(url, args.folder)
    else:
        report = run_limit(url, args.folder, json.loads(args.job.read_text(encoding="utf-8")))
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
