"""Throwaway databases on the project's server, for the test suite, the fault suite and the bench.

Each gets PostGIS (unless asked not to) and is dropped afterwards, with FORCE, so a killed connection left
by a fault trial cannot keep it alive. Dagster-free.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql


def with_database(url: str, database: str) -> str:
    """The same server URL (user, password, host) naming another database."""
    return urlunsplit(urlsplit(url)._replace(path=f"/{database}"))


@contextmanager
def scratch_database(server_url: str, name: str, postgis: bool = True) -> Iterator[str]:
    """A new database called ``name`` (replacing one left behind), dropped afterwards; yields its URL."""
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = with_database(server_url, name)
    if postgis:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS postgis")
    try:
        yield url
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
