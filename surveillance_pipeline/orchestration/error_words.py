"""A failed step's or run's error in its own words, on one line: what make run prints and what a run's
failure says, instead of the Dagster and Celery errors that wrap it. Dagster-free but for the error type.
"""

from __future__ import annotations

import re

from surveillance_pipeline.core.errors import InputError, StaleInputError
from surveillance_pipeline.orchestration.dagster_internals import SerializableErrorInfo

# Errors whose message was written for the user: printed without their class. dagster.Failure is how a
# resource or a step refuses on purpose (a worker whose settings differ, say).
USER_FACING_ERRORS = frozenset({InputError.__name__, StaleInputError.__name__, "Failure"})
# How Python (and Dagster's error rendering) introduces an exception's cause.
CAUSE_MARKERS = (
    "The above exception was caused by the following exception:",
    "The above exception occurred during handling of the following exception:",
)


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


def worker_step_failures(error: SerializableErrorInfo) -> list[tuple[str, str]] | None:
    """(step, its own error) for each step in a DagsterSubprocessError's text, which is how the Celery
    executor reports steps that failed on a worker before they could report it themselves (a resource
    that refused): "[step]: <error, its stack and its causes>". The step's own error is the innermost
    cause, up to its stack trace. None for any other error."""
    if error.cls_name != "DagsterSubprocessError":
        return None
    found = []
    for part in re.split(r"^\[(?=[^\]\n]+\]: )", error.message, flags=re.MULTILINE)[1:]:
        step, _, text = part.partition("]: ")
        for marker in CAUSE_MARKERS:
            text = text.rsplit(marker, 1)[-1]
        own = text.split("Stack Trace:", 1)[0]
        cause = SerializableErrorInfo(message=own.strip(), stack=[], cls_name=class_of(own))
        found.append((step, one_line(cause)))
    return found or None


def class_of(text: str) -> str | None:
    """The class name of a rendered exception ("module.Class: message")."""
    head = text.strip().split(": ", 1)[0]
    return head.rsplit(".", 1)[-1] if head and " " not in head else None
