"""``make bench BENCH_ARGS=--only-refresh``: the same GBIF query downloaded again a month later.

At each size (default 1M records) make run's own entry point loads the cached GBIF-shaped DwC-A (seed 1) in a
scratch warehouse and Dagster storage; then the month-later download of the same query
(bench/shared/month_later.py: 0.75 % of the records edited, 0.25 % gone, 0.25 % new, and every record of
two species gone, VANISHED) is placed beside it and make run runs again. The first download lacks every record
of two other species, APPEARED, which the month-later one holds. make run's table gives each asset's
seconds in both runs.

The month-later result is then checked against a fresh warehouse that loaded the month-later download
alone: every state row (target, partition, job key, rows and the rows' fingerprint) and every file under
the data folder's COMPARED_FOLDERS must be equal.

The floor, in the same invocation: unzip and DuckDB parse of the newer zip (the import limit's own scripts,
bench/shared/import_limit.py), plus psql applying the same changes (the removed and changed records'
rows deleted, the changed and added records' rows copied in, with their geometry) to a table holding the
first download's rows, shaped and indexed like an occurrences partition. The changes are found for it
beforehand, untimed. Figures: bench/results/refresh.md and .json.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from bench.shared.bench_species import BENCH_SPECIES, create_like_occurrences
from bench.shared.gbif_download import cached_dwca
from bench.shared.group_runs import RSS_CAP_GB, GroupRun, run_group
from bench.shared.import_limit import DUCKDB_SCRIPT, LIMIT_SQL, UNZIP_SCRIPT
from bench.shared.month_later import cached_month_later, cached_without
from bench.shared.processes import GB, run_measured
from bench.shared.report import log, write_section
from bench.shared.scratch import download_environment, libpq_environment
from surveillance_pipeline.gbif.registry import load_registry
from surveillance_pipeline_tests.support.scratch_databases import scratch_database

DEFAULT_SIZES = (1_000_000,)
TARGET_VS_FIRST = 0.25
TARGET_VS_FLOOR = 2.0
SECTION_HEADING = "### A month-later download of the same query"
# The rows of the first download that the newer one changed or lacks, and its rows that are new or changed.
CHANGES_SCRIPT = """
import sys, duckdb
old, new, gone, came = sys.argv[1:5]
with duckdb.connect() as con:
    con.execute(f"CREATE VIEW old AS SELECT * FROM read_csv('{old}', header = true, all_varchar = true)")
    con.execute(f"CREATE VIEW new AS SELECT * FROM read_csv('{new}', header = true, all_varchar = true)")
    differ = "SELECT id FROM (SELECT * FROM old EXCEPT SELECT * FROM new)"
    con.execute(f"COPY ({differ}) TO '{gone}' (HEADER true)")
    con.execute(f"COPY (SELECT * FROM new EXCEPT SELECT * FROM old) TO '{came}' (HEADER true)")
"""
# psql applying the changes: the ids to delete from the CSV named in the script ({gone}), the changed and
# added rows on stdin.
APPLY_SQL = """\\set ON_ERROR_STOP 1
BEGIN;
CREATE TEMPORARY TABLE gone (id bigint) ON COMMIT DROP;
\\copy gone FROM {gone} WITH (FORMAT csv, HEADER true)
DELETE FROM limit_occurrences AS o USING gone AS g WHERE o.id = g.id;
CREATE TEMPORARY TABLE staging (
    id bigint, year integer, longitude double precision, latitude double precision, license text
) ON COMMIT DROP;
\\copy staging FROM pstdin WITH (FORMAT csv, HEADER true)
INSERT INTO limit_occurrences (id, species_id, year, longitude, latitude, license, geom)
SELECT id, :species_id, year, longitude, latitude, license,
       CASE WHEN longitude IS NULL THEN NULL ELSE ST_SetSRID(ST_MakePoint(longitude, latitude), 4326) END
FROM staging;
COMMIT;
"""


def _state_rows(url: str) -> dict[str, Any]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT target, partition_key, job_key, rows, digest FROM target_state ORDER BY 1, 2"
        ).fetchall()
    return {
        f"{target}/{partition}": [job_key, count, digest]
        for target, partition, job_key, count, digest in rows
    }


# Every folder of files a run writes from the downloads (not memos of file stamps, which name inodes, nor
# the downloads and their indexes): raw snapshots, derived files, masked releases, exports and figures.
COMPARED_FOLDERS = ("raw", "derived", "masked_release", "exports", "figures")


def _files(data: Path) -> dict[str, str]:
    found = {}
    for folder in COMPARED_FOLDERS:
        for path in sorted((data / folder).rglob("*")):
            if path.is_file():
                found[str(path.relative_to(data))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def _differences(left: dict[str, Any], right: dict[str, Any], fields: tuple[str, ...] = ()) -> list[str]:
    """The keys whose values differ, each with the fields that differ (of a list value)."""
    found = []
    for key in sorted(left.keys() | right.keys()):
        mine, theirs = left.get(key), right.get(key)
        if mine == theirs:
            continue
        if isinstance(mine, list) and isinstance(theirs, list) and fields:
            differing = [name for name, a, b in zip(fields, mine, theirs, strict=True) if a != b]
            found.append(f"{key} ({', '.join(differing)})")
        else:
            found.append(key)
    return found


def measure_floor(url: str, base: Path, later: Path, work: Path, logs: Path) -> dict[str, Any]:
    """Unzip and parse of the newer zip (timed), then psql applying the changes (timed)."""
    python, rss_cap_kb = sys.executable, int(RSS_CAP_GB * GB)
    registry = load_registry()
    keys = json.dumps([s.taxon_key for s in registry if s.taxon_key is not None])
    names = json.dumps([s.scientific_name for s in registry if s.taxon_key is None])
    text, old_csv, new_csv = work / "floor-occurrence.txt", work / "floor-old.csv", work / "floor-new.csv"
    gone, came = work / "floor-gone.csv", work / "floor-came.csv"
    try:
        # Untimed: the first download's rows in a table like an occurrences partition, and the changes.
        run_measured(
            "floor-old-unzip", [python, "-c", UNZIP_SCRIPT, str(base), str(text)], {}, logs, rss_cap_kb
        )
        run_measured(
            "floor-old-duckdb",
            [python, "-c", DUCKDB_SCRIPT, str(text), str(old_csv), keys, names],
            {},
            logs,
            rss_cap_kb,
        )
        # Timed: the newer zip unzipped and parsed.
        unzip = run_measured(
            "floor-unzip", [python, "-c", UNZIP_SCRIPT, str(later), str(text)], {}, logs, rss_cap_kb
        )
        parse = run_measured(
            "floor-duckdb",
            [python, "-c", DUCKDB_SCRIPT, str(text), str(new_csv), keys, names],
            {},
            logs,
            rss_cap_kb,
        )
        text.unlink(missing_ok=True)
        run_measured(
            "floor-changes",
            [python, "-c", CHANGES_SCRIPT, str(old_csv), str(new_csv), str(gone), str(came)],
            {},
            logs,
            rss_cap_kb,
        )
        psql = ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-v", f"species_id={BENCH_SPECIES.species_id}"]
        with psycopg.connect(url, autocommit=True) as conn:
            create_like_occurrences(conn, "limit_occurrences")
            run_measured(
                "floor-load-old",
                [*psql, "-f", str(LIMIT_SQL)],
                libpq_environment(url),
                logs,
                rss_cap_kb,
                stdin=old_csv,
            )
            script = work / "floor-apply.sql"
            # psql expands no variable in \copy's file name: the path is written into the script.
            quoted = "'" + str(gone).replace("'", "''") + "'"
            script.write_text(APPLY_SQL.replace("{gone}", quoted), encoding="utf-8")
            apply = run_measured(
                "floor-apply",
                [*psql, "-f", str(script)],
                libpq_environment(url),
                logs,
                rss_cap_kb,
                stdin=came,
            )
            row = conn.execute("SELECT count(*) FROM limit_occurrences").fetchone()
            conn.execute("DROP TABLE IF EXISTS limit_occurrences")
        changed = {
            "gone_or_changed": sum(1 for _ in gone.open()) - 1,
            "new_or_changed": sum(1 for _ in came.open()) - 1,
        }
    finally:
        for path in (text, old_csv, new_csv, gone, came):
            path.unlink(missing_ok=True)
    steps = {"unzip": unzip, "duckdb": parse, "psql_apply": apply}
    errors = [f"{name}: {run.error}" for name, run in steps.items() if run.error]
    return {
        "seconds": round(sum(run.seconds for run in steps.values()), 3),
        "steps": {name: round(run.seconds, 3) for name, run in steps.items()},
        "rows_after": row[0] if row else None,
        "rows": changed,
        "error": errors[-1] if errors else None,
    }


# Species the month-later download holds none of: the thylacine, which its query asks for by the registry's
# backbone key (it ends empty), and the spotted-tailed quoll, which the registry names without a key (no
# download answers for it: searched, through the lab fallback, as in a fresh warehouse).
VANISHED = ("thylacinus-cynocephalus", "dasyurus-maculatus")
# Species the first download holds none of and the month-later one does: the wild boar, which the query asks
# for by the registry's backbone key (its first load ends empty), and the southern brown bandicoot, which the
# registry names without one (searched through the lab fallback first); small, so the timing barely moves.
APPEARED = ("sus-scrofa", "isoodon-obesulus")


def measure_size(
    server_url: str, work: Path, cache: Path, records: int, shares: tuple[float, ...] | None = None
) -> dict[str, Any]:
    """``shares``: the month-later download's shares of records edited, gone and new (None: a month's)."""
    rss_cap_kb = int(RSS_CAP_GB * GB)
    base, _ = cached_dwca(cache, records, 1)
    first_download = cached_without(cache, base, APPEARED)
    edited, gone, added = shares or (None, None, None)
    later = cached_month_later(cache, base, vanished=VANISHED, edited=edited, gone=gone, added=added)
    result: dict[str, Any] = {
        "records": records,
        "first_download": {"records": first_download.records, "appeared": list(APPEARED)},
        "later": {
            "records": later.records,
            "edited": sum(later.edited.values()),
            "gone": sum(later.gone.values()),
            "added": sum(later.added.values()),
            "vanished": list(later.vanished),
        },
    }
    make_run = [sys.executable, "-m", "surveillance_pipeline.commands.make_run"]
    make_plan = [sys.executable, "-m", "surveillance_pipeline.commands.plan", "--list", "0"]
    pid = os.getpid()
    data, fresh_data = work / f"refresh-data-{records}", work / f"refresh-fresh-{records}"
    with (
        scratch_database(server_url, f"surveillance_bench_refresh_{pid}") as warehouse_url,
        scratch_database(server_url, f"dagster_bench_refresh_{pid}", postgis=False) as storage_url,
    ):
        (data / "downloads").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(first_download.path, data / "downloads" / first_download.path.name)
        environment = download_environment(work / "refresh-home", storage_url, warehouse_url, data)
        log(f"refresh {records:,}: first make run")
        first = run_group(make_run, environment, rss_cap_kb)
        result["first"] = first.as_dict()
        if first.returncode == 0:
            shutil.copyfile(later.path, data / "downloads" / later.path.name)
            log(f"refresh {records:,}: make plan with the month-later download beside the first")
            plan = run_group(make_plan, environment, rss_cap_kb)
            log(f"refresh {records:,}: make run with the month-later download beside the first")
            month = run_group(make_run, environment, rss_cap_kb)
            result["month_later"] = month.as_dict()
            result["month_later"]["table"] = [
                line for line in month.stdout.splitlines() if "by delta" in line or "delta too large" in line
            ]
            result["plan"] = planned_against_run(plan, month.stdout)
            by_delta = _state_rows(warehouse_url), _files(data)
    if first.returncode == 0:
        with (
            scratch_database(server_url, f"surveillance_bench_refresh_fresh_{pid}") as warehouse_url,
            scratch_database(server_url, f"dagster_bench_refresh_fresh_{pid}", postgis=False) as storage_url,
        ):
            (fresh_data / "downloads").mkdir(parents=True, exist_ok=True)
            shutil.copyfile(later.path, fresh_data / "downloads" / later.path.name)
            environment = download_environment(
                work / "refresh-fresh-home", storage_url, warehouse_url, fresh_data
            )
            log(f"refresh {records:,}: a fresh warehouse loading the month-later download alone")
            fresh = run_group(make_run, environment, rss_cap_kb)
            result["fresh_later"] = {"seconds": round(fresh.seconds, 3), "returncode": fresh.returncode}
            alone = _state_rows(warehouse_url), _files(fresh_data)
        result["differences"] = {
            "state_rows": _differences(by_delta[0], alone[0], ("job key", "rows", "digest")),
            "files": _differences(by_delta[1], alone[1]),
            "state_rows_compared": len(alone[0]),
            "files_compared": len(alone[1]),
        }
    log(f"refresh {records:,}: floor (unzip + parse of the newer zip, psql applying the changes)")
    with scratch_database(server_url, f"surveillance_bench_refresh_floor_{pid}") as floor_url:
        result["floor"] = measure_floor(
            floor_url, first_download.path, later.path, work, work / "refresh-logs"
        )
    shutil.rmtree(data, ignore_errors=True)
    shutil.rmtree(fresh_data, ignore_errors=True)
    return result


def _record_changes(text: str, asset: str) -> str | None:
    """What an asset's line of make run's (or make plan's) table says of its record changes: its 'by delta
    (N): … of M' and its 'reloaded: delta too large (N)', those it has, joined by '; '."""
    for line in text.splitlines():
        words = line.split()
        if words and words[0] == asset:
            parts = [
                line[line.index(said) :].split(";")[0].strip()
                for said in ("by delta", "reloaded: delta too large")
                if said in line
            ]
            if parts:
                return "; ".join(parts)
    return None


def planned_against_run(plan: GroupRun, run_stdout: str) -> dict[str, Any]:
    """make plan's time and its count of occurrences' record changes, against what the run then did.

    They agree when their 'by delta' counts are the same, or both reload every partition whole. The
    partitions that reload whole may differ in number: a species no download holds is searched at run
    time, and the plan, which reads only, cannot tell how its rows will change (make plan says "input
    changed" for it, with no counts)."""
    planned, done = _record_changes(plan.stdout, "occurrences"), _record_changes(run_stdout, "occurrences")

    def by_delta(said: str | None) -> str | None:
        return said.split(";")[0] if said and said.startswith("by delta") else None

    return {
        "seconds": round(plan.seconds, 3),
        "returncode": plan.returncode,
        "peak_mb": round(plan.peak_group_kb / 1024, 1),
        "error": plan.stderr_tail if plan.returncode else None,
        "occurrences_planned": planned,
        "occurrences_run": done,
        "agrees": planned is not None and done is not None and by_delta(planned) == by_delta(done),
    }


def ratios(size: dict[str, Any]) -> dict[str, float | None]:
    first = size.get("first", {}).get("seconds")
    month = size.get("month_later", {}).get("seconds")
    floor = size.get("floor", {}).get("seconds")
    return {
        "vs_first": round(month / first, 2) if month and first else None,
        "vs_floor": round(month / floor, 2) if month and floor else None,
    }


def markdown(section: dict[str, Any]) -> str:
    lines = [
        SECTION_HEADING,
        "",
        f"{section['date']}; load average before {section['load_before']}, after {section['load_after']}.",
        "",
        "| records | first run s | month-later run s | floor s (unzip + parse + psql) "
        f"| month-later / first (target ≤ {TARGET_VS_FIRST}) "
        f"| month-later / floor (target ≤ {TARGET_VS_FLOOR}) | equal to a fresh load |",
        "|---|---|---|---|---|---|---|",
    ]
    for size in section["sizes"]:
        r = ratios(size)
        floor = size.get("floor", {})
        steps = floor.get("steps", {})
        differences = size.get("differences", {})
        fresh = size.get("fresh_later", {})
        equal = (
            f"yes ({differences['state_rows_compared']} state rows, {differences['files_compared']} files)"
            if differences and not differences["state_rows"] and not differences["files"]
            else f"**no**: {differences}"
        )
        if fresh.get("returncode"):
            # What a failed fresh load left proves nothing either way.
            equal = f"**not compared**: the fresh load failed (exit {fresh['returncode']})"
        lines.append(
            f"| {size['records']:,} | {size.get('first', {}).get('seconds', 0):.1f} "
            f"| {size.get('month_later', {}).get('seconds', 0):.1f} "
            f"| {floor.get('seconds', 0):.1f} ({steps.get('unzip', 0):.1f} + {steps.get('duckdb', 0):.1f} + "
            f"{steps.get('psql_apply', 0):.1f}) | {r['vs_first']} | {r['vs_floor']} | {equal} |"
        )
        if floor.get("error"):
            # A floor step that failed measured nothing: say so beside the figure, never silently.
            lines.append(f"| | | | **floor step failed**: {floor['error']} | | | |")
    for size in section["sizes"]:
        later = size["later"]
        lines += [
            "",
            f"Per asset at {size['records']:,} (make run's own table; the month-later download holds "
            f"{later['records']:,} records: {later['edited']:,} edited, {later['gone']:,} gone, "
            f"{later['added']:,} new; every record of {', '.join(later.get('vanished', [])) or 'no species'} "
            f"gone, and of {', '.join(size.get('first_download', {}).get('appeared', [])) or 'no species'} "
            "new, the first download holding none):",
            "",
            "| asset | first run s | month-later run s |",
            "|---|---|---|",
        ]
        first_assets = size.get("first", {}).get("assets", {})
        month_assets = size.get("month_later", {}).get("assets", {})
        for asset, shown in first_assets.items():
            month_seconds = month_assets.get(asset, {}).get("seconds")
            lines.append(
                f"| {asset} | {shown.get('seconds') if shown.get('seconds') is not None else '-'} "
                f"| {month_seconds if month_seconds is not None else '-'} |"
            )
        plan = size.get("plan")
        if plan:
            lines += [
                "",
                f"make plan beforehand: {plan['seconds']:.1f} s (peak {plan['peak_mb']} MB), "
                f"occurrences {plan['occurrences_planned']}; the run: {plan['occurrences_run']} "
                f"({'the same by delta' if plan['agrees'] else '**not the same**'}; the plan cannot count a "
                "searched species' changes).",
            ]
        if size.get("month_later", {}).get("table"):
            lines += ["", "What the deltas applied (make run's lines):", "", "```"]
            lines += [line.strip() for line in size["month_later"]["table"]]
            lines += ["```"]
    return "\n".join(lines) + "\n"


def run_only(
    server_url: str, out: Path, cache: Path, sizes: list[int], shares: tuple[float, ...] | None = None
) -> int:
    """``--only-refresh``: the section alone; bench/results/refresh.md and .json."""
    if shares is not None and (len(shares) != 3 or not all(0 <= share < 1 for share in shares)):
        raise SystemExit(f"--refresh-shares: three shares in [0, 1) (edited, gone, new), got {shares}")
    section: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "load_before": [round(x, 2) for x in os.getloadavg()],
    }
    with tempfile.TemporaryDirectory(prefix="surveillance-bench-refresh-") as folder:
        section["sizes"] = [
            measure_size(server_url, Path(folder), cache, records, shares) for records in sorted(set(sizes))
        ]
    section["load_after"] = [round(x, 2) for x in os.getloadavg()]
    print(write_section(out, "refresh", section, markdown(section)))
    return 0
