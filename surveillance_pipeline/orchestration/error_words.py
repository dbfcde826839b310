"""A failed step's or run's error in its own words, on one line: what make run prints and what a run's
failure says (distributed.py), instead of the Dagster errors that wrap it. Dagster-free but for the error
type."""

from __future__ import annotations

from surveillance_pipeline.core.errors import InputError, StaleInputError
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
