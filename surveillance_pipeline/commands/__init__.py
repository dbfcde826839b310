"""The commands the Makefile runs, above the code location: make run (run.py), make verify (verify.py),
and the pool limits make ui sets first (pools.py)."""

from typing import NoReturn

from surveillance_pipeline.core.long_lived import set_aside_long_lived_objects


def exit_process(code: int) -> NoReturn:
    """End a command's process with ``code``, leaving every object alive now out of the interpreter's
    collections at exit.

    A process that ran Dagster's runs holds some 270,000 objects, and the collections that tear them down
    at exit took 1.3-1.6 s of every ``make run`` here, after its summary was printed, for memory the OS
    takes back anyway. Objects are still freed by their reference counts, streams flushed, files closed
    and atexit handlers run: only the cycle collector's passes over them are skipped (core/long_lived.py).
    """
    set_aside_long_lived_objects()
    raise SystemExit(code)
