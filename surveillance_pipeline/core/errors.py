"""Errors that tell a user which file, record or line, and which field, is wrong."""

from __future__ import annotations

from pathlib import Path


class InputError(ValueError):
    """Bad input: raised before anything in the target changes, so the target keeps its snapshot."""

    def __init__(self, path: Path | str, where: str, field: str | None, problem: str) -> None:
        self.path = str(path)
        self.where = where
        self.field = field
        self.problem = problem
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
