"""Pure Python work done in a forked copy of this process, its result handed back through a pipe.

For CPU-bound work in plain Python, which the GIL keeps to one core whatever the threads: a forked child
starts in milliseconds with everything this process has imported, shares its memory until it writes,
and works on a second core. The child uses only what it is given and what it opens itself: no inherited
connection, stream or lock (another thread may have held one at the fork), and it ends with ``os._exit``,
so the parent's exit handlers, buffered output and open resources stay the parent's. Dagster-free.
"""

from __future__ import annotations

import os
import pickle
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

T = TypeVar("T")

# Bytes read from the child's pipe at once.
READ_BYTES = 1 << 16


class ForkedWorkError(RuntimeError):
    """The forked work raised (its error's class and text), or its process ended without a result."""


class ForkedWork(Generic[T]):
    """The forked child doing ``work(*args)``; ``result()`` waits for it."""

    def __init__(self, work: Callable[..., T], args: tuple[Any, ...]) -> None:
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: it never returns from here
            code = 1
            try:
                os.close(read_end)
                # A signal meant for the parent (a worker's warm shutdown) ends the child plainly.
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                try:
                    outcome: tuple[bool, Any] = (True, work(*args))
                except Exception as error:  # noqa: BLE001  # handed to the parent, which raises it
                    outcome = (False, f"{type(error).__name__}: {error}")
                write_all(write_end, pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL))
                code = 0
            finally:
                os._exit(code)
        os.close(write_end)
        self._pid: int | None = pid
        self._read_end = read_end

    def result(self) -> T:
        """The work's result, once the child has ended; ``ForkedWorkError`` when it raised or died."""
        chunks = []
        try:
            while chunk := os.read(self._read_end, READ_BYTES):
                chunks.append(chunk)
        finally:
            status = self._reap()
        if not chunks:
            raise ForkedWorkError(f"forked process ended with status {status} and no result")
        done, value = pickle.loads(b"".join(chunks))  # noqa: S301  # our own child's bytes, through a pipe
        if not done:
            raise ForkedWorkError(value)
        result: T = value
        return result

    def abandon(self) -> None:
        """End the child without its result (the parent gave up: an error of its own)."""
        if self._pid is not None:
            try:
                os.kill(self._pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._reap()

    def _reap(self) -> int:
        if self._pid is None:
            return 0
        os.close(self._read_end)
        status = os.waitstatus_to_exitcode(os.waitpid(self._pid, 0)[1])
        self._pid = None
        return status


@contextmanager
def forked(work: Callable[..., T], *args: Any) -> Iterator[ForkedWork[T]]:
    """``work(*args)`` started now in a forked child; leaving the block without its result ends it, so no
    child outlives the block."""
    child = ForkedWork(work, args)
    try:
        yield child
    finally:
        child.abandon()


def write_all(descriptor: int, data: bytes) -> None:
    """All of ``data`` to ``descriptor``: ``os.write`` may take only part of it (a pipe)."""
    view = memoryview(data)
    while view:
        view = view[os.write(descriptor, view) :]
