"""The fast subset of ``make faults``: a few kills, one overlap, one dropped connection (no server restart).

Each trial loads snapshot A, disturbs a load of B at a named fault point, and checks that the target still
holds A exactly, that its state row describes A, and that the next run loads B (faults/harness.py).
"""

import pytest

from surveillance_pipeline.core import faults
from surveillance_pipeline_tests.faults.harness import (
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
    ("target", "point"),
    [
        ("occurrences", faults.AFTER_DELETE),
        ("devil_snapshot", faults.MID_COPY),
        ("occurrences", faults.BEFORE_COMMIT),
    ],
)
def test_a_sigkill_at_a_fault_point_leaves_the_previous_snapshot_and_the_next_run_converges(
    bench, target, point
):
    tally = Tally(f"SIGKILL {target} at {point}")
    kill_trial(bench, tally, target, point, 0)
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
    faults.fault_point(faults.AFTER_DELETE)
    monkeypatch.setenv(faults.FAULT_POINT_VARIABLE, faults.MID_COPY)
    faults.fault_point(faults.AFTER_DELETE)
    assert not signal_file.exists()
    # Named, with the block action and the release file already there: it signals and returns at once.
    monkeypatch.setenv(faults.FAULT_ACTION_VARIABLE, faults.BLOCK)
    (tmp_path / "signal.release").touch()
    faults.fault_point(faults.MID_COPY)
    assert signal_file.read_text().split()[0] == faults.MID_COPY
