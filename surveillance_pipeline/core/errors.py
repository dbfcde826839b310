"""Errors that tell a user which file, record or line, and which field, is wrong."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

# A problem quoting a 10 MB field would bury the message (and the log) under the field itself.
MAX_PROBLEM_CHARACTERS = 300


def shorten(text: str, limit: int = MAX_PROBLEM_CHARACTERS) -> str:
    """``text``, or its first ``limit`` characters and how long it really was."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text):,} characters)"


class InputError(ValueError):
    """Bad input: raised before anything in the target changes, so the target keeps its snapshot."""

    def __init__(self, path: Path | str, where: str, field: str | None, problem: str) -> None:
        self.path = str(path)
        self.where = where
        self.field = field
        self.problem = shorten(problem)
        problem = self.problem
        field_text = f", field {field!r}" if field else ""
        super().__init__(f"{self.path}: {where}{field_text}: {problem}")


class StaleInputError(RuntimeError):
    """An input that no longer matches what this code would produce or request now."""


def decode_utf8(path: Path | str, data: bytes) -> str:
    """The text of a UTF-8 file; InputError naming the line and byte of the first invalid sequence."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise InputError(path, f"line {line} (byte {error.start})", None, "not valid UTF-8") from None


def text_lines(path: Path | str, data: bytes, columns: Sequence[str] = ()) -> list[str]:
    """The ``\\n``-separated lines of a UTF-8 text file (no final empty line), refusing what CSV readers
    disagree on: a byte order mark, NUL bytes and carriage returns (CRLF line ends), each named by line
    and, when ``columns`` are given, by the field it sits in."""
    text = decode_utf8(path, data)
    if text.startswith("\ufeff"):
        raise InputError(
            path, "line 1", None, "starts with a UTF-8 byte order mark (BOM): save it without one"
        )
    for character, problem in (
        ("\0", "a NUL byte"),
        ("\r", "a carriage return: line ends must be \\n, not CRLF"),
    ):
        position = text.find(character)
        if position >= 0:
            line_start = text.rfind("\n", 0, position) + 1
            line = text.count("\n", 0, position) + 1
            index = text.count(",", line_start, position)
            field = columns[index] if index < len(columns) else None
            raise InputError(path, f"line {line}", field, f"contains {problem}")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines
