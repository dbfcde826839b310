"""One small helper to read the SQL that lives next to each domain."""

from __future__ import annotations

from functools import cache
from importlib import resources

from psycopg import sql


@cache
def sql_text(package: str, name: str) -> str:
    """The text of ``<package>/sql/<name>.sql`` (for engines other than PostgreSQL, such as DuckDB)."""
    return resources.files(package).joinpath("sql", f"{name}.sql").read_text(encoding="utf-8")


def load_sql(package: str, name: str) -> sql.SQL:
    """The statement in ``<package>/sql/<name>.sql`` as a psycopg ``sql.SQL`` (identifiers via .format)."""
    return sql.SQL(sql_text(package, name))  # type: ignore[arg-type]  # a file shipped in the package
