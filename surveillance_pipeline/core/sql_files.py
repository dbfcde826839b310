"""One small helper to read the SQL that lives next to each domain."""

from __future__ import annotations

from functools import cache
from importlib import resources

from psycopg import sql


@cache
def load_sql(package: str, name: str) -> sql.SQL:
    """The statement in ``<package>/sql/<name>.sql`` as a psycopg ``sql.SQL`` (identifiers via .format)."""
    text = resources.files(package).joinpath("sql", f"{name}.sql").read_text(encoding="utf-8")
    return sql.SQL(text)  # type: ignore[arg-type]  # the text is a file shipped in the package
