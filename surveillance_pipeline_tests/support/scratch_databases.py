"""Throwaway databases on the project's server, for the test suite, the fault suite and the bench.

Each gets PostGIS (unless asked not to) and is dropped afterwards, with FORCE, so a killed connection left
by a fault trial cannot keep it alive. Dagster-free.
"""

from __future__ import annotations

import time
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
        drop_database(admin, name)
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = with_database(server_url, name)
    if postgis:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS postgis")
    try:
        yield url
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            drop_database(admin, name)


def drop_database(admin: psycopg.Connection, name: str, attempts: int = 240) -> None:
    """DROP DATABASE … WITH (FORCE), retried while an autovacuum worker is in it.

    FORCE terminates the other sessions in the database, but refuses (as "must be a member of the role
    whose process is being terminated") when one of them is an autovacuum worker, which belongs to no
    role. Seen after a bench section had written thousands of Dagster events (gone within moments), and
    after the 10M-record download bench (an autovacuum of 10M fresh rows: up to two minutes).
    """
    for attempt in range(attempts):
        try:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
            return
        except psycopg.errors.InsufficientPrivilege:
            if attempt == attempts - 1:
                raise
            time.sleep(0.5)
