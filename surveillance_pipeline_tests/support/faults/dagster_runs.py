"""Fault rows that go through Dagster itself, over a Postgres-backed instance with the project's pools.

- A ``dagster asset materialize`` of devil_snapshot SIGKILLed before its commit: Dagster still thinks it
  STARTED and it holds the pool's only slot. The next CLI run must finish by itself.
- The same for a run the daemon launched under ``dagster dev`` (the deliveries sensor's), killed in its run
  worker; the sensor's next run must finish by itself.
- Two warehouses on one server, each with its own Dagster storage (``dagster_<warehouse>``, as the
  provisioning names it): a delivery dropped into warehouse 2 is loaded there, warehouse 1 and its
  instance see nothing of it.

Each row reports how long the next run took to finish, from the moment it was asked for.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg

from surveillance_pipeline_tests.conftest import scratch_database
from surveillance_pipeline_tests.support.dagster_dev import (
    DAGSTER,
    PROJECT_ROOT,
    DagsterDev,
    project_dagster_home,
)
from surveillance_pipeline_tests.support.faults.harness import Bench, Tally, fingerprint, state_describes
from surveillance_pipeline_tests.support.faults.points import (
    BEFORE_COMMIT,
    FAULT_ACTION_VARIABLE,
    FAULT_ONCE_VARIABLE,
    FAULT_POINT_VARIABLE,
    FAULT_SIGNAL_VARIABLE,
    KILL,
)
from surveillance_pipeline_tests.support.faults.worker import DEVIL

TARGET = "devil_snapshot"
POOL = "devil_snapshot"
# How long the next run may take, from the moment it is asked for, before the row counts it as blocked.
RECOVERY_LIMIT = 180.0
CLI = [str(DAGSTER), "asset", "materialize", "-m", "surveillance_pipeline.definitions", "--select", TARGET]
FAULT_VARIABLES = (FAULT_POINT_VARIABLE, FAULT_ACTION_VARIABLE, FAULT_SIGNAL_VARIABLE, FAULT_ONCE_VARIABLE)


@contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """``values`` in os.environ for the block: DagsterInstance.from_config reads its storage from it."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _instance(home_env: dict[str, str]) -> dg.DagsterInstance:
    with environment(home_env):
        return dg.DagsterInstance.from_config(home_env["DAGSTER_HOME"])


def set_pool_limits(home_env: dict[str, str]) -> None:
    """As make run and make ui do before any run claims a slot."""
    subprocess.run(  # noqa: S603  # our own module, fixed argv
        [str(PROJECT_ROOT / ".venv" / "bin" / "python"), "-m", "surveillance_pipeline.commands.pools"],
        cwd=PROJECT_ROOT,
        env={**os.environ, **home_env},
        check=True,
        capture_output=True,
    )


def cli_run(
    home_env: dict[str, str], warehouse_url: str, data_dir: Path, signal_file: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603  # Dagster's own CLI, fixed argv
        CLI,
        cwd=PROJECT_ROOT,
        env=cli_environment(home_env, warehouse_url, data_dir, signal_file),
        capture_output=True,
        text=True,
        timeout=RECOVERY_LIMIT,
        check=False,
    )


def cli_environment(
    home_env: dict[str, str], warehouse_url: str, data_dir: Path, signal_file: Path | None = None
) -> dict[str, str]:
    env = {
        **os.environ,
        **home_env,
        "SURVEILLANCE_DATABASE_URL": warehouse_url,
        "SURVEILLANCE_DATA_DIR": str(data_dir),
    }
    for name in FAULT_VARIABLES:
        env.pop(name, None)
    if signal_file is not None:
        env.update({FAULT_POINT_VARIABLE: BEFORE_COMMIT, FAULT_ACTION_VARIABLE: KILL})
        env[FAULT_SIGNAL_VARIABLE] = str(signal_file)
    return env


def slot_holders(instance: dg.DagsterInstance) -> list[dg.DagsterRun]:
    runs = []
    for slot in instance.event_log_storage.get_concurrency_info(POOL).claimed_slots:
        run = instance.get_run_by_id(slot.run_id)
        if run is not None:
            runs.append(run)
    return runs


def _after_kill(bench: Bench, instance: dg.DagsterInstance) -> tuple[bool, bool, list[dg.DagsterRun]]:
    """Intact and consistent (A is still what the warehouse holds), and the runs holding the slot."""
    with bench.connect() as conn:
        intact = fingerprint(conn, TARGET) == bench.reference[TARGET, "a"]
        consistent, _ = state_describes(conn, TARGET, bench.snapshots.a, bench.reference[TARGET, "a"])
    return intact, consistent, slot_holders(instance)


def _recovered(bench: Bench, instance: dg.DagsterInstance, dead: list[dg.DagsterRun]) -> str:
    """What still keeps the trial from having recovered ("" once B is loaded, the dead runs have failed
    in Dagster and nothing holds the pool's slot)."""
    with bench.connect() as conn:
        if fingerprint(conn, TARGET) != bench.reference[TARGET, "b"]:
            return "B not loaded"
        holds, detail = state_describes(conn, TARGET, bench.snapshots.b, bench.reference[TARGET, "b"])
        if not holds:
            return f"state: {detail}"
    for run in dead:
        now = instance.get_run_by_id(run.run_id)
        if now is None or now.status != dg.DagsterRunStatus.FAILURE:
            return f"dead run {run.run_id} is {now.status.value if now else 'gone'}"
    holders = slot_holders(instance)
    if holders:
        return f"slot still held by {[(run.run_id, run.status.value) for run in holders]}"
    return ""


def killed_cli_run_trial(bench: Bench, tally: Tally, server_url: str, number: int) -> None:
    bench.reset_to_a(TARGET)
    home = bench.work / f"cli-home-{number}"
    with scratch_database(server_url, f"dagster_faults_cli_{number}") as storage:
        home_env = project_dagster_home(home, storage)
        set_pool_limits(home_env)
        signal_file = bench.work / f"cli-kill-{number}.signal"
        killed = cli_run(home_env, bench.database_url, bench.snapshots.b, signal_file)
        with _instance(home_env) as instance:
            intact, consistent, holders = _after_kill(bench, instance)
            stuck = [run for run in holders if run.status == dg.DagsterRunStatus.STARTED]
            started = time.monotonic()
            following = cli_run(home_env, bench.database_url, bench.snapshots.b)
            elapsed = time.monotonic() - started
            why = _recovered(bench, instance, stuck)
            converged = following.returncode == 0 and bool(stuck) and not why
        note = (
            f"killed run (exit {killed.returncode}) {'held' if stuck else 'did not hold'} the slot; "
            f"next run done in {elapsed:.0f} s, slot freed by the next run"
        )
        if following.returncode != 0 or why:
            last = following.stderr.strip().splitlines()[-1:]
            note = f"next run (exit {following.returncode}) after {elapsed:.0f} s: {why or last}"
        tally.add(intact, consistent, converged, note)


def killed_daemon_run_trial(bench: Bench, tally: Tally, server_url: str, number: int) -> None:
    """The deliveries sensor launches the load of B; its run worker is killed before the commit; a second
    delivery of the same bytes makes the sensor launch again, and that run must load B by itself."""
    bench.reset_to_a(TARGET)
    data = bench.work / f"daemon-data-{number}"
    deliveries = data / "deliveries" / DEVIL
    deliveries.mkdir(parents=True)
    shutil.copy(_delivery(bench.snapshots.a), deliveries / "2026-11-02.csv")
    signal_file = bench.work / f"daemon-kill-{number}.signal"
    with scratch_database(server_url, f"dagster_faults_daemon_{number}") as storage:
        dev = DagsterDev(bench.work / f"daemon-home-{number}", bench.database_url, storage, data)
        dev.env.update(
            {
                FAULT_POINT_VARIABLE: BEFORE_COMMIT,
                FAULT_ACTION_VARIABLE: KILL,
                FAULT_SIGNAL_VARIABLE: str(signal_file),
                FAULT_ONCE_VARIABLE: "1",
            }
        )
        home_env = project_dagster_home(dev.home, storage)
        dev.start()
        try:
            shutil.copy(_delivery(bench.snapshots.b), deliveries / "2026-11-09.csv")
            killed_pid = _wait_for_kill(signal_file)
            with _instance(home_env) as instance:
                intact, consistent, stuck = _after_kill(bench, instance)
                held = ", ".join(f"{run.run_id[:8]} {run.status.value}" for run in stuck) or "nothing"
                # The same bytes again, under a newer name: a new trigger for the sensor, the same B.
                started = time.monotonic()
                shutil.copy(_delivery(bench.snapshots.b), deliveries / "2026-11-10.csv")
                why = "not checked"
                while time.monotonic() - started < RECOVERY_LIMIT and why:
                    time.sleep(2)
                    why = _recovered(bench, instance, stuck)
                converged = bool(stuck) and not why
                elapsed = time.monotonic() - started
        finally:
            dev.stop()
    note = (
        f"run worker {killed_pid} killed; the slot then held by {held}; "
        f"the sensor's next run done in {elapsed:.0f} s"
    )
    if not converged:
        note = (
            f"not recovered in {RECOVERY_LIMIT:.0f} s: {why or 'no run held the slot'} (log: {dev.log_path})"
        )
    tally.add(intact, consistent, converged, note)


def _delivery(folder: Path) -> Path:
    [path] = sorted((folder / "deliveries" / DEVIL).glob("*.csv"))
    return path


def _wait_for_kill(signal_file: Path) -> int:
    """The pid the fault point reported, once that process is gone."""
    deadline = time.monotonic() + RECOVERY_LIMIT
    while not signal_file.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no run reached {BEFORE_COMMIT} in {RECOVERY_LIMIT:.0f} s")
        time.sleep(0.5)
    pid = int(signal_file.read_text(encoding="utf-8").split()[1])
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    return pid


def two_warehouses_trial(bench: Bench, tally: Tally, server_url: str, number: int) -> None:
    """Warehouses 1 and 2 on one server, each with its own Dagster instance, both holding A. B is dropped
    into warehouse 2's deliveries: its sensor asks for a run, which loads B there; warehouse 1's sensor
    asks for nothing, its rows and its instance's runs stay as they were."""
    from surveillance_pipeline.definitions import assemble
    from surveillance_pipeline.snapshots.sensors import deliveries_sensor
    from surveillance_pipeline_tests.support.pipeline import resources

    with (
        scratch_database(server_url, f"faults_warehouse1_{number}") as warehouse1,
        scratch_database(server_url, f"faults_warehouse2_{number}") as warehouse2,
        scratch_database(server_url, f"dagster_faults_warehouse1_{number}") as storage1,
        scratch_database(server_url, f"dagster_faults_warehouse2_{number}") as storage2,
    ):
        sides = []
        for name, warehouse, storage in (("1", warehouse1, storage1), ("2", warehouse2, storage2)):
            data = bench.work / f"warehouse{name}-data-{number}"
            (data / "deliveries" / DEVIL).mkdir(parents=True)
            shutil.copy(_delivery(bench.snapshots.a), data / "deliveries" / DEVIL / "2026-11-02.csv")
            home_env = project_dagster_home(bench.work / f"warehouse{name}-home-{number}", storage)
            set_pool_limits(home_env)
            loaded = cli_run(home_env, warehouse, data)
            if loaded.returncode != 0:
                raise RuntimeError(f"loading A into warehouse {name} failed: {loaded.stderr[-500:]}")
            sides.append((warehouse, data, home_env))
        (warehouse1, data1, home1), (warehouse2, data2, home2) = sides
        shutil.copy(_delivery(bench.snapshots.b), data2 / "deliveries" / DEVIL / "2026-11-09.csv")
        requests = []
        for warehouse, data, home_env in sides:
            definitions = assemble(resources(warehouse, data))
            with _instance(home_env) as instance:
                context = dg.build_sensor_context(instance=instance, resources=definitions.resources)
                requests.append(deliveries_sensor.evaluate_tick(context).run_requests)
        started = time.monotonic()
        loaded = cli_run(home2, warehouse2, data2) if len(requests[1]) == 1 else None
        elapsed = time.monotonic() - started
        with bench.connect_to(warehouse1) as conn:
            untouched = fingerprint(conn, TARGET) == bench.reference[TARGET, "a"]
        with bench.connect_to(warehouse2) as conn:
            moved = fingerprint(conn, TARGET) == bench.reference[TARGET, "b"]
        with _instance(home1) as instance1, _instance(home2) as instance2:
            runs = (len(instance1.get_run_records()), len(instance2.get_run_records()))
    asked = (len(requests[0]), len(requests[1]))
    tally.add(
        untouched,
        asked == (0, 1) and runs == (1, 2),
        loaded is not None and loaded.returncode == 0 and moved,
        f"sensor requests (warehouse 1, 2) = {asked}, runs per instance = {runs}; "
        f"warehouse 2 loaded B in {elapsed:.0f} s",
    )


# A run id that holds the pool's slot in the trial's instance, as a live run elsewhere would.
HOLDER = "a-run-on-another-host"
STOP_LIMIT = 20.0


def waiting_run_stopped_trial(bench: Bench, tally: Tally, server_url: str, number: int) -> float:
    """A CLI run finds the slot taken, says by whom, and exits promptly on SIGTERM; its claim is gone."""
    bench.reset_to_a(TARGET)
    home = bench.work / f"waiting-home-{number}"
    with scratch_database(server_url, f"dagster_faults_waiting_{number}") as storage:
        home_env = project_dagster_home(home, storage)
        set_pool_limits(home_env)
        with _instance(home_env) as instance:
            instance.event_log_storage.claim_concurrency_slot(POOL, HOLDER, TARGET)
        log = bench.work / f"waiting-{number}.log"
        with log.open("w") as output:
            process = subprocess.Popen(  # noqa: S603  # Dagster's own CLI, fixed argv
                CLI,
                cwd=PROJECT_ROOT,
                env=cli_environment(home_env, bench.database_url, bench.snapshots.b),
                stdout=output,
                stderr=subprocess.STDOUT,
                text=True,
            )
            deadline = time.monotonic() + RECOVERY_LIMIT
            told = False
            while time.monotonic() < deadline and not told and process.poll() is None:
                time.sleep(0.5)
                told = f"slot held by run {HOLDER}" in log.read_text(encoding="utf-8")
            time.sleep(2)  # well into the wait
            started = time.monotonic()
            process.terminate()
            try:
                process.wait(timeout=STOP_LIMIT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            elapsed = time.monotonic() - started
        with _instance(home_env) as instance:
            info = instance.event_log_storage.get_concurrency_info(POOL)
            runs = instance.get_run_records()
            ended = bool(runs) and all(r.dagster_run.status == dg.DagsterRunStatus.FAILURE for r in runs)
            queued = [step.run_id for step in info.pending_steps if step.run_id != HOLDER]
        with bench.connect() as conn:
            intact = fingerprint(conn, TARGET) == bench.reference[TARGET, "a"]
    tally.add(
        intact and told,
        ended and not queued,
        elapsed < STOP_LIMIT,
        f"said who holds the slot: {told}; stopped {elapsed:.1f} s after SIGTERM",
    )
    return elapsed
