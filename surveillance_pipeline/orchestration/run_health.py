"""Dead runs must not block live ones: a run whose process is gone gives back its pool slots.

Every asset names a pool with a limit of one, and Dagster keeps a step's slot until its run ends. A run
killed outright (SIGKILL, the machine's OOM killer, a lost laptop lid) never ends in Dagster's eyes: it
stays STARTED and keeps its slot, and every later run of that target waits behind it for good. Run
monitoring (dagster.yaml) cannot see it either: the default run launcher has no worker health check, and a
``dagster asset materialize`` run has no launcher at all.

A run that waits for a slot must also stop when told to. Dagster defers SIGINT/SIGTERM outside a step's
own code (it only notes them, to act at the next step), so a run waiting for a slot ignored both and
waited on. ``stop_promptly_while_waiting`` keeps Dagster's handling and adds one thing: a signal that
finds the run waiting for a slot ends the wait at once with a KeyboardInterrupt, which Dagster reports
as an interrupted run (its claims are released). A signal that comes mid-step is Dagster's, as before.

So each run says where it runs: when its resources are set up (before any step claims a slot), the run is
tagged with its host, its process id and that process's start time. Then, still before any step claims
a slot, it looks at the runs Dagster believes are alive: one that ran on this host in a process that is
gone (no such pid, or a pid reused by a younger process) is marked failed, with a log line naming it, and
its slots are freed. Runs on other hosts are left to their own host. The runs holding the slots of the
pools this run will need are named in its log, so a run that waits says who it waits for.

A run the daemon queues may wait for a slot before any code of its own runs (the run queue holds runs
whose pools are full), so ``dead_runs_sensor`` does the same every 30 seconds from the daemon's side,
and both also free what runs that have ended still hold (a claim left queued by an interrupted run).
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import dagster as dg

from surveillance_pipeline.orchestration.dagster_internals import HIDDEN_TAG_PREFIX, executor_state

# One tag says where a run runs, in words: "pid 1234 (started 5678) on host/pidns:4026531836, for run
# <run id>". The run id is the run that wrote it: Dagster copies a run's tags to its re-executions, and a
# re-execution carries its parent's process until it tags its own, so it must not be judged by the
# parent's (gone) one. Bookkeeping, not for display: under Dagster's hidden prefix, so the Runs list shows
# the tags a user set (the step's host and process are in the run's own log).
PROCESS_TAG = f"{HIDDEN_TAG_PREFIX}surveillance/process"
# The tag's name before it was hidden: a run started by an older version is still judged by it.
LEGACY_PROCESS_TAG = "surveillance/process"
_PROCESS_TEXT = re.compile(
    r"pid (?P<pid>[0-9]+) \(started (?P<start>[0-9]*)\) on (?P<host>.+), for run (?P<run>\S+)"
)
ALIVE = (dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.CANCELING)
# How long after a signal the run may still be inside Dagster's own bookkeeping before it reaches the wait.
SIGNAL_WATCH_SECONDS = 60.0


@dataclass(frozen=True)
class RunProcess:
    host: str
    pid: int
    start: str

    @classmethod
    def current(cls) -> RunProcess:
        return cls(this_host(), os.getpid(), process_start(os.getpid()) or "")

    def tags(self, run_id: str) -> dict[str, str]:
        return {PROCESS_TAG: f"pid {self.pid} (started {self.start}) on {self.host}, for run {run_id}"}

    def describe(self) -> str:
        return f"process {self.pid} on {self.host}"

    @classmethod
    def from_tags(cls, tags: Mapping[str, str], run_id: str) -> RunProcess | None:
        """The process run ``run_id`` tagged itself with; None when it has not (yet), or when the tag was
        copied from another run (a re-execution inherits its parent's tags)."""
        match = _PROCESS_TEXT.fullmatch(tags.get(PROCESS_TAG) or tags.get(LEGACY_PROCESS_TAG, ""))
        if match is None or match["run"] != run_id:
            return None
        return cls(match["host"], int(match["pid"]), match["start"])

    def is_gone(self) -> bool:
        """Whether this process has ended. Only answerable on its own host; elsewhere, False."""
        if self.host != this_host():
            return False
        start = process_start(self.pid)
        if start is None:
            return True
        # The pid lives on, but as another process (pids are reused): the run's own process is gone.
        return bool(self.start) and start != self.start


def _process_of(run: dg.DagsterRun) -> str:
    process = RunProcess.from_tags(run.tags, run.run_id)
    return process.describe() if process else "process"


def this_host() -> str:
    """The host name and the pid namespace: two containers on one machine may share a host name (host
    networking) while their pids mean different processes, so each judges only its own namespace."""
    try:
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return socket.gethostname()
    return f"{socket.gethostname()}/pidns:{namespace}"


def process_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/<pid>/stat); None if none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) is in parentheses and may hold spaces: count fields after its end.
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[19] if len(fields) > 19 else None


def claim_run_process(
    instance: dg.DagsterInstance,
    run: dg.DagsterRun,
    log: dg.DagsterLogManager | None,
    *,
    stop_promptly: bool = True,
) -> None:
    """Tag ``run`` with this process, then fail the dead runs on this host and free their slots.

    ``stop_promptly``: also end a wait for a pool slot at SIGTERM (the in-process executor's loop; the
    Celery executor's run process waits for its workers, not in that loop)."""
    if stop_promptly:
        stop_promptly_while_waiting()
    process = RunProcess.current()
    if RunProcess.from_tags(dict(run.tags), run.run_id) != process:
        instance.add_run_tags(run.run_id, process.tags(run.run_id))
    for dead in release_dead_runs(instance, exclude=run.run_id):
        if log is not None:
            log.warning(
                f"run {dead.run_id} ({dead.job_name}) was still {dead.status.value} in Dagster, but its "
                f"{_process_of(dead)} is gone: marked failed, its pool slots freed"
            )
    if log is not None:
        # Every pool, not only this run's: a run's plan is not at hand where resources are set up.
        pools = sorted(instance.event_log_storage.get_concurrency_keys())
        for line in slot_holders(instance, pools, exclude=run.run_id):
            log.info(line)


def stop_promptly_while_waiting() -> None:
    """Make SIGINT and SIGTERM end a wait for a pool slot at once (see the module's docstring).

    Dagster's own handler stays in place. The signal is seen a second way: ``signal.set_wakeup_fd``
    writes every signal's number to a socket, whatever Python handler runs, and a watcher thread reads
    it. When the main thread is then in the executor's loop and not inside a step, the watcher raises
    KeyboardInterrupt in it; inside a step (or once a step starts) Dagster's handling applies unchanged.
    """
    global _watcher
    if threading.current_thread() is not threading.main_thread() or _watcher is not None:
        return
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    try:
        previous = signal.set_wakeup_fd(writer.fileno())
    except ValueError:
        return  # not the main thread of the main interpreter
    if previous != -1:
        signal.set_wakeup_fd(previous)  # someone else's (an event loop's): leave it to them
        return
    main = threading.main_thread().ident
    # Both ends live as long as the process: the signal machinery writes to the writer's descriptor.
    _wakeup_sockets.extend((reader, writer))
    _watcher = threading.Thread(target=_watch_signals, args=(reader, main), daemon=True)
    _watcher.start()


_watcher: threading.Thread | None = None
_wakeup_sockets: list[socket.socket] = []


def _watch_signals(reader: socket.socket, main: int | None) -> None:
    while True:
        received = reader.recv(64)
        if not any(number in (signal.SIGINT, signal.SIGTERM) for number in received):
            continue
        deadline = time.monotonic() + SIGNAL_WATCH_SECONDS
        while time.monotonic() < deadline and main is not None:
            state = executor_state(sys._current_frames().get(main))  # noqa: SLF001 - stdlib's view of a thread
            if state == "waiting":
                ctypes.pythonapi.PyThreadState_SetAsyncExc(
                    ctypes.c_ulong(main), ctypes.py_object(KeyboardInterrupt)
                )
                break
            if state in ("in step", "done"):
                break  # Dagster's own interrupt handling has it from here
            time.sleep(0.05)


def release_dead_runs(instance: dg.DagsterInstance, exclude: str | None = None) -> list[dg.DagsterRun]:
    """Mark failed every run Dagster thinks alive whose process on this host is gone, and free the slots
    (claimed or queued for) of those runs and of runs that ended without giving theirs back."""
    released = []
    for record in instance.get_run_records(filters=dg.RunsFilter(statuses=list(ALIVE))):
        run = record.dagster_run
        process = RunProcess.from_tags(dict(run.tags), run.run_id)
        if run.run_id == exclude or process is None or not process.is_gone():
            continue
        instance.report_run_failed(
            run, f"its process {process.pid} on {process.host} is gone (killed): marked failed by a later run"
        )
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        released.append(run)
    storage = instance.event_log_storage
    # Every pool's slots in one read (three statements), not a read per pool: each run's setup asks.
    infos = storage.get_concurrency_infos(sorted(storage.get_concurrency_keys()))
    for _, info in sorted(infos.items()):
        for run_id in sorted(info.active_run_ids | {step.run_id for step in info.pending_steps}):
            holder = instance.get_run_by_id(run_id)
            # An interrupted run's queued claim, or a finished run's slot: nothing will ever give it back.
            if run_id != exclude and holder is not None and holder.status not in ALIVE:
                storage.free_concurrency_slots_for_run(run_id)
    return released


def slot_holders(instance: dg.DagsterInstance, pools: Iterable[str], exclude: str | None = None) -> list[str]:
    """One line per pool slot another run holds: which run, which step, which process."""
    lines = []
    infos = instance.event_log_storage.get_concurrency_infos(list(pools))
    for pool, info in sorted(infos.items()):
        for slot in info.claimed_slots:
            if slot.run_id == exclude:
                continue
            holder = instance.get_run_by_id(slot.run_id)
            where = ""
            if (
                holder is not None
                and (process := RunProcess.from_tags(dict(holder.tags), slot.run_id)) is not None
            ):
                where = f", process {process.pid} on {process.host}"
            status = holder.status.value if holder is not None else "unknown to this instance"
            lines.append(
                f"pool {pool}: slot held by run {slot.run_id} step {slot.step_key} ({status}{where})"
            )
    return lines


@dg.sensor(
    name="dead_runs_sensor",
    default_status=dg.DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=30,
    description="Every 30 s: a run Dagster thinks alive whose process on this host is gone is marked "
    "failed and its pool slots are freed, so runs queued behind it can start.",
)
def dead_runs_sensor(context: dg.SensorEvaluationContext) -> dg.SkipReason:
    # Queued runs may wait for a slot before any code of theirs runs; this frees it without them. The
    # daemon's sensors run on the host that launches run workers, so the processes are its own.
    released = release_dead_runs(context.instance)
    if not released:
        return dg.SkipReason("no dead run holds anything")
    return dg.SkipReason(
        "marked failed, slots freed: "
        + ", ".join(f"{run.run_id} ({_process_of(run)} gone)" for run in released)
    )
