"""``make run`` under the distributed profile, as a user runs it, and what a dead worker costs.

1. **A download's import, 1 worker vs 2.** A generated 600,000-record GBIF download
   (bench/shared/gbif_download.py, cached in ``BENCH_DOWNLOAD_CACHE``, default bench/out/) in the data
   folder's downloads/, ``GBIF_SOURCE=download``, imported by ``make run``'s own command (``python -m
   surveillance_pipeline.commands.make_run``: every asset, its species runs split over the workers) with one
   worker and with two, and in the local profile for reference. The variants alternate within each
   repetition, each from an empty warehouse and a data folder holding only downloads/; each is timed from
   start to exit.
2. **The lab ``make run``, distributed (2 workers) vs local**, the same way, on the lab data.
3. **A dead worker's cost.** ``make workers 2`` (orchestration/workers.py, the supervisor) with the fault
   suite's hook armed once per round (``SURVEILLANCE_FAULT_POINT=before_commit``, ``block``): the first
   occurrences load to reach its COMMIT stops there and names its worker's pid. The bench SIGKILLs that
   worker at once (a *short* step: in hand for seconds) or after the step has been in hand for
   LONG_HOLD_SECONDS, several visibility timeouts (a *long* step: the heartbeat must have kept it from
   being handed on while its worker lived). Measured: seconds from the kill to the step's Celery task being
   received again (the supervisor's output holds every worker's log) and to its new STEP_START in
   Dagster's event log. Checked each round: the step was received once before the kill, the other worker
   lived on, the supervisor replaced the dead one, every table partition was loaded exactly once, and
   after the last round the outputs equal the local profile's.

Every distributed result is checked against the local one: each table by row count and an md5 of its
rows, each file by sha256. ``make bench BENCH_ARGS=--only-distributed`` runs this alone and writes
bench/results/distributed_run.md and .json.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess  # noqa: S404  # make run and make workers, as the user runs them
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from bench.shared.gbif_download import cached_dwca, place_download
from bench.shared.report import write_section
from bench.shared.scratch import EVENT_BATCH_SIZE, drop_project_tables
from surveillance_pipeline.core.fault_points import BEFORE_COMMIT, FAULT_POINT_VARIABLE
from surveillance_pipeline.core.settings import DEFAULT_STEP_VISIBILITY_TIMEOUT
from surveillance_pipeline.core.settings import PROJECT_ROOT as ROOT
from surveillance_pipeline.definitions import table_targets
from surveillance_pipeline.gbif.registry import partition_keys
from surveillance_pipeline_tests.support.celery_workers import workers_running
from surveillance_pipeline_tests.support.dagster_dev import PROJECT_ROOT, project_dagster_home
from surveillance_pipeline_tests.support.faults.points import (
    BLOCK,
    FAULT_ACTION_VARIABLE,
    FAULT_ONCE_VARIABLE,
    FAULT_SIGNAL_VARIABLE,
)
from surveillance_pipeline_tests.support.file_digests import file_hashes
from surveillance_pipeline_tests.support.redis_server import PrivateRedis
from surveillance_pipeline_tests.support.scratch_databases import scratch_database

DOWNLOAD_RECORDS = 600_000
# The distributed profile's targets: the download's import with 2 workers against 1, the lab's 2 workers
# against local.
TWO_OVER_ONE_TARGET = 0.65
LAB_OVER_LOCAL_TARGET = 1.1
# Kills of each kind (short, long), alternating: the medians are of this many.
KILLS_PER_KIND = 3
# Every make run's and worker's output, kept after the bench (the scratch folder is not).
LOGS = Path(tempfile.gettempdir()) / f"surveillance-bench-distributed-run-{os.getpid()}"
DOWNLOAD_SEED = 1
# Tables whose rows record a run (its id, its process, its time) or the catalog (a table's oid), not what
# the data is: never equal between two warehouses.
RUN_RECORD_TABLES = {"provenance", "target_state", "target_schema", "spatial_ref_sys"}
# The geocoder's call ledger: one row per call, in the order the calls were made, and its version, a random
# token replaced at every write (migration 9); the tests leave both out too.
LEDGER_TABLES = {"geocode_calls", "geocode_ledger_version"}
# A long step: held by its worker this long before the kill, several visibility timeouts.
LONG_HOLD_SECONDS = 3 * DEFAULT_STEP_VISIBILITY_TIMEOUT + 10
RECEIVED = re.compile(r"^\[([\d-]+ [\d:,]+): INFO/MainProcess\] Task \S+\[([\w-]+)\] received", re.M)
REPLACED = re.compile(r"^(\w+) \(pid (\d+)\) died with signal 9; (\w+) started$", re.M)


def log(message: str) -> None:
    print(f"[bench distributed-run {datetime.now(UTC):%H:%M:%S}] {message}", flush=True)


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def busy_cpu_seconds() -> float:
    """CPU seconds every process on the machine has spent so far, not idle nor waiting on I/O (Linux's
    /proc/stat, in clock ticks): taken around a make run, it counts the run, the workers and PostgreSQL."""
    fields = Path("/proc/stat").read_text(encoding="ascii").splitlines()[0].split()[1:9]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields)
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def rows_md5(conn: psycopg.Connection, table: str) -> str:
    """md5 of a table's rows in primary-key order, its timestamptz and run_id columns left out (what a run
    records, not the data), as the tests' support/pipeline.py digests a table."""
    columns = [
        name
        for name, kind in conn.execute(
            "SELECT column_name, data_type FROM information_schema.columns"
            " WHERE table_schema = 'public' AND table_name = %s ORDER BY ordinal_position",
            [table],
        ).fetchall()
        if kind != "timestamp with time zone" and name != "run_id"
    ]
    key = [
        row[0]
        for row in conn.execute(
            "SELECT attribute.attname FROM pg_index AS index"
            " JOIN pg_attribute AS attribute ON attribute.attrelid = index.indrelid"
            " AND attribute.attnum = ANY(index.indkey)"
            " WHERE index.indrelid = to_regclass(%s) AND index.indisprimary ORDER BY attribute.attnum",
            [table],
        ).fetchall()
    ]
    row_text = sql.SQL("ROW({})::text").format(sql.SQL(", ").join(map(sql.Identifier, columns)))
    order = sql.SQL(", ").join(map(sql.Identifier, key)) if key else row_text
    statement = sql.SQL(
        "SELECT md5(coalesce(string_agg({row}, E'\\n' ORDER BY {order}), '')) FROM {table}"
    ).format(row=row_text, order=order, table=sql.Identifier(table))
    found = conn.execute(statement).fetchone()
    return str(found[0]) if found else ""


class Place:
    """A scratch warehouse, Dagster storage and data folder, and make run's environment over them."""

    def __init__(self, name: str, warehouse: str, storage: str, work: Path, common: dict[str, str]) -> None:
        self.name = name
        self.warehouse = warehouse
        self.storage = storage
        self.cpu_seconds = 0.0  # of the last make_run
        self.data = work / f"{name}-data"
        (self.data / "downloads").mkdir(parents=True, exist_ok=True)
        self.env = {
            **os.environ,
            **project_dagster_home(work / f"{name}-home", storage),
            # As make exports it for make run and make workers, also when the bench runs without make: unset,
            # every event was stored on its own (a species run's 252 planned events took 1.1 s to create).
            "DAGSTER_EVENT_BATCH_SIZE": os.environ.get("DAGSTER_EVENT_BATCH_SIZE", EVENT_BATCH_SIZE),
            "SURVEILLANCE_DATABASE_URL": warehouse,
            "SURVEILLANCE_DATA_DIR": str(self.data),
            **common,
        }

    def reset(self) -> None:
        """Back to a first run: no project tables, nothing in the data folder but downloads/."""
        with psycopg.connect(self.warehouse, autocommit=True) as conn:
            drop_project_tables(conn)
        for entry in self.data.iterdir():
            if entry.name != "downloads":
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()

    def make_run(self, logs: Path, label: str) -> float:
        """make run's command, timed from start to exit; raises when it fails. The machine's busy CPU
        seconds over the same span go to ``self.cpu_seconds``."""
        started, cpu_started = time.monotonic(), busy_cpu_seconds()
        with (logs / f"{label}.log").open("wb") as sink:
            completed = subprocess.run(  # noqa: S603  # fixed argv, no shell
                [sys.executable, "-m", "surveillance_pipeline.commands.make_run"],
                cwd=PROJECT_ROOT,
                env=self.env,
                stdout=sink,
                stderr=subprocess.STDOUT,
                timeout=3600,
                check=False,
            )
        seconds = time.monotonic() - started
        self.cpu_seconds = busy_cpu_seconds() - cpu_started
        if completed.returncode != 0:
            tail = (logs / f"{label}.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"make run ({label}) ended {completed.returncode}: {tail}")
        (logs / f"{label}.timeline").write_text(self.timeline(), encoding="utf-8")
        return seconds

    def timeline(self) -> str:
        """Each run's and step's start and end, seconds from the first run's start, from Dagster's event
        log: where a make run's time went, and what ran side by side."""
        with psycopg.connect(self.storage, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT run_id, step_key, dagster_event_type, extract(epoch FROM timestamp) FROM event_logs"
                " WHERE dagster_event_type = ANY(%s) ORDER BY timestamp, id",
                [["PIPELINE_START", "PIPELINE_SUCCESS", "PIPELINE_FAILURE", "STEP_START", "STEP_SUCCESS"]],
            ).fetchall()
        if not rows:
            return ""
        origin = float(rows[0][3])
        return "".join(
            f"{float(at) - origin:8.2f} {run_id[:8]} {kind:<16} {step or ''}\n"
            for run_id, step, kind, at in rows
        )

    def fingerprint(self) -> dict[str, Any]:
        """Each table's row count and rows' md5, each file's sha256 (downloads/, the input, left out)."""
        with psycopg.connect(self.warehouse, autocommit=True) as conn:
            names = [
                row[0]
                for row in conn.execute(
                    "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1"
                ).fetchall()
                if row[0] not in RUN_RECORD_TABLES | LEDGER_TABLES
            ]
            tables = {}
            for name in names:
                counted = conn.execute(
                    sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(name))
                ).fetchone()
                tables[name] = [counted[0] if counted else 0, rows_md5(conn, name)]
        files = {k: v for k, v in file_hashes(self.data).items() if not k.startswith("downloads/")}
        return {"tables": tables, "files": files}

    def loaded_once(self) -> bool:
        """Whether every table partition make run's species runs wrote was loaded exactly once."""
        table_assets = sorted({target.asset for target in table_targets()})
        with psycopg.connect(self.warehouse) as conn:
            rows = conn.execute(
                "SELECT asset, partition_key FROM provenance WHERE action = 'loaded' AND asset = ANY(%s)"
                " AND partition_key IS NOT NULL",
                [table_assets],
            ).fetchall()
        return bool(rows) and max(Counter(rows).values()) == 1


def compare(reference: dict[str, Any], other: dict[str, Any]) -> list[str]:
    """What differs between two fingerprints, by table and file name (empty: equal)."""
    differ = []
    for kind in ("tables", "files"):
        for name in sorted(set(reference[kind]) | set(other[kind])):
            if reference[kind].get(name) != other[kind].get(name):
                differ.append(f"{kind[:-1]} {name}")
    return differ


@contextmanager
def places(server_url: str, work: Path, names: list[str], common: dict[str, str]) -> Iterator[list[Place]]:
    pid = os.getpid()
    with contextlib.ExitStack() as stack:
        made = []
        for name in names:
            safe = name.replace("-", "_")
            warehouse = stack.enter_context(scratch_database(server_url, f"surveillance_bench_{safe}_{pid}"))
            storage = stack.enter_context(
                scratch_database(server_url, f"dagster_bench_{safe}_{pid}", postgis=False)
            )
            made.append(Place(name, warehouse, storage, work, common))
        yield made


def distributed_env(redis_url: str) -> dict[str, str]:
    return {"SURVEILLANCE_PROFILE": "distributed", "REDIS_URL": redis_url}


def measure_side_by_side(
    server_url: str,
    work: Path,
    reps: int,
    label: str,
    common: dict[str, str],
    variants: dict[str, tuple[int, dict[str, str]]],
) -> dict[str, Any]:
    """make run in each of ``variants`` (name: workers, 0 for the local profile, and extra settings),
    alternating within each rep (reversed every other rep); every distributed result compared with the
    local one (the variant named ``local``)."""
    logs = LOGS / label
    logs.mkdir(parents=True, exist_ok=True)
    names = list(variants)
    seconds: dict[str, list[float]] = {variant: [] for variant in names}
    cpu: dict[str, list[float]] = {variant: [] for variant in names}
    loads: list[list[float]] = []
    equal: dict[str, list[str]] = {}
    with (
        PrivateRedis(work / f"{label}-redis") as redis,
        places(server_url, work, [f"{label}-{variant}" for variant in names], common) as made,
    ):
        by_variant = dict(zip(names, made, strict=True))
        for variant, place in by_variant.items():
            count, extra = variants[variant]
            place.env.update(distributed_env(redis.url) if count else {"SURVEILLANCE_PROFILE": "local"})
            place.env.update(extra)
        for rep in range(reps):
            for variant in names if rep % 2 == 0 else names[::-1]:
                place = by_variant[variant]
                place.reset()
                loads.append(load())
                count, extra = variants[variant]
                log(f"{label}: make run, {variant} ({count} workers, {extra}) ({rep + 1}/{reps})")
                if not count:
                    seconds[variant].append(place.make_run(logs, f"{variant}-{rep}"))
                else:
                    workers = [f"{label}{rep}{variant}n{number}" for number in range(1, count + 1)]
                    with workers_running(place.env, logs, workers):
                        seconds[variant].append(place.make_run(logs, f"{variant}-{rep}"))
                cpu[variant].append(place.cpu_seconds)
                log(
                    f"{label}: {variant} {seconds[variant][-1]:.1f} s, "
                    f"{cpu[variant][-1]:.1f} busy CPU s, load {load()}"
                )
            reference = by_variant["local"].fingerprint()
            for variant in (name for name in names if name != "local"):
                differ = compare(reference, by_variant[variant].fingerprint())
                if not by_variant[variant].loaded_once():
                    differ.append("a table partition loaded twice")
                equal.setdefault(variant, []).extend(differ)
        tables = len(reference["tables"])
        files = len(reference["files"])
        rows = sum(count for count, _ in reference["tables"].values())
    medians = {variant: round(statistics.median(values), 1) for variant, values in seconds.items()}
    return {
        "seconds": {variant: [round(x, 1) for x in values] for variant, values in seconds.items()},
        "median_s": medians,
        # Busy CPU seconds of the whole machine during each make run, and the cores that kept busy on
        # average: where 2 workers cannot be twice as fast as 1 on 2 cores.
        "cpu_s": {variant: [round(x, 1) for x in values] for variant, values in cpu.items()},
        "median_cpu_s": {variant: round(statistics.median(values), 1) for variant, values in cpu.items()},
        "loads": loads,
        "differences": {variant: sorted(set(found)) for variant, found in equal.items()},
        "compared": {"tables": tables, "rows": rows, "files": files},
    }


def measure_download(server_url: str, work: Path, cache: Path, reps: int) -> dict[str, Any]:
    generated, _ = cached_dwca(cache, DOWNLOAD_RECORDS, DOWNLOAD_SEED)
    common = {
        "GEOCODER_LEDGER_SALT": os.environ.get("GEOCODER_LEDGER_SALT", "bench-salt"),
        "RELEASE_MASKING_KEY": os.environ.get("RELEASE_MASKING_KEY", "bench-masking-key"),
        "GBIF_SOURCE": "download",
        # A species no download holds is searched through the offline lab data, never GBIF's API.
        "GBIF_FALLBACK_SOURCE": "lab",
    }
    for variant in ("local", "w1", "w2"):
        place_download(generated, work / f"download-{variant}-data" / "downloads")
    variants: dict[str, tuple[int, dict[str, str]]] = {"local": (0, {}), "w1": (1, {}), "w2": (2, {})}
    result = measure_side_by_side(server_url, work, reps, "download", common, variants)
    result["records"] = generated.records
    medians = result["median_s"]
    # Three decimals: at two, 0.653 read as the target's own 0.65. Each repetition's too: the variants
    # alternate within a repetition, and the two workers' time swung 26.7-30.0 s within one invocation.
    result["two_over_one"] = round(medians["w2"] / medians["w1"], 3)
    result["two_over_one_each"] = [
        round(two / one, 3) for two, one in zip(result["seconds"]["w2"], result["seconds"]["w1"], strict=True)
    ]
    result["two_over_local"] = round(medians["w2"] / medians["local"], 2)
    return result


def verdict(ratio: float, target: float) -> str:
    return "met" if ratio <= target else "MISSED"


def measure_lab(server_url: str, work: Path, reps: int) -> dict[str, Any]:
    common = {
        "GEOCODER_LEDGER_SALT": os.environ.get("GEOCODER_LEDGER_SALT", "bench-salt"),
        "RELEASE_MASKING_KEY": os.environ.get("RELEASE_MASKING_KEY", "bench-masking-key"),
        "GBIF_SOURCE": "lab",
    }
    result = measure_side_by_side(server_url, work, reps, "lab", common, {"local": (0, {}), "w2": (2, {})})
    medians = result["median_s"]
    result["two_over_local"] = round(medians["w2"] / medians["local"], 2)
    return result


# ---------------------------------------------------------------------------------------------------------
# A dead worker's cost


class Supervised:
    """``make workers 2`` (the supervisor) with its output, which holds every worker's log, in a file."""

    def __init__(self, env: dict[str, str], output: Path) -> None:
        self.output = output
        with output.open("wb") as sink:
            self.process = subprocess.Popen(  # noqa: S603  # fixed argv, no shell
                [sys.executable, "-m", "surveillance_pipeline.orchestration.workers", "2"],
                cwd=PROJECT_ROOT,
                env=env,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def text(self) -> str:
        return self.output.read_text(errors="replace")

    def wait_ready(self, count: int) -> None:
        deadline = time.monotonic() + 120
        while self.text().count(" ready.") < count:
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError(f"workers not ready: {self.text()[-2000:]}")
            time.sleep(0.5)

    def live_pids(self) -> set[int]:
        """The supervisor's children: its workers."""
        found = subprocess.run(  # noqa: S603  # fixed argv, no shell
            ["ps", "-o", "pid=", "--ppid", str(self.process.pid)],  # noqa: S607
            capture_output=True,
            text=True,
            check=False,
        )
        return {int(word) for word in found.stdout.split()}

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _step_restart(storage_url: str, since: float, pid: int) -> tuple[float, str] | None:
    """The first STEP_START in Dagster's event log after ``since`` (epoch seconds) from another pid than
    ``pid``'s for a step that ``pid`` started: (timestamp, step key)."""
    with psycopg.connect(storage_url) as conn:
        rows = conn.execute(
            "SELECT run_id, step_key, extract(epoch FROM timestamp), event FROM event_logs"
            " WHERE dagster_event_type = 'STEP_START' ORDER BY id"
        ).fetchall()
    held = set()
    for run_id, step_key, stamp, event in rows:
        event_pid = json.loads(event).get("dagster_event", {}).get("pid")
        if event_pid == pid:
            held.add((run_id, step_key))
        elif (run_id, step_key) in held and float(stamp) >= since:
            return float(stamp), step_key
    return None


def measure_kills(server_url: str, work: Path, kinds: list[str]) -> dict[str, Any]:
    """One make run (distributed, lab data) per kill; the local profile's make run as the reference."""
    logs = LOGS / "kills"
    logs.mkdir(parents=True, exist_ok=True)
    signal_file = work / "kills.signal"
    common = {
        "GEOCODER_LEDGER_SALT": os.environ.get("GEOCODER_LEDGER_SALT", "bench-salt"),
        "RELEASE_MASKING_KEY": os.environ.get("RELEASE_MASKING_KEY", "bench-masking-key"),
        "GBIF_SOURCE": "lab",
    }
    rounds: list[dict[str, Any]] = []
    with (
        PrivateRedis(work / "kills-redis") as redis,
        places(server_url, work, ["kills-local", "kills-dist"], common) as (local, dist),
    ):
        local.env["SURVEILLANCE_PROFILE"] = "local"
        log("kills: make run, local profile (the reference)")
        local.make_run(logs, "reference")
        reference = local.fingerprint()
        dist.env.update(distributed_env(redis.url))
        armed = {
            **dist.env,
            FAULT_POINT_VARIABLE: BEFORE_COMMIT,
            FAULT_ACTION_VARIABLE: BLOCK,
            FAULT_SIGNAL_VARIABLE: str(signal_file),
            FAULT_ONCE_VARIABLE: "1",
        }
        supervisor = Supervised(armed, logs / "workers.out")
        try:
            supervisor.wait_ready(2)
            for number, kind in enumerate(kinds):
                signal_file.unlink(missing_ok=True)
                with psycopg.connect(dist.warehouse, autocommit=True) as conn:
                    # Forget what the tables hold (the first round starts empty): every table loads again.
                    if conn.execute("SELECT to_regclass('target_state') IS NOT NULL").fetchone() == (True,):
                        conn.execute("DELETE FROM target_state")
                    first_id = (
                        conn.execute("SELECT coalesce(max(id), 0) FROM provenance").fetchone()
                        if number
                        else (0,)
                    )
                before = supervisor.text().count(" ready.")
                label = f"kill-{number}-{kind}"
                log(f"kills: round {number + 1}/{len(kinds)}, a {kind} step")
                with (logs / f"{label}.log").open("wb") as sink:
                    run = subprocess.Popen(  # noqa: S603  # fixed argv, no shell
                        [sys.executable, "-m", "surveillance_pipeline.commands.make_run"],
                        cwd=PROJECT_ROOT,
                        env=dist.env,
                        stdout=sink,
                        stderr=subprocess.STDOUT,
                    )
                deadline = time.monotonic() + 600
                while not signal_file.exists():
                    if time.monotonic() > deadline or run.poll() is not None:
                        raise RuntimeError(f"{label}: no load reached its COMMIT")
                    time.sleep(0.1)
                held_at = time.time()
                victim = int(signal_file.read_text().split()[1])
                others = supervisor.live_pids() - {victim}
                if kind == "long":
                    time.sleep(max(0.0, held_at + LONG_HOLD_SECONDS - time.time()))
                offset = len(supervisor.text())
                before_kill = supervisor.text()
                os.kill(victim, signal.SIGKILL)
                killed_at = time.time()
                held_for = killed_at - held_at
                if run.wait(timeout=900) != 0:
                    raise RuntimeError(f"{label}: make run failed, see {logs / label}.log")
                after = supervisor.text()[offset:]
                # The task ids received before the kill and received again after it: the dead worker's step.
                earlier = Counter(task for _, task in RECEIVED.findall(before_kill))
                again = [(stamp, task) for stamp, task in RECEIVED.findall(after) if task in earlier]
                if len(again) != 1:
                    raise RuntimeError(f"{label}: {len(again)} tasks received again: {again}")
                stamp, task = again[0]
                # Celery logs local time.
                received = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()
                restart = _step_restart(dist.storage, killed_at, victim)
                replaced = [m for m in REPLACED.findall(after) if int(m[1]) == victim]
                supervisor.wait_ready(before + 1)
                round_result = {
                    "kind": kind,
                    "held_before_kill_s": round(held_for, 1),
                    "received_once_before_kill": earlier[task] == 1,
                    "to_received_again_s": round(received - killed_at, 1),
                    "to_step_start_s": round(restart[0] - killed_at, 1) if restart else None,
                    "step": restart[1] if restart else None,
                    "other_worker_survived": bool(others) and all(_alive(pid) for pid in others),
                    "replaced": bool(replaced),
                    "loaded_once": _loaded_once_since(dist.warehouse, first_id[0] if first_id else 0),
                }
                rounds.append(round_result)
                log(f"kills: {round_result}")
        finally:
            supervisor.stop()
        differ = compare(reference, dist.fingerprint())
    return {"rounds": rounds, "differences": differ, "tables": len(reference["tables"])}


def _loaded_once_since(warehouse: str, first_id: int) -> bool:
    """Every table partition loaded exactly once by the provenance rows after ``first_id``."""
    table_assets = sorted({target.asset for target in table_targets()})
    with psycopg.connect(warehouse) as conn:
        rows = conn.execute(
            "SELECT asset, partition_key FROM provenance WHERE id > %s AND action = 'loaded'"
            " AND asset = ANY(%s) AND partition_key IS NOT NULL",
            [first_id, table_assets],
        ).fetchall()
    counted = Counter(rows)
    species = set(partition_keys())
    loaded_species = {key for asset, key in counted if asset == "occurrences"}
    return max(counted.values()) == 1 and loaded_species == species


# ---------------------------------------------------------------------------------------------------------


def median_of(rounds: list[dict[str, Any]], kind: str | None, field: str) -> float | None:
    """The median of ``field`` over the rounds of ``kind`` (None: all)."""
    values = [r[field] for r in rounds if kind in (None, r["kind"]) and r[field] is not None]
    return round(statistics.median(values), 1) if values else None


def equal_text(result: dict[str, Any], variant: str) -> str:
    if variant == "local":
        return "-"
    differ = result["differences"][variant]
    return "yes" if not differ else "NO: " + ", ".join(differ)


def markdown(section: dict[str, Any]) -> str:
    lines = [
        f"# make run under the distributed profile ({section['date']}, {section['machine']})",
        "",
        f"`{section['command']}`; load average before {section['load_before']}, "
        f"after {section['load_after']}.",
        "",
    ]
    if "download" in section:
        d = section["download"]
        lines += [
            f"**Import of a {d['records']:,}-record GBIF download** (`GBIF_SOURCE=download`, `make run`'s "
            f"command, every asset): {d['compared']['tables']} tables ({d['compared']['rows']:,} rows) and "
            f"{d['compared']['files']} files compared with the local profile's.",
            "",
            "| variant | median s | each s | equal to local | busy CPU s (machine) | cores busy on average |",
            "| --- | ---: | --- | --- | ---: | ---: |",
            *(
                f"| {name} | {d['median_s'][key]} | {d['seconds'][key]} | {equal_text(d, key)} | "
                f"{d['median_cpu_s'][key]} | {round(d['median_cpu_s'][key] / d['median_s'][key], 2)} |"
                for key, name in (("local", "local profile"), ("w1", "1 worker"), ("w2", "2 workers"))
            ),
            f"| 2 workers / 1 worker | {d['two_over_one']}x (target <= {TWO_OVER_ONE_TARGET}: "
            f"{verdict(d['two_over_one'], TWO_OVER_ONE_TARGET)}; each repetition "
            f"{d.get('two_over_one_each', '-')}) | | | | |",
            f"| 2 workers / local | {d['two_over_local']}x | | | | |",
            "",
            f"Load averages at each start: {d['loads']}",
            "",
        ]
    if "lab" in section:
        lab = section["lab"]
        lines += [
            f"**The lab `make run`** (first run, empty warehouse): {lab['compared']['tables']} tables, "
            f"{lab['compared']['files']} files compared.",
            "",
            "| variant | median s | each s | equal to local |",
            "| --- | ---: | --- | --- |",
            f"| local profile | {lab['median_s']['local']} | {lab['seconds']['local']} | - |",
            f"| distributed, 2 workers | {lab['median_s']['w2']} | {lab['seconds']['w2']} | "
            f"{equal_text(lab, 'w2')} |",
            f"| distributed / local | {lab['two_over_local']}x (target <= {LAB_OVER_LOCAL_TARGET}: "
            f"{verdict(lab['two_over_local'], LAB_OVER_LOCAL_TARGET)}) | | |",
            "",
            f"Load averages at each start: {lab['loads']}",
            "",
        ]
    if "kills" in section:
        k = section["kills"]
        rounds = k["rounds"]
        lines += [
            "**A dead worker's cost** (`make workers 2`, the lab `make run`, one SIGKILL per run; the worker "
            f"holding a load at its COMMIT; visibility timeout {DEFAULT_STEP_VISIBILITY_TIMEOUT} s).",
            "",
            "| round | step | held before the kill s | kill -> task received again s | kill -> STEP_START "
            "s | received once before | other worker lived | replaced | loaded once |",
            "| ---: | --- | ---: | ---: | ---: | --- | --- | --- | --- |",
            *(
                f"| {n + 1} | {r['kind']} ({r['step']}) | {r['held_before_kill_s']} | "
                f"{r['to_received_again_s']} | "
                f"{r['to_step_start_s']} | {r['received_once_before_kill']} | {r['other_worker_survived']} | "
                f"{r['replaced']} | {r['loaded_once']} |"
                for n, r in enumerate(rounds)
            ),
            "",
            "Median, kill to the step started elsewhere: "
            f"short {median_of(rounds, 'short', 'to_step_start_s')} s, "
            f"long {median_of(rounds, 'long', 'to_step_start_s')} s, "
            f"all {median_of(rounds, None, 'to_step_start_s')} s; kill to the task received again: "
            f"short {median_of(rounds, 'short', 'to_received_again_s')} s, "
            f"long {median_of(rounds, 'long', 'to_received_again_s')} s. "
            f"Outputs after the last round equal the local profile's: "
            f"{'yes' if not k['differences'] else k['differences']} ({k['tables']} tables).",
            "",
        ]
    return "\n".join(lines)


def measure(
    server_url: str, work: Path, reps: int, machine: str, cache: Path, parts: list[str], kills: int
) -> dict[str, Any]:
    section: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine,
        "command": "make bench BENCH_ARGS='" + " ".join(sys.argv[1:]) + "'",
        "load_before": load(),
    }
    if "download" in parts:
        section["download"] = measure_download(server_url, work, cache, reps)
    if "lab" in parts:
        section["lab"] = measure_lab(server_url, work, reps)
    if "kills" in parts:
        kinds = ["short" if n % 2 == 0 else "long" for n in range(2 * kills)]
        section["kills"] = measure_kills(server_url, work, kinds)
    section["load_after"] = load()
    return section


def write(out: Path, section: dict[str, Any]) -> str:
    """bench/results/distributed_run.md and .json: this section's last run, whichever parts it measured."""
    return write_section(out, "distributed_run", section, markdown(section))


def main(parts: str, reps: int, out: Path, machine: str) -> int:
    """``--only-distributed [download,lab,kills]``: the parts named; bench/results/distributed_run.md, .json.
    The download comes from BENCH_DOWNLOAD_CACHE (default bench/out/), generated there when missing."""
    cache = Path(os.environ.get("BENCH_DOWNLOAD_CACHE", str(ROOT / "bench" / "out")))
    chosen = [part.strip() for part in parts.split(",") if part.strip()]
    with tempfile.TemporaryDirectory(prefix="surveillance-bench-") as folder:
        section = measure(
            os.environ["SURVEILLANCE_DATABASE_URL"],
            Path(folder),
            reps,
            machine,
            cache,
            chosen,
            KILLS_PER_KIND,
        )
    print(write(out, section))
    print(f"logs: {LOGS}")
    return 0
