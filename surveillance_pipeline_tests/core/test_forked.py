"""Work in a forked process: its result, its error, its death, and no child left behind."""

import os
import signal
import time

import pytest

from surveillance_pipeline.core.forked import ForkedWorkError, forked
from surveillance_pipeline_tests.support.processes import child_pids


def _pid_and_sum(values: list[int]) -> tuple[int, int]:
    return os.getpid(), sum(values)


def _raise(message: str) -> None:
    raise ValueError(message)


def _sleep_forever() -> None:
    while True:
        time.sleep(1)


def _large(size: int) -> bytes:
    return b"x" * size


def test_the_work_runs_in_another_process_and_returns_its_result():
    with forked(_pid_and_sum, [1, 2, 3]) as work:
        pid, total = work.result()
    assert pid != os.getpid()
    assert total == 6


def test_a_result_larger_than_a_pipe_holds_comes_back_whole():
    with forked(_large, 1 << 22) as work:
        assert work.result() == b"x" * (1 << 22)


def test_the_works_error_is_raised_here_with_its_class_and_text():
    with (
        forked(_raise, "a derived file without its columns") as work,
        pytest.raises(ForkedWorkError) as raised,
    ):
        work.result()
    assert str(raised.value) == "ValueError: a derived file without its columns"


def test_a_child_killed_before_its_result_is_an_error_not_a_hang():
    before = child_pids()
    with forked(_sleep_forever) as work:
        [child] = child_pids() - before
        os.kill(child, signal.SIGKILL)
        with pytest.raises(ForkedWorkError, match="no result"):
            work.result()


def test_leaving_the_block_without_the_result_leaves_no_child():
    before = child_pids()
    with pytest.raises(RuntimeError), forked(_sleep_forever):
        assert len(child_pids() - before) == 1
        raise RuntimeError("the parent's own error")
    assert child_pids() == before
