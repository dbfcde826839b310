"""Which runs' processes are gone: the judgement run_health makes before it frees a dead run's slots."""

import os
import socket
import subprocess
import sys

from surveillance_pipeline.orchestration.run_health import PROCESS_TAG, RunProcess, process_start, this_host


def test_this_process_is_alive_and_a_finished_one_is_gone():
    assert not RunProcess.current().is_gone()
    finished = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    pid = int(finished.stdout)
    assert RunProcess(this_host(), pid, "1").is_gone()


def test_a_reused_pid_is_another_process_and_counts_as_gone():
    me = RunProcess.current()
    assert process_start(os.getpid()) == me.start
    assert RunProcess(me.host, me.pid, str(int(me.start) - 1)).is_gone()


def test_a_run_on_another_host_or_pid_namespace_is_never_judged_from_here():
    assert not RunProcess("some-other-host.example", 1, "1").is_gone()
    # Same host name, another container's pid namespace: its pids are not ours to look up.
    assert not RunProcess(f"{socket.gethostname()}/pidns:1", 1, "1").is_gone()


def test_the_tags_round_trip_and_partial_tags_name_no_process():
    me = RunProcess.current()
    assert RunProcess.from_tags(me.tags("run-1"), "run-1") == me
    assert me.tags("run-1") == {PROCESS_TAG: f"pid {me.pid} (started {me.start}) on {me.host}, for run run-1"}
    assert RunProcess.from_tags({PROCESS_TAG: f"pid {me.pid} on {me.host}"}, "run-1") is None


def test_a_re_execution_is_not_judged_by_the_process_tags_it_inherited():
    """Dagster copies a run's tags to its re-executions; until it tags its own process, a re-execution's
    copied tags name its parent's process (gone), not its own."""
    finished = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    parent = RunProcess(this_host(), int(finished.stdout), "1")
    inherited = parent.tags("parent-run")
    assert RunProcess.from_tags(inherited, "parent-run") == parent and parent.is_gone()
    assert RunProcess.from_tags(inherited, "child-run") is None
