"""``make run``: materialize every asset on the lab data, then summarize what each asset did. (Its entry is
make_run.py, which under the distributed profile starts weighing the species before this module's imports.)

First the source assets are observed (so the loads record the versions the sensors will see), then one run
per partitioning, each over all its partitions (not one process per partition): the 71 species, the days
that have a batch file, then the unpartitioned assets. They are runs of the code location's jobs, on the
project's Dagster instance, executed in this process: the UI lists them under their jobs and can re-execute
them. The summary comes from the provenance rows the runs wrote. The lab's inputs (delivery A of the devil,
three weeks of batches) are written first when none are there. When a step fails, its own error is the
last line printed: that is the line a user reads.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess  # noqa: S404  # this module's own runs, side by side
import sys
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TextIO

import dagster as dg
import psycopg
from psycopg import sql

from surveillance_pipeline.commands import exit_process
from surveillance_pipeline.commands.disk_full import collapse_disk_full
from surveillance_pipeline.commands.species_weights import (
    ForkedWeights,
    WeighingPlan,
    weigh_species,
)
from surveillance_pipeline.core.day_files import is_day_file_name
from surveillance_pipeline.core.record_delta import change_counts, describe_changes
from surveillance_pipeline.core.settings import (
    CODE_LOCATION_ATTRIBUTE,
    CODE_LOCATION_MODULE,
    DATABASE_URL_VARIABLE,
    PROJECT_ROOT,
    data_dir,
    is_distributed,
)
from surveillance_pipeline.definitions import defs, table_targets
from surveillance_pipeline.gbif.registry import load_registry, partition_keys
from surveillance_pipeline.lab.batches import write_lab_batches
from surveillance_pipeline.lab.deliveries import write_lab_delivery
from surveillance_pipeline.ledger.feed import ASSET as FEED_ASSET
from surveillance_pipeline.ledger.feed import OCCURRENCE_FEED
from surveillance_pipeline.orchestration.compute_logs import terminal_at_level
from surveillance_pipeline.orchestration.dagster_internals import (
    execute_in_code_location,
    job_op_names,
)
from surveillance_pipeline.orchestration.distributed import (
    partition_writers,
    side_by_side_ranges,
)
from surveillance_pipeline.orchestration.error_words import one_line, raised_by_the_step
from surveillance_pipeline.orchestration.jobs import (
    BATCH_DAYS_JOB,
    OBSERVE_SOURCES_JOB,
    SPECIES_ASSETS_JOB,
    WHOLE_TARGET_ASSETS_JOB,
)
from surveillance_pipeline.orchestration.partitions import add_batch_days
from surveillance_pipeline.orchestration.pools import ensure_pool_limits
from surveillance_pipeline.orchestration.reporting import failed_partitions, partition_range_tags
from surveillance_pipeline.orchestration.resources import DataPaths, GbifSource, Warehouse
from surveillance_pipeline.orchestration.run_config import run_config_for
from surveillance_pipeline.planning.plan import ORDER as PLAN_ORDER
from surveillance_pipeline.planning.plan import shown_name
from surveillance_pipeline.snapshots.deliveries import newest_delivery
from surveillance_pipeline.snapshots.devil import DEVIL_SLUG

WORKSPACE_FILE = PROJECT_ROOT / "workspace.yaml"
LAB_DELIVERY_A_DATE = "2026-11-02"
# The summary lists the assets in the order the plan does (the graph's, upstream first).
ASSET_ORDER = PLAN_ORDER
# make run's own argument for a child that executes one run (_ChildRuns), and the line it prints.
ONE_RUN = "--one-run"
RUN_ID_LINE = "run id: "
# How often make run looks for a finished child run (_ChildRuns.run_all).
CHILD_POLL_SECONDS = 0.1
# What make run's terminal shows of its runs' console logs (their compute logs keep every level).
TERMINAL_LEVEL = "WARNING"


def prepare_lab_inputs(root: Path) -> None:
    """Write the lab's delivery A and its batches, unless the user's folders already hold some. Delivery A
    is the devil's lab records: a registry without the devil gets none (devil_snapshot then says "no
    delivery yet")."""
    has_devil = any(species.slug == DEVIL_SLUG for species in load_registry())
    if has_devil and newest_delivery(root / "deliveries" / DEVIL_SLUG) is None:
        write_lab_delivery(root, "A", LAB_DELIVERY_A_DATE)
    if not sorted((root / "batches").glob("*.csv")):
        write_lab_batches(root)


def batch_days_present(root: Path) -> list[str]:
    """The batch files named by a day (YYYY-MM-DD.csv); anything else there is no partition."""
    return sorted(path.stem for path in (root / "batches").glob("*.csv") if is_day_file_name(path.name))


def run_plan(
    instance: dg.DagsterInstance,
    root: Path,
    species: list[str] | None = None,
    weights: Mapping[str, int] | None = None,
) -> list[tuple[str, dict[str, str]]]:
    """The runs of ``make run``, in order: each job and its run tags (over ``species``, default all; split
    by ``weights``, records per species, when given). The days with a batch file become partitions first
    (as batches_sensor adds them)."""
    species = species or partition_keys()
    return [
        (OBSERVE_SOURCES_JOB, {}),
        # One run in one process; under the distributed profile, one run per writer slot, executed side
        # by side (run_all_partitions).
        *(
            (SPECIES_ASSETS_JOB, partition_range_tags(first, last))
            for first, last in side_by_side_ranges(species, weights)
        ),
        batch_days_run(instance, root),
        (WHOLE_TARGET_ASSETS_JOB, {}),
    ]


def batch_days_run(instance: dg.DagsterInstance, root: Path) -> tuple[str, dict[str, str]]:
    """make run's run of the days that have a batch file, added as partitions first (as batches_sensor
    adds them)."""
    days = add_batch_days(instance, batch_days_present(root))
    return (BATCH_DAYS_JOB, partition_range_tags(days[0], days[-1]))


def weighing_plan(definitions: dg.Definitions) -> WeighingPlan | None:
    """What make run weighs the species by under the distributed profile, from the definitions'
    resources; None when it splits them by count (locally, where one run takes every species)."""
    resources = definitions.resources or {}
    gbif, paths, warehouse = resources.get("gbif"), resources.get("paths"), resources.get("warehouse")
    if not is_distributed() or not isinstance(gbif, GbifSource) or not isinstance(paths, DataPaths):
        return None
    verify = isinstance(warehouse, Warehouse) and warehouse.verify_targets
    return WeighingPlan(source=gbif.source, folder=paths.folder(), trust_stamps=not verify)


def species_weights(definitions: dg.Definitions) -> dict[str, int] | None:
    """Records per species, so make run can split species by work under the distributed profile
    (species_weights.weigh_species); None to split them by count."""
    plan = weighing_plan(definitions)
    return None if plan is None else weigh_species(plan)


def chosen_weigher(plan: WeighingPlan | None, early: ForkedWeights | None) -> ForkedWeights | None:
    """The weigher that weighs by ``plan`` (the definitions'): ``early`` when it does, else a new one;
    None when there is nothing to weigh. An early weigher with another plan (settings other than the
    code location's) is ended unheard."""
    if early is not None and early.plan == plan:
        return early
    if early is not None:
        early.abandon()
    return ForkedWeights(plan) if plan is not None else None


def run_all_partitions(
    instance: dg.DagsterInstance,
    definitions: dg.Definitions = defs,
    root: Path | None = None,
    children: _ChildRuns | None = None,
    weigher: ForkedWeights | None = None,
) -> list[dg.DagsterRun]:
    """The runs of ``run_plan``, as runs of the code location's jobs; stops after the first that fails.

    ``root`` is the data folder the definitions' ``paths`` resource points at. A run whose only failures
    are some partitions (the others loaded) fails, and the next runs still go, as they would from the UI.
    ``children``: the processes for the runs that go side by side (started here when not given, or too
    few). ``weigher``: the species' weights, weighed in a process of its own (else in a thread here).
    """
    root = root or data_dir()
    prepare_lab_inputs(root)
    ensure_pool_limits(instance, definitions)
    runs: list[dg.DagsterRun] = []

    # Consecutive runs of one job (the species runs under the distributed profile) go side by side, each
    # in a process of its own (as the daemon launches a backfill's runs): a run's process only hands its
    # steps to the workers and waits for them. (Side by side in threads of one process, make run under the
    # profile did not finish in test_distributed's 900 s: Dagster's run execution and dagster-celery's
    # result polling are written for a run's own process, as the daemon gives each run.)
    with children or _ChildRuns() as children, ThreadPoolExecutor(max_workers=1) as background:
        if is_distributed():
            # None when main forked them. Spawned here, their imports (seconds) overlap the index and the
            # observation instead of following them.
            children.start_ahead(partition_writers())
        # The downloads' index is built beside the observation (a run whose steps are on the workers under
        # the profile), and the species are split once both are done.
        weighing = weigher or background.submit(species_weights, definitions)
        observed = execute_job(instance, definitions, OBSERVE_SOURCES_JOB, {})
        runs.append(observed)
        if observed.status != dg.DagsterRunStatus.SUCCESS:
            return runs
        launched: list[tuple[str, dict[str, str]]] = []
        if is_distributed():
            # The days' run reads only the batch files, not the downloads: it takes a worker now, while
            # the downloads' index is built, instead of a slot after the species runs. There it added
            # 0.8 s to every run of a 600,000-record download on 2 workers (the species runs end together).
            launched = [batch_days_run(instance, root)]
            children.launch(*launched[0])
        plan = run_plan(instance, root, weights=weighing.result())
        if plan[0] != (OBSERVE_SOURCES_JOB, {}):
            raise AssertionError("make run's plan starts with the observation")
        for _, group in itertools.groupby(
            [entry for entry in plan[1:] if entry not in launched], key=_side_by_side_stage
        ):
            batch = list(group)
            if len(batch) == 1 and not launched:
                done = [execute_job(instance, definitions, *batch[0])]
            else:
                # The runs launched ahead end with the first of these stages, which waits for them.
                found = [instance.get_run_by_id(run_id) for run_id in children.run_all(batch)]
                done, launched = [run for run in found if run is not None], []
            runs += done
            if any(
                run.status != dg.DagsterRunStatus.SUCCESS and not _only_partitions_failed(instance, run)
                for run in done
            ):
                break
    return runs


def execute_job(
    instance: dg.DagsterInstance, definitions: dg.Definitions, job_name: str, tags: dict[str, str]
) -> dg.DagsterRun:
    """One run of the code location's job ``job_name``, executed here (its steps on the workers under the
    distributed profile), with the checked-in run config."""
    job = definitions.resolve_job_def(job_name)
    return execute_in_code_location(
        instance,
        job,
        workspace_file=WORKSPACE_FILE,
        module_name=CODE_LOCATION_MODULE,
        attribute=CODE_LOCATION_ATTRIBUTE,
        run_config=run_config_for(job_op_names(job)),
        tags=tags,
        steps_elsewhere=is_distributed(),
    )


def _side_by_side_stage(entry: tuple[str, dict[str, str]]) -> str:
    """Consecutive runs with the same stage go side by side: under the distributed profile the species
    runs and the days' run (occurrence_batches reads only the batch files, so it takes a worker as soon
    as a species run leaves one, not after the last); otherwise each job is its own stage."""
    job_name = entry[0]
    if is_distributed() and job_name in (SPECIES_ASSETS_JOB, BATCH_DAYS_JOB):
        return SPECIES_ASSETS_JOB
    return job_name


class _ChildRuns:
    """Processes that execute one run each, side by side, for ``run_all_partitions``.

    A child is forked from make run (``fork_ahead``) or spawned, importing the code location (a second or
    two: ``start_ahead``); it then reads its run (job and tags, one JSON line) from its stdin, executes it
    and prints its id. So children can be started ahead, before make run knows their runs, and take them
    the moment it does; a child that never gets one reads the end of its stdin and exits.
    """

    def __init__(self) -> None:
        self._idle: list[_Child] = []
        # Runs launched ahead of run_all (``launch``) and not yet seen to end, with their launch order.
        self._ahead: list[tuple[int, str, _Child]] = []
        self._launched = 0

    def __enter__(self) -> _ChildRuns:
        return self

    def __exit__(self, *_: object) -> None:
        for child in self._idle:
            if child.stdin is not None:
                child.stdin.close()
            child.wait()
        self._idle.clear()

    def start_ahead(self, count: int) -> None:
        """Children until ``count`` are idle, importing until a run comes."""
        self._idle += [self._start() for _ in range(count - len(self._idle))]

    def fork_ahead(self, count: int) -> None:
        """Children until ``count`` are idle, forked from this process: for a process that has imported
        the code location and opened nothing yet (no connection, no thread), as ``main`` is when it starts.

        A forked child shares the imports it would otherwise repeat: each spawned child spent 2.6 s of CPU
        importing the code location, 7.8 s of the lab's run under the profile (2 workers), on 2 cores that
        the workers' steps keep busy.
        """
        sys.stdout.flush()
        sys.stderr.flush()
        for _ in range(count - len(self._idle)):
            self._idle.append(_ForkedChild.fork(siblings=self._idle))

    @staticmethod
    def _start() -> subprocess.Popen[str]:
        command = [sys.executable, "-m", "surveillance_pipeline.commands.run", ONE_RUN]
        # This module, a fixed argument, no shell.
        return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # noqa: S603

    def _launch(self, job_name: str, tags: dict[str, str]) -> _Child:
        child = self._idle.pop(0) if self._idle else self._start()
        if child.stdin is None:
            raise RuntimeError("make run: a child run without a stdin")
        child.stdin.write(json.dumps([job_name, tags]) + "\n")
        child.stdin.close()
        return child

    def launch(self, job_name: str, tags: dict[str, str]) -> None:
        """One run now, in a process of its own, for a run of a single short step (the days'); the next
        ``run_all`` waits for it too, without counting it among the runs at once: in the lab, where the
        species are weighed at once, it held a slot the second species run then waited 1.4 s for."""
        self._ahead.append((self._launched, job_name, self._launch(job_name, tags)))
        self._launched += 1

    def run_all(self, batch: list[tuple[str, dict[str, str]]]) -> list[str]:
        """Each of ``batch`` (a job and a run's tags) as a run in a process of its own, at most
        ``partition_writers()`` at once (one per worker the pools admit: more runs would only wait for a
        slot, each holding its own connections to both databases); the runs' ids: those ``launch``ed
        before, then ``batch``'s, in that order."""
        waiting = [(self._launched + offset, entry) for offset, entry in enumerate(batch)]
        self._launched += len(batch)
        running: list[tuple[int, str, _Child]] = []
        ahead = self._ahead
        run_ids: dict[int, str] = {}
        while waiting or running or ahead:
            while waiting and len(running) < partition_writers():
                index, (job_name, tags) = waiting.pop(0)
                running.append((index, job_name, self._launch(job_name, tags)))
            # The runs still waiting get their processes now (already there when main forked them), ready
            # when a slot frees. Started only then, the days' run's process began its run 2.6 s later (the
            # lab, 2 workers).
            self.start_ahead(len(waiting))
            # Whichever run ends first frees its slot for the next (a child prints one line: its pipe never
            # fills while it waits here).
            while not (ended := [entry for entry in running + ahead if entry[2].poll() is not None]):
                time.sleep(CHILD_POLL_SECONDS)
            for entry in ended:
                (running if entry in running else ahead).remove(entry)
                index, job_name, child = entry
                # It has exited: its stdout holds all it printed (its stdin is closed, so no communicate).
                output = child.stdout.read() if child.stdout is not None else ""
                child.wait()
                lines = [line for line in output.splitlines() if line.startswith(RUN_ID_LINE)]
                if child.returncode != 0 or not lines:
                    raise RuntimeError(
                        f"make run: the {job_name} run in process {child.pid} ended with {child.returncode}"
                    )
                run_ids[index] = lines[-1].removeprefix(RUN_ID_LINE)
        return [run_ids[index] for index in sorted(run_ids)]


class _ForkedChild:
    """A child forked by ``_ChildRuns.fork_ahead``, seen as ``subprocess.Popen`` shows a spawned one: its
    run comes on ``stdin``, its standard output is ``stdout``."""

    def __init__(self, pid: int, stdin: TextIO, stdout: TextIO) -> None:
        self.pid, self.stdin, self.stdout = pid, stdin, stdout
        self.returncode: int | None = None

    @classmethod
    def fork(cls, siblings: Iterable[_Child]) -> _ForkedChild:
        """A child forked now, executing the run that comes on its stdin; ``siblings``, the children
        forked before it, whose pipes it must not hold: a sibling whose run pipe another child still holds
        open never sees its end."""
        run_read, run_write = os.pipe()
        out_read, out_write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: it never returns from here
            code = 1
            try:
                for sibling in siblings:
                    for pipe in (sibling.stdin, sibling.stdout):
                        if pipe is not None:
                            os.close(pipe.fileno())
                os.close(run_write)
                os.close(out_read)
                os.dup2(out_write, sys.stdout.fileno())  # as a spawned child's, its standard output is a pipe
                os.close(out_write)
                with os.fdopen(run_read, encoding="utf-8") as runs:
                    code = _one_run(runs)
            except BaseException:  # noqa: BLE001  # whatever ends the run, the child ends with it
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                # Not SystemExit: the parent's atexit handlers and objects are the parent's to end.
                os._exit(code)
        os.close(run_read)
        os.close(out_write)
        return cls(pid, os.fdopen(run_write, "w", encoding="utf-8"), os.fdopen(out_read, encoding="utf-8"))

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self) -> int:
        if self.returncode is None:
            self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
        return self.returncode


_Child = subprocess.Popen[str] | _ForkedChild


def _one_run(runs: TextIO) -> int:
    """A child of ``_ChildRuns``: the run named on ``runs`` (none when it ends first); prints its id."""
    line = runs.readline()
    if not line.strip():
        return 0
    job_name, tags = json.loads(line)
    with dg.DagsterInstance.get() as instance:
        run = execute_job(instance, defs, job_name, tags)
    print(f"{RUN_ID_LINE}{run.run_id}", flush=True)
    return 0


def _only_partitions_failed(instance: dg.DagsterInstance, run: dg.DagsterRun) -> bool:
    """Whether every step failure of the run names the partitions that failed (the others went on)."""
    failures = instance.get_records_for_run(run.run_id, of_type=dg.DagsterEventType.STEP_FAILURE).records
    return bool(failures) and len(failed_partitions(instance, run.run_id)) == len(failures)


def step_seconds(instance: dg.DagsterInstance, run_ids: list[str]) -> dict[str, float]:
    """Wall time of each step (one per asset) in the runs, from Dagster's own event log.

    Reads only the steps' start and success events: all of a run's events are ten times as many to fetch
    and deserialize, one per partition and asset.
    """
    started: dict[str, float] = {}
    seconds: dict[str, float] = {}
    step_events = {dg.DagsterEventType.STEP_START, dg.DagsterEventType.STEP_SUCCESS}
    for run_id in run_ids:
        for record in instance.get_records_for_run(run_id, of_type=step_events).records:
            entry = record.event_log_entry
            event = entry.dagster_event
            if event is None or entry.step_key is None:
                continue
            if event.event_type == dg.DagsterEventType.STEP_START:
                started[entry.step_key] = entry.timestamp
            elif entry.step_key in started:
                seconds[entry.step_key] = entry.timestamp - started[entry.step_key]
    return seconds


def held_rows(conn: psycopg.Connection, assets: Iterable[str]) -> dict[str, int]:
    """The rows each table the ``assets`` (as provenance names them) write holds now, counted: not what
    their state rows remember, which a hand edit would leave behind."""
    tables = {table.target.name: table.target.name for table in table_targets()}
    tables[FEED_ASSET] = OCCURRENCE_FEED.name
    held = {}
    for asset in assets:
        table = tables.get(asset)
        present = table is not None and conn.execute("SELECT to_regclass(%s)", [table]).fetchone()
        if table is not None and present and present[0] is not None:
            counted = conn.execute(
                sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))
            ).fetchone()
            held[asset] = int(counted[0]) if counted else 0
    return held


def summarize(database_url: str, run_ids: list[str], seconds: dict[str, float] | None = None) -> list[str]:
    """One line per asset: partitions loaded and skipped, rows, step time, and the reasons given. A
    table's rows are those it holds at the end (counted); a file's, those its outputs recorded."""
    with psycopg.connect(database_url) as conn:
        # The table is created by the first step that records a partition; when that step failed on an
        # empty warehouse there is nothing to summarize, and the step's error is what the user must see.
        exists = conn.execute("SELECT to_regclass('provenance') IS NOT NULL").fetchone()
        rows = (
            conn.execute(
                "SELECT asset, action, reason, rows, detail -> 'changes' FROM provenance"
                " WHERE run_id = ANY(%s)",
                [run_ids],
            ).fetchall()
            if exists and exists[0]
            else []
        )
        held = held_rows(conn, {row[0] for row in rows})
    actions: dict[str, Counter[str]] = defaultdict(Counter)
    reasons: dict[str, Counter[str]] = defaultdict(Counter)
    row_totals: Counter[str] = Counter()
    changes: dict[str, Counter[str]] = defaultdict(Counter)
    for asset, action, reason, row_count, changed in rows:
        actions[asset][action] += 1
        reasons[asset][reason] += 1
        row_totals[asset] += row_count
        if changed:
            changes[asset].update(change_counts(changed))
    for asset, count in held.items():
        row_totals[asset] = count
    width = max([len("asset"), *(len(shown_name(asset)) for asset in actions)])
    seconds = seconds or {}
    lines = [f"{'asset':<{width}} {'loaded':>6} {'skipped':>7} {'rows':>8} {'seconds':>7}  reason"]
    for asset in sorted(actions, key=lambda a: (ASSET_ORDER.index(a) if a in ASSET_ORDER else 99, a)):
        why = ", ".join(f"{reason} ({count})" for reason, count in sorted(reasons[asset].items()))
        if changes[asset]:
            why += f"; {describe_changes(changes[asset])}"
        lines.append(
            f"{shown_name(asset):<{width}} {actions[asset]['loaded']:>6} {actions[asset]['skipped']:>7}"
            # A table loaded inside another asset's step (regions) has no step time of its own.
            f" {row_totals[asset]:>8} {f'{seconds[asset]:.1f}' if asset in seconds else '-':>7}  {why}"
        )
    return lines


def run_failures(instance: dg.DagsterInstance, run_ids: list[str]) -> list[str]:
    """One line per failed partition or step of the runs, naming it and the error its code raised; for a
    run that failed outside its steps (its executor, say), the run's own error."""
    lines = []
    for run_id in run_ids:
        by_partition = failed_partitions(instance, run_id)
        step_failures = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.STEP_FAILURE).records
        for record in step_failures:
            entry = record.event_log_entry
            step = entry.step_key or "?"
            if step in by_partition:
                # Some partitions failed, the others loaded: one line each, in the step's words.
                lines += [f"{step} partition {key} failed: {why}" for key, why in by_partition[step].items()]
                continue
            data = entry.dagster_event.step_failure_data if entry.dagster_event else None
            text = one_line(raised_by_the_step(data.error)) if data and data.error else entry.message
            lines.append(f"{step} failed: {text}")
        if step_failures:
            continue
        run = instance.get_run_by_id(run_id)
        for record in instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.RUN_FAILURE).records:
            entry = record.event_log_entry
            error = (
                getattr(entry.dagster_event.event_specific_data, "error", None)
                if entry.dagster_event
                else None
            )
            text = one_line(raised_by_the_step(error)) if error else entry.message
            lines.append(f"{run.job_name if run else run_id[:8]} run failed: {text}")
    return lines


def main(early: ForkedWeights | None = None, started: float | None = None) -> int:
    """make run. ``early``: the species being weighed since before this module's imports (make_run.py),
    used when its plan is the definitions'; ``started``: when make run's process began."""
    started = time.perf_counter() if started is None else started
    children = _ChildRuns()
    # Before the instance opens a connection or the index a thread: the process that weighs the species
    # (first, so it holds none of the other children's pipes), then the species runs and the days' run.
    weigher = chosen_weigher(weighing_plan(defs), early)
    # The runs' console logs in full in their compute logs (the UI's stderr of each step), warnings and
    # errors alone on this terminal, the children's included: they inherit it. (Its thread only reads and
    # writes descriptors, so a child forked beside it holds no lock the thread held.)
    with terminal_at_level(TERMINAL_LEVEL):
        if is_distributed():
            children.fork_ahead(partition_writers() + 1)
        with dg.DagsterInstance.get() as instance:
            try:
                runs = run_all_partitions(instance, children=children, weigher=weigher)
            finally:
                if weigher is not None:
                    weigher.result()
            elapsed = time.perf_counter() - started
            run_ids = [r.run_id for r in runs]
            seconds = step_seconds(instance, run_ids)
            failed = [r.run_id for r in runs if r.status != dg.DagsterRunStatus.SUCCESS]
            failures = run_failures(instance, failed)
    succeeded = not failed
    print(
        f"{len(runs)} runs ({', '.join(r.run_id[:8] for r in runs)}): "
        f"{'succeeded' if succeeded else 'FAILED'} in {elapsed:.1f} s"
        f" ({len(partition_keys())} species partitions)"
    )
    try:
        summary = summarize(os.environ[DATABASE_URL_VARIABLE], run_ids, seconds)
    except psycopg.Error as error:
        # The summary is secondary: losing it must not hide why a step failed.
        summary, succeeded = [f"no summary: {' '.join(str(error).split())}"], False
    for line in summary:
        print("  " + line)
    # Both streams often end up in one terminal or log: the summary must be out before the errors.
    sys.stdout.flush()
    for failure in collapse_disk_full(failures, data_dir()):
        print(f"make run: {failure}", file=sys.stderr)
    return 0 if succeeded else 1


if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1] == ONE_RUN:
        exit_process(_one_run(sys.stdin))
    exit_process(main())
