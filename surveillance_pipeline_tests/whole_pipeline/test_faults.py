"""The fast subset of ``make faults``: a few kills, one overlap, one dropped connection (no server restart).

Each trial loads snapshot A, disturbs a load of B at a named fault point, and checks that the target still
holds A exactly, that its state row describes A, and that the next run loads B (faults/harness.py).
"""

import pytest

from surveillance_pipeline.core.fault_points import fault_point
from surveillance_pipeline_tests.support.faults import points as faults
from surveillance_pipeline_tests.support.faults.dagster_runs import (
    killed_cli_run_trial,
    two_warehouses_trial,
    waiting_run_stopped_trial,
)
from surveillance_pipeline_tests.support.faults.harness import (
    Bench,
    Tally,
    concurrent_trial,
    interrupted_trial,
    kill_trial,
    prepare_snapshots,
    terminate_backend,
)

pytestmark = [pytest.mark.db, pytest.mark.faults]


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory):
    return prepare_snapshots(tmp_path_factory.mktemp("faults") / "data")


@pytest.fixture()
def bench(db, database_url, snapshots, tmp_path):
    bench = Bench(database_url, snapshots, tmp_path)
    bench.calibrate()
    return bench


def _assert_passed(tally: Tally) -> None:
    assert tally.passed, tally.row()


@pytest.mark.parametrize(
    ("target", "point", "whole_reload"),
    [
        ("occurrences", faults.AFTER_DELETE, False),
        ("occurrences", faults.AFTER_DELETE, True),
        ("devil_snapshot", faults.MID_COPY, False),
        ("occurrences", faults.BEFORE_COMMIT, False),
    ],
)
def test_a_sigkill_at_a_fault_point_leaves_the_previous_snapshot_and_the_next_run_converges(
    bench, target, point, whole_reload
):
    """B is a few records away from A, so occurrences loads it by record-level delta; ``whole_reload``
    kills the load that replaces the partition whole instead."""
    tally = Tally(f"SIGKILL {target} at {point}")
    kill_trial(bench, tally, target, point, 0, whole_reload)
    _assert_passed(tally)
    assert tally.notes == ["killed at point"]


def test_a_terminated_connection_mid_copy_is_a_clear_error_and_writes_nothing(bench):
    tally = Tally("pg_terminate_backend")
    message = interrupted_trial(
        bench, tally, "occurrences", faults.MID_COPY, 0, terminate_backend(bench), "terminate"
    )
    _assert_passed(tally)
    assert "terminating connection due to administrator command" in message


def test_two_simultaneous_materializations_load_once_and_the_other_skips(bench):
    # Two here to stay within a minute; make faults runs two, three and four.
    tally = Tally("2 concurrent")
    concurrent_trial(bench, tally, 2, 0)
    _assert_passed(tally)
    assert tally.notes == ["1 loaded, 1 skipped"]


def test_a_fault_point_is_inert_unless_named(monkeypatch, tmp_path):
    signal_file = tmp_path / "signal"
    monkeypatch.setenv(faults.FAULT_SIGNAL_VARIABLE, str(signal_file))
    monkeypatch.delenv(faults.FAULT_POINT_VARIABLE, raising=False)
    fault_point(faults.AFTER_DELETE)
    monkeypatch.setenv(faults.FAULT_POINT_VARIABLE, faults.MID_COPY)
    fault_point(faults.AFTER_DELETE)
    assert not signal_file.exists()
    # Named, with the block action and the release file already there: it signals and returns at once.
    monkeypatch.setenv(faults.FAULT_ACTION_VARIABLE, faults.BLOCK)
    (tmp_path / "signal.release").touch()
    fault_point(faults.MID_COPY)
    assert signal_file.read_text().split()[0] == faults.MID_COPY


def test_a_killed_cli_run_holding_its_pool_slot_does_not_block_the_next_run(bench, server_url):
    tally = Tally("SIGKILL of a CLI run holding its pool slot")
    killed_cli_run_trial(bench, tally, server_url, 0)
    _assert_passed(tally)
    assert "held the slot" in tally.notes[0], tally.notes


def test_a_cli_run_waiting_for_a_pool_slot_says_who_holds_it_and_stops_on_sigterm(bench, server_url):
    tally = Tally("SIGTERM while waiting")
    waiting_run_stopped_trial(bench, tally, server_url, 0)
    _assert_passed(tally)


def test_two_warehouses_on_one_server_keep_their_deliveries_and_runs_apart(bench, server_url):
    tally = Tally("two warehouses")
    two_warehouses_trial(bench, tally, server_url, 0)
    _assert_passed(tally)


def test_a_once_fault_point_fires_only_while_its_signal_file_is_absent(monkeypatch, tmp_path):
    signal_file = tmp_path / "signal"
    signal_file.write_text("before_commit 1 0\n")
    monkeypatch.setenv(faults.FAULT_SIGNAL_VARIABLE, str(signal_file))
    monkeypatch.setenv(faults.FAULT_POINT_VARIABLE, faults.BEFORE_COMMIT)
    monkeypatch.setenv(faults.FAULT_ONCE_VARIABLE, "1")
    # Already fired once (the signal file is there): returns instead of killing this process.
    fault_point(faults.BEFORE_COMMIT)
    assert signal_file.read_text() == "before_commit 1 0\n"
