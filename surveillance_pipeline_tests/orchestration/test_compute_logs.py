"""The project's compute log manager: a step's output in its compute log files and on the terminal, copied
by a thread of the step's process, with no process started for it."""

import io
import json
import os
import subprocess  # noqa: S404  # a run in a process of its own, its output on pipes
import sys

import dagster as dg
import pytest

from surveillance_pipeline.orchestration.compute_logs import (
    MirroredComputeLogManager,
    mirrored,
    terminal_at_level,
)
from surveillance_pipeline.orchestration.dagster_internals import LocalComputeLogManager
from surveillance_pipeline.orchestration.run_config import QUIET_CONSOLE
from surveillance_pipeline_tests.support.dagster_dev import project_dagster_home
from surveillance_pipeline_tests.support.processes import child_pids

pytestmark = [pytest.mark.db, pytest.mark.dagster]

# What each step's process started while its output was captured (pids of its children then).
CHILDREN_SEEN: list[list[int]] = []


@dg.asset
def talkative() -> None:
    """Writes through Python's streams and straight to the descriptors, as C code does; its last line
    comes right before the step ends (the line a tail could miss: dagster#23336)."""
    CHILDREN_SEEN.append(sorted(child_pids()))
    print("through print", flush=True)
    os.write(1, b"through the descriptor\n")
    print("to stderr", file=sys.stderr, flush=True)
    os.write(1, b"x" * 200_000 + b"\n")  # more than a pipe holds: the copy drains it as it comes
    print("the last line", flush=True)


def _materialize_talkative() -> None:
    """In a process of its own (its stdout and stderr, pipes, stand for a worker's terminal): the run, then
    its id and the children seen, as the last line."""
    with dg.DagsterInstance.get() as instance:
        result = dg.materialize([talkative], instance=instance, run_config=QUIET_CONSOLE)
    print(json.dumps({"run_id": result.run_id, "success": result.success, "children": CHILDREN_SEEN}))


def test_a_steps_output_reaches_its_compute_log_and_the_terminal_and_starts_no_process(
    dagster_storage_url, tmp_path, monkeypatch
):
    for name, value in project_dagster_home(tmp_path / "home", dagster_storage_url).items():
        monkeypatch.setenv(name, value)
    script = f"from {__name__} import _materialize_talkative; _materialize_talkative()"
    # The test's own module, a fixed script, no shell.
    done = subprocess.run(  # noqa: S603
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True
    )
    *terminal, last = done.stdout.splitlines()
    outcome = json.loads(last)
    assert outcome["success"]
    # Dagster's own manager started a tail and a Python watcher for each stream while the step ran.
    assert outcome["children"] == [[]]
    # On the terminal, as before: every line, the last one too.
    assert terminal[-4:] == ["through print", "through the descriptor", "x" * 200_000, "the last line"]
    assert "to stderr" in done.stderr.splitlines()
    with dg.DagsterInstance.get() as instance:
        # The project's dagster.yaml names the mirrored manager.
        assert isinstance(instance.compute_log_manager, MirroredComputeLogManager)
        # The UI reads a step's output by the key its LOGS_CAPTURED event names.
        captured = instance.all_logs(outcome["run_id"], of_type=dg.DagsterEventType.LOGS_CAPTURED)
        keys = [entry.dagster_event.logs_captured_data.file_key for entry in captured]
        data = [
            instance.compute_log_manager.get_log_data([outcome["run_id"], "compute_logs", key])
            for key in keys
        ]
    assert keys, "the step's output was captured"
    stdout = b"".join(part.stdout or b"" for part in data).decode()
    stderr = b"".join(part.stderr or b"" for part in data).decode()
    assert stdout == f"through print\nthrough the descriptor\n{'x' * 200_000}\nthe last line\n"
    assert stderr == "to stderr\n"


@dg.asset
def warns(context: dg.AssetExecutionContext) -> None:
    context.log.info("an info line")
    context.log.warning("a warning line")
    print("a plain line", file=sys.stderr, flush=True)


def _materialize_warns_at_warning() -> None:
    """As make run runs: the console at Dagster's default level, the terminal filtered to warnings."""
    with terminal_at_level("WARNING"), dg.DagsterInstance.get() as instance:
        result = dg.materialize([warns], instance=instance)
    print(json.dumps({"run_id": result.run_id, "success": result.success}))


def _captured_stderr(run_id: str) -> str:
    with dg.DagsterInstance.get() as instance:
        captured = instance.all_logs(run_id, of_type=dg.DagsterEventType.LOGS_CAPTURED)
        keys = [entry.dagster_event.logs_captured_data.file_key for entry in captured]
        data = [instance.compute_log_manager.get_log_data([run_id, "compute_logs", key]) for key in keys]
    return b"".join(part.stderr or b"" for part in data).decode()


def test_make_runs_terminal_shows_warnings_while_the_compute_log_keeps_every_line(
    dagster_storage_url, tmp_path, monkeypatch
):
    """The UI shows a make run's run's step output as a run launched there (every event); make run's
    terminal shows its warnings and whatever is not Dagster's."""
    for name, value in project_dagster_home(tmp_path / "home", dagster_storage_url).items():
        monkeypatch.setenv(name, value)
    script = f"from {__name__} import _materialize_warns_at_warning; _materialize_warns_at_warning()"
    done = subprocess.run(  # noqa: S603  # the test's own module, a fixed script, no shell
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True
    )
    outcome = json.loads(done.stdout.splitlines()[-1])
    assert outcome["success"]
    terminal = done.stderr.splitlines()
    assert any(line.endswith("a warning line") and " - dagster - WARNING - " in line for line in terminal)
    assert "a plain line" in terminal
    assert not [
        line for line in terminal if " - dagster - DEBUG - " in line or " - dagster - INFO - " in line
    ]
    logged = _captured_stderr(outcome["run_id"])
    assert " - dagster - INFO - " in logged and "an info line" in logged
    assert " - dagster - DEBUG - " in logged and "STEP_SUCCESS" in logged
    assert "a warning line" in logged and "a plain line" in logged


def test_a_stream_without_a_descriptor_is_left_alone_and_its_file_still_made(tmp_path):
    """Celery's logging proxy, in a worker that redirects its output, has no descriptor: Dagster's redirect
    leaves it alone too."""
    stream = io.StringIO()
    path = tmp_path / "logs" / "step.out"
    with mirrored(stream, str(path)):  # type: ignore[arg-type]
        print("kept in the stream", file=stream)
    assert stream.getvalue() == "kept in the stream\n"
    assert path.read_bytes() == b""


def test_the_manager_is_built_from_its_config_as_itself(tmp_path):
    """Dagster's from_config_value builds a LocalComputeLogManager whatever the class: overridden."""
    assert type(LocalComputeLogManager.from_config_value(None, {"base_dir": str(tmp_path)})) is (
        LocalComputeLogManager
    )
    built = MirroredComputeLogManager.from_config_value(None, {"base_dir": str(tmp_path)})
    assert type(built) is MirroredComputeLogManager


def test_dagsters_own_manager_still_starts_processes_for_each_capture(tmp_path):
    """Why the subclass exists (dagster#1906): when this fails, Dagster mirrors a step's output without a
    process of its own, and MirroredComputeLogManager can go."""
    manager = LocalComputeLogManager(str(tmp_path))
    before = child_pids()
    with manager.capture_logs(["run", "compute_logs", "step"]):
        during = child_pids() - before
    assert len(during) >= 2  # a tail and a Python watcher per stream
