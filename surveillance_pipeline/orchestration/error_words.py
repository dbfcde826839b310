"""A failed step's or run's error in its own words, on one line: what make run prints and what a run's
failure says (distributed.py), instead of the Dagster errors that wrap it. Dagster-free but for the error
type."""

from __future__ import annotations

import os

from surveillance_pipeline.core.errors import InputError, StaleInputError
from surveillance_pipeline.core.settings import DATABASE_URL_VARIABLE
from surveillance_pipeline.orchestration.dagster_internals import SerializableErrorInfo

# Errors whose message was written for the user: printed without their class. dagster.Failure is how a
# resource or a step refuses on purpose (a worker whose settings differ, say).
USER_FACING_ERRORS = frozenset({InputError.__name__, StaleInputError.__name__, "Failure"})


def raised_by_the_step(error: SerializableErrorInfo) -> SerializableErrorInfo:
    """The exception the step's own code raised, out of the Dagster errors that wrap it.

    Stops at the first error that is not Dagster's: the one the code chose to raise, whose message was
    written for the user, not whatever lower-level error it was raised while handling.
    """
    while (error.cls_name or "").startswith("Dagster"):
        inner = error.cause or error.context
        if inner is None:
            break
        error = inner
    return error


def one_line(error: SerializableErrorInfo) -> str:
    """The exception's own message on one line (it must stay the last line printed); prefixed with its
    class unless the message was written for the user, since a bare KeyError's text is just the key."""
    message = " ".join(line.strip() for line in error.message.splitlines() if line.strip())
    # Python's "module.Class: text", or just "module.Class" when the text is empty.
    qualified_class, _, own = message.partition(": ")
    cls_name = error.cls_name or ""
    if not cls_name or qualified_class.rsplit(".", 1)[-1] != cls_name:
        return message
    if cls_name in USER_FACING_ERRORS and own:
        return own
    return f"{cls_name}: {own}" if own else cls_name


# SQLSTATE classes of a server going away under a session: 57P01-57P03 (administrator, crash, or
# shutdown/startup under way), 08xxx (connection exceptions). psycopg gives none for a connection cut
# from the client's side ("server closed the connection unexpectedly").
SERVER_LOST_STATES = ("57P01", "57P02", "57P03", "08")


def warehouse_lost(error: BaseException) -> BaseException | None:
    """The error in ``error``'s chain that says the warehouse's server went away mid-session, or None.

    A full disk (DiskFull, also an OperationalError) or a refused statement is not one: the server is
    still there and said why.
    """
    import psycopg

    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, psycopg.OperationalError):
            state = current.sqlstate
            if state is None or state.startswith(SERVER_LOST_STATES):
                return current
        current = current.__cause__ or current.__context__
    return None


def warehouse_lost_message(cause: BaseException) -> str:
    """One line: which server went away (host and port only: the URL holds a password), what psycopg said,
    and what to do."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        parts = conninfo_to_dict(os.environ.get(DATABASE_URL_VARIABLE, ""))
        where = f"{parts.get('host') or 'localhost'}:{parts.get('port') or 5432}"
    except Exception:  # noqa: BLE001  # a URL psycopg cannot read: the line still says what happened
        where = "(unreadable URL)"
    said = " ".join(str(cause).split()) or type(cause).__name__
    return (
        f"the warehouse's server, PostgreSQL at {where} ({DATABASE_URL_VARIABLE}), stopped answering in "
        f"the middle of the step ({said}), so this step stops. A load it cut off rolled back whole (the "
        "partition keeps the snapshot its state row names): once the server answers again, launch the "
        "failed partitions again (make run, or the run's failed partitions in the UI) and what committed "
        "is skipped."
    )
