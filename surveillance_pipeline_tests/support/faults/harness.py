"""The fault trials: each starts from snapshot A in the target, disturbs a load of snapshot B, and checks.

After every fault the suite checks three things, the columns of ``make faults``'s table:
- target intact: the target's rows (md5 in key order) equal snapshot A's exactly;
- state consistent: the state row's job key is A's, its parts are the last loaded provenance's, and the rows
  are what that key describes (``snapshot_holds`` for devil_snapshot, A's reference md5 for occurrences);
- converged: the next ordinary run loads B, and the target then equals B's reference md5.
Concurrency trials instead check that exactly one of N simultaneous runs loaded and the rest skipped. They
also force the overlap they claim: the run that loads is held inside its load transaction until every
other one is seen waiting (at the partition's lock, or in the pool's queue); a trial where that is not
seen fails its row as "NO overlap seen", whatever its target and state hold.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from surveillance_pipeline.core.keys import advisory_lock_id
from surveillance_pipeline.core.partition_files import replace_file
from surveillance_pipeline.core.refresh import (
    LOADED,
    SKIPPED,
    WHOLE_TARGET,
    RefreshOutcome,
    ensure_state_tables,
    last_loaded_parts,
)
from surveillance_pipeline.gbif.ingest import ingest_species
from surveillance_pipeline.gbif.raw_snapshots import RawSnapshot, read_raw_snapshot
from surveillance_pipeline.gbif.registry import species_by_slug
from surveillance_pipeline.lab.deliveries import write_lab_delivery
from surveillance_pipeline.lab.gbif_client import LabGbifClient
from surveillance_pipeline.occurrences import load
from surveillance_pipeline.occurrences.derive import derive_occurrences
from surveillance_pipeline.snapshots import devil
from surveillance_pipeline.snapshots.deliveries import newest_delivery, read_delivery
from surveillance_pipeline_tests.support.faults.points import (
    BLOCK,
    FAULT_ACTION_VARIABLE,
    FAULT_POINT_VARIABLE,
    FAULT_SIGNAL_VARIABLE,
    KILL,
)
from surveillance_pipeline_tests.support.faults.worker import DEVIL, FAILED, materialize_target

SPECIES = species_by_slug(DEVIL)
TARGETS = ("occurrences", "devil_snapshot")
WAIT_SECONDS = 120.0
OCCURRENCES_MD5 = (
    "SELECT count(*), md5(coalesce(string_agg(concat_ws('|', id, species_id, year, longitude, latitude,"
    " license, ST_AsEWKT(geom)), E'\\n' ORDER BY id), '')) FROM occurrences WHERE species_id = %s"
)
# Backends of this database waiting for one advisory lock (a bigint key is classid, objid; objsubid 1).
WAITING_FOR_LOCK = (
    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objsubid = 1"
    " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    " AND classid::bigint = %s AND objid::bigint = %s"
)


@dataclass(frozen=True)
class Snapshots:
    """Two data folders: A (the lab's devil records) and B (one record fewer, one year corrected)."""

    a: Path
    b: Path


def prepare_snapshots(root: Path) -> Snapshots:
    """Raw, derived and delivery files of A and B for the devil, written like the pipeline writes them."""
    snapshots = Snapshots(root / "a", root / "b")
    raw_a, raw_b = (folder / "raw" / f"{DEVIL}.json" for folder in (snapshots.a, snapshots.b))
    ingest_species(LabGbifClient(), SPECIES, raw_a, retrieved="2026-11-02T00:00:00Z")
    first = read_raw_snapshot(raw_a)
    fewer = RawSnapshot(first.request, "2026-11-09T00:00:00Z", first.source, first.records[1:])
    replace_file(raw_b, fewer.to_bytes())
    for folder, raw in ((snapshots.a, raw_a), (snapshots.b, raw_b)):
        derived = derive_occurrences(read_raw_snapshot(raw), SPECIES, raw)
        replace_file(folder / "derived" / f"{DEVIL}.csv", derived.data)
    write_lab_delivery(snapshots.a, "A", "2026-11-02")
    write_lab_delivery(snapshots.b, "B", "2026-11-09")
    return snapshots


def load_in_process(conn: psycopg.Connection, target: str, folder: Path) -> RefreshOutcome:
    """The core load the assets call, run here (no Dagster): how each trial puts A back."""
    if target == "occurrences":
        derived = load.verified_derived_file(
            conn, SPECIES, folder / "raw" / f"{DEVIL}.json", folder / "derived" / f"{DEVIL}.csv"
        )
        return load.load_occurrences(
            conn, species=SPECIES, derived=derived, rules=load.OccurrenceRules(), run_id="fault-suite"
        )
    delivery = read_delivery(_newest(folder))
    return devil.refresh_devil_snapshot(
        conn, delivery=delivery, rules=devil.SnapshotRules(), run_id="fault-suite"
    )


def _newest(folder: Path) -> Path:
    path = newest_delivery(folder / "deliveries" / DEVIL)
    assert path is not None, f"no delivery under {folder}"
    return path


def fingerprint(conn: psycopg.Connection, target: str) -> tuple[int, str]:
    """(rows, md5 of the rows in key order) of the target (the devil's partition of occurrences)."""
    if target == "occurrences":
        row = conn.execute(OCCURRENCES_MD5, [SPECIES.species_id]).fetchone()
        assert row is not None
        return int(row[0]), row[1]
    return devil.table_fingerprint(conn, devil.DEVIL_SNAPSHOT.name)


def _partition(target: str) -> str:
    return DEVIL if target == "occurrences" else WHOLE_TARGET


def state_describes(
    conn: psycopg.Connection, target: str, folder: Path, reference: tuple[int, str]
) -> tuple[bool, str]:
    """Whether the state row names ``folder``'s snapshot, agrees with provenance, and the rows match it."""
    partition = _partition(target)
    state = conn.execute(
        "SELECT job_key, parts, rows FROM target_state WHERE target = %s AND partition_key = %s",
        [target, partition],
    ).fetchone()
    if state is None:
        return False, "no state row"
    job_key, parts, rows = state
    if parts != last_loaded_parts(conn, target, partition):
        return False, "state parts differ from the last loaded provenance"
    if target == "occurrences":
        derived = (folder / "derived" / f"{DEVIL}.csv").read_bytes()
        expected_key = load.occurrence_job_parts(derived, load.OccurrenceRules()).key
        if job_key != expected_key:
            return False, "state key is not the snapshot's"
        if (rows, *fingerprint(conn, target)[1:]) != reference:
            return False, "rows differ from the snapshot's reference load"
        return True, "ok"
    verdict = devil.snapshot_holds(conn, read_delivery(_newest(folder)))
    if rows != reference[0]:
        return False, f"state says {rows} rows, reference {reference[0]}"
    return verdict.holds, verdict.detail


@dataclass
class Tally:
    """One line of the table: a fault and how its trials came out."""

    fault: str
    trials: int = 0
    intact: int = 0
    consistent: int = 0
    converged: int = 0
    # Trials that did not bring about the fault they test (an overlap not seen): the row fails, and the
    # worker column says why, while the other columns still say what the target and its state hold.
    unforced: int = 0
    notes: list[str] = field(default_factory=list)

    def add(self, intact: bool, consistent: bool, converged: bool, note: str, forced: bool = True) -> None:
        self.trials += 1
        self.intact += intact
        self.consistent += consistent
        self.converged += converged
        self.unforced += not forced
        self.notes.append(note)

    @property
    def passed(self) -> bool:
        return (
            self.trials > 0
            and self.trials == self.intact == self.consistent == self.converged
            and not self.unforced
        )

    def row(self) -> tuple[str, str, str, str, str, str]:
        # The most common worker outcome, then any other, so a surprise is visible in the table.
        counts: dict[str, int] = {}
        for note in self.notes:
            counts[note] = counts.get(note, 0) + 1
        worker = "; ".join(f"{note} ×{n}" for note, n in sorted(counts.items(), key=lambda kv: -kv[1]))
        return (
            self.fault,
            str(self.trials),
            f"{self.intact}/{self.trials}",
            f"{self.consistent}/{self.trials}",
            f"{self.converged}/{self.trials}",
            worker,
        )


@dataclass
class Bench:
    """A database, the two snapshots, and the reference fingerprints of A and B for each target."""

    database_url: str
    snapshots: Snapshots
    work: Path
    reference: dict[tuple[str, str], tuple[int, str]] = field(default_factory=dict)

    @contextmanager
    def connect(self) -> Iterator[psycopg.Connection]:
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            yield conn

    @contextmanager
    def connect_to(self, database_url: str) -> Iterator[psycopg.Connection]:
        with psycopg.connect(database_url, autocommit=True) as conn:
            yield conn

    def calibrate(self) -> None:
        """Load A then B of each target once, recording what each looks like when loaded cleanly."""
        with self.connect() as conn:
            ensure_state_tables(conn)
            for target in TARGETS:
                for name, folder in (("a", self.snapshots.a), ("b", self.snapshots.b)):
                    load_in_process(conn, target, folder)
                    self.reference[target, name] = fingerprint(conn, target)

    def reset_to_a(self, target: str) -> None:
        with self.connect() as conn:
            load_in_process(conn, target, self.snapshots.a)
            assert fingerprint(conn, target) == self.reference[target, "a"]

    def spawn(
        self,
        target: str,
        *,
        point: str | None,
        action: str,
        signal_file: Path,
        start_file: Path | None = None,
        shared_instance: dict[str, str] | None = None,
        whole_reload: bool = False,
    ) -> subprocess.Popen[str]:
        """A worker loading B; ``shared_instance`` is the environment naming a DAGSTER_HOME to use;
        ``whole_reload``: B replaces A whole, not by record-level delta."""
        env = dict(os.environ, SURVEILLANCE_DATABASE_URL=self.database_url, **(shared_instance or {}))
        for name in (FAULT_POINT_VARIABLE, FAULT_ACTION_VARIABLE, FAULT_SIGNAL_VARIABLE):
            env.pop(name, None)
        if point is not None:
            env.update(
                {
                    FAULT_POINT_VARIABLE: point,
                    FAULT_ACTION_VARIABLE: action,
                    FAULT_SIGNAL_VARIABLE: str(signal_file),
                }
            )
        command = [sys.executable, "-m", "surveillance_pipeline_tests.support.faults.worker", target]
        command.append(str(self.snapshots.b))
        if start_file is not None:
            command += ["--start-file", str(start_file)]
        if shared_instance is not None:
            command.append("--shared-instance")
        if whole_reload:
            command.append("--whole-reload")
        return subprocess.Popen(  # noqa: S603  # our own worker module, arguments we built
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    def after_fault(self, target: str) -> tuple[bool, bool, bool]:
        """Intact, consistent, converged: checked from fresh connections after the fault."""
        with self.connect() as conn:
            intact = fingerprint(conn, target) == self.reference[target, "a"]
            consistent, _ = state_describes(conn, target, self.snapshots.a, self.reference[target, "a"])
        outcome = materialize_target(target, self.snapshots.b, self.database_url)
        with self.connect() as conn:
            converged = (
                outcome["action"] == LOADED
                and fingerprint(conn, target) == self.reference[target, "b"]
                and state_describes(conn, target, self.snapshots.b, self.reference[target, "b"])[0]
            )
        return intact, consistent, converged


def wait_for_signal(path: Path, process: subprocess.Popen[str]) -> tuple[str, int]:
    """(fault point name, backend pid) once the worker reached its fault point."""
    deadline = time.monotonic() + WAIT_SECONDS
    while not path.exists():
        if process.poll() is not None and not path.exists():
            _, err = process.communicate()
            raise RuntimeError(f"worker exited {process.returncode} before its fault point: {err[-2000:]}")
        if time.monotonic() > deadline:
            process.kill()
            raise RuntimeError("worker never reached its fault point")
        time.sleep(0.02)
    name, _pid, backend = path.read_text(encoding="utf-8").split()
    return name, int(backend)


def _wait_for_any_signal(path: Path, processes: list[subprocess.Popen[str]]) -> tuple[str, int, int]:
    """(fault point, process id, backend pid) once one of ``processes`` reached its fault point."""
    deadline = time.monotonic() + WAIT_SECONDS
    while not path.exists():
        if all(process.poll() is not None for process in processes) and not path.exists():
            raise RuntimeError("every worker exited before its fault point")
        if time.monotonic() > deadline:
            for process in processes:
                process.kill()
            raise RuntimeError("no worker reached its fault point")
        time.sleep(0.02)
    name, pid, backend = path.read_text(encoding="utf-8").split()
    return name, int(pid), int(backend)


def _trial_files(bench: Bench, label: str, number: int) -> tuple[Path, Path]:
    signal_file = bench.work / f"{label}-{number}.signal"
    return signal_file, Path(f"{signal_file}.release")


def kill_trial(
    bench: Bench, tally: Tally, target: str, point: str, number: int, whole_reload: bool = False
) -> None:
    """SIGKILL the materializing process at ``point`` (it kills itself there, so the moment is exact)."""
    bench.reset_to_a(target)
    signal_file, _ = _trial_files(bench, f"kill-{target}-{point}", number)
    process = bench.spawn(
        target, point=point, action=KILL, signal_file=signal_file, whole_reload=whole_reload
    )
    process.communicate(timeout=WAIT_SECONDS)
    reached = signal_file.exists() and signal_file.read_text(encoding="utf-8").split()[0] == point
    killed = process.returncode == -signal.SIGKILL and reached
    intact, consistent, converged = bench.after_fault(target)
    tally.add(intact and killed, consistent, converged, "killed at point" if killed else "NOT killed")


def worker_report(stdout: str) -> dict[str, object]:
    """The worker's last stdout line: its outcome, or its error (type, message, connection_lost)."""
    lines = stdout.strip().splitlines()
    return json.loads(lines[-1]) if lines else {}


def interrupted_trial(
    bench: Bench,
    tally: Tally,
    target: str,
    point: str,
    number: int,
    interrupt: Callable[[int], None],
    label: str,
) -> str:
    """Block the worker at ``point``, ``interrupt`` its backend (terminate it, stop the server), release."""
    bench.reset_to_a(target)
    signal_file, release = _trial_files(bench, f"{label}-{target}-{point}", number)
    process = bench.spawn(target, point=point, action=BLOCK, signal_file=signal_file)
    _, backend = wait_for_signal(signal_file, process)
    interrupt(backend)
    release.touch()
    out, err = process.communicate(timeout=WAIT_SECONDS)
    report = worker_report(out)
    clear = process.returncode == FAILED and bool(report.get("connection_lost"))
    intact, consistent, converged = bench.after_fault(target)
    note = f"failed: {report.get('error')}" if clear else f"exit {process.returncode}: {err.strip()[-300:]}"
    tally.add(intact and clear, consistent, converged, note)
    return str(report.get("message", ""))


def terminate_backend(bench: Bench) -> Callable[[int], None]:
    def interrupt(backend: int) -> None:
        with bench.connect() as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", [backend])

    return interrupt


def _partition_lock_waiters(conn: psycopg.Connection, target: str, partition: str) -> int:
    """How many backends wait for the advisory lock of ``target``'s ``partition`` (refresh_partition's)."""
    key = advisory_lock_id(target, partition) & 0xFFFF_FFFF_FFFF_FFFF
    row = conn.execute(WAITING_FOR_LOCK, [key >> 32, key & 0xFFFF_FFFF]).fetchone()
    return int(row[0]) if row is not None else 0


def _wait_for_lock_waiters(bench: Bench, target: str, count: int) -> str:
    """Empty once exactly ``count`` loaders wait for the partition's lock (the held one has it); else what
    was seen last when WAIT_SECONDS ran out."""
    deadline = time.monotonic() + WAIT_SECONDS
    waiting = 0
    with bench.connect() as conn:
        while time.monotonic() < deadline:
            waiting = _partition_lock_waiters(conn, target, _partition(target))
            if waiting == count:
                return ""
            time.sleep(0.05)
    return f"{waiting} of {count} seen waiting at the partition's lock"


def _wait_for_pool_queue(bench: Bench, target: str, count: int, dagster_home: Path, held_pid: int) -> str:
    """Empty once the held run (process ``held_pid``) is the pool's only holder, ``count`` other steps are
    queued for the pool and none waits at the partition's lock; else what was seen last."""
    import dagster as dg  # only this trial needs an instance here

    from surveillance_pipeline.orchestration.run_health import RunProcess

    seen = "nothing seen"
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance, bench.connect() as conn:
        deadline = time.monotonic() + WAIT_SECONDS
        while time.monotonic() < deadline:
            # The held run: the one whose process tag names the process held at the fault point.
            held = {
                run.run_id
                for run in instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED]))
                if (process := RunProcess.from_tags(run.tags, run.run_id)) is not None
                and process.pid == held_pid
            }
            info = instance.event_log_storage.get_concurrency_info(target)
            holders = [slot.run_id for slot in info.claimed_slots]
            queued = info.pending_run_ids - held
            waiting = _partition_lock_waiters(conn, target, _partition(target))
            whose = "the held run" if set(holders) == held else "not the held run"
            seen = (
                f"slot held by {len(holders)} run(s) ({whose}), {len(queued)} of {count} queued, "
                f"{waiting} at the partition's lock"
            )
            if waiting:
                return seen  # a step got past the pool: what the pool is there to prevent
            if len(held) == 1 and set(holders) == held and len(queued) == count:
                return ""
            time.sleep(0.1)
    return seen


def concurrent_trial(
    bench: Bench,
    tally: Tally,
    workers: int,
    number: int,
    shared_instance: dict[str, str] | None = None,
) -> None:
    """``workers`` plain materialize() calls of one occurrences partition at the same moment.

    The first to take the partition's lock is held just before COMMIT until all the others are seen
    waiting for that lock (exactly ``workers - 1`` waiters on that lock in pg_locks), so the overlap is
    certain rather than likely, however slowly the others start.

    With ``shared_instance`` (the environment of a DAGSTER_HOME whose instance has the project's pools),
    the others must instead be seen queued for the ``occurrences`` pool, the held run the pool's only
    holder, and none waiting at the database lock: the pool serializes the runs before they reach the
    database. Either way, the held run is released only then (or after WAIT_SECONDS, failing the row).
    """
    target = "occurrences"
    bench.reset_to_a(target)
    with bench.connect() as conn:
        marker = conn.execute("SELECT coalesce(max(id), 0) FROM provenance").fetchone()
    assert marker is not None
    signal_file, release = _trial_files(bench, f"concurrent-{workers}", number)
    start = bench.work / f"concurrent-{workers}-{number}.start"
    processes = [
        bench.spawn(
            target,
            point="before_commit",
            action=BLOCK,
            signal_file=signal_file,
            start_file=start,
            shared_instance=shared_instance,
        )
        for _ in range(workers)
    ]
    start.touch()
    unseen = "not reached"
    try:
        _, held_pid, _ = _wait_for_any_signal(signal_file, processes)
        if shared_instance is None:
            unseen = _wait_for_lock_waiters(bench, target, workers - 1)
        else:
            home = Path(shared_instance["DAGSTER_HOME"])
            unseen = _wait_for_pool_queue(bench, target, workers - 1, home, held_pid)
    finally:
        release.touch()
    results = [process.communicate(timeout=WAIT_SECONDS) for process in processes]
    actions = sorted(str(worker_report(out).get("action", "failed")) for out, _ in results)
    expected = sorted([LOADED] + [SKIPPED] * (workers - 1))
    with bench.connect() as conn:
        rows, md5 = fingerprint(conn, target)
        recorded = conn.execute(
            "SELECT action, count(*) FROM provenance WHERE id > %s AND asset = %s GROUP BY action",
            [marker[0], target],
        ).fetchall()
        intact = (rows, md5) == bench.reference[target, "b"]
        consistent = state_describes(conn, target, bench.snapshots.b, bench.reference[target, "b"])[
            0
        ] and dict(recorded) == {LOADED: 1, SKIPPED: workers - 1}
        again = load_in_process(conn, target, bench.snapshots.b)
    converged = actions == expected and again.action == SKIPPED
    loaded = actions.count(LOADED)
    note = f"{loaded} loaded, {actions.count(SKIPPED)} skipped" + (
        f", NO overlap seen: {unseen}" if unseen else ""
    )
    tally.add(intact, consistent, converged, note, forced=not unseen)
