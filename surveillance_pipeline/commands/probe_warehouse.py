"""Can the project use this warehouse, this Dagster database and this data folder? One clear line if not.

``scripts/provision_postgis.sh`` asks it about a setting the user gave (SURVEILLANCE_DATABASE_URL,
DAGSTER_PG_DB, SURVEILLANCE_DATA_DIR) and about the URL it stored for them. A setting that does not work is
never replaced by another server or folder: provisioning stops with the line this prints, which says what
is wrong and what to do, and nothing is started or written.

    python -m surveillance_pipeline.commands.probe_warehouse URL        # prints the Dagster database
    python -m surveillance_pipeline.commands.probe_warehouse --data-dir PATH
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from surveillance_pipeline.commands import exit_process
from surveillance_pipeline.core.settings import DATA_DIR_VARIABLE, DATABASE_URL_VARIABLE

DAGSTER_DB_VARIABLE = "DAGSTER_PG_DB"
CONNECT_TIMEOUT_S = 5


class UnusableSetting(Exception):
    """A setting the project cannot use: its message names the setting, what is wrong and what to do."""


def _where(url: str) -> tuple[str, str, str, str]:
    """(host, port, user, database) the URL names, with libpq's defaults for what it leaves out."""
    parts = conninfo_to_dict(url)
    host = str(parts.get("host") or "localhost")
    return (
        host,
        str(parts.get("port") or "5432"),
        str(parts.get("user") or ""),
        str(parts.get("dbname") or ""),
    )


def connect(url: str, variable: str = DATABASE_URL_VARIABLE) -> psycopg.Connection:
    """A connection, or UnusableSetting saying why the server would not give one."""
    host, port, user, database = _where(url)
    try:
        return psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
    except psycopg.OperationalError as error:
        raise UnusableSetting(
            f"{variable}: {_connection_failure(error, host, port, user, database)}"
        ) from None


def _connection_failure(
    error: psycopg.OperationalError, host: str, port: str, user: str, database: str
) -> str:
    text = str(error)
    state = error.sqlstate
    if state == "28P01" or "password authentication failed" in text:
        return f"authentication failed for user {user!r} on {host}:{port}: check the password in the URL"
    if state == "3D000" or ("database" in text and "does not exist" in text):
        return f"database {database!r} does not exist on {host}:{port}: create it, or name another in the URL"
    if state == "28000" or "no pg_hba.conf entry" in text:
        return (
            f"the server on {host}:{port} refuses user {user!r} from here (pg_hba.conf): {_first_line(text)}"
        )
    if "Connection refused" in text or "No such file or directory" in text:
        return f"nothing listens on {host}:{port}: start the server, or fix the host and port in the URL"
    if "timeout" in text.lower():
        return (
            f"{host}:{port} does not answer within {CONNECT_TIMEOUT_S} s: check the host, port and firewall"
        )
    if "could not translate host name" in text or "Name or service not known" in text:
        return f"the host {host!r} is not known: fix the host in the URL"
    return f"cannot connect to {host}:{port} as {user!r}: {_first_line(text)}"


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else text


def check_warehouse(conn: psycopg.Connection, variable: str = DATABASE_URL_VARIABLE) -> None:
    """UnusableSetting unless the database has PostGIS and the role may create tables in its schema."""
    database, user = conn.info.dbname, conn.info.user
    if conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'postgis'").fetchone() is None:
        raise UnusableSetting(
            f"{variable}: PostGIS is not installed in database {database!r}: "
            "run `CREATE EXTENSION postgis` there as a superuser"
        )
    row = conn.execute(
        "SELECT current_schema(), coalesce(has_schema_privilege(current_schema(), 'CREATE'), false)"
    ).fetchone()
    schema, may_create = row if row is not None else (None, False)
    if schema is None:
        raise UnusableSetting(
            f"{variable}: role {user!r} has no schema on its search_path in database {database!r}: "
            f"create one it owns, or ALTER ROLE {user} SET search_path"
        )
    if not may_create:
        raise UnusableSetting(
            f"{variable}: role {user!r} may not create tables in schema {schema!r} of database {database!r}: "
            f"GRANT CREATE ON SCHEMA {schema} TO {user}, or use a schema it owns"
        )


def dagster_database(conn: psycopg.Connection, url: str, named: str) -> str:
    """The database Dagster's storage uses beside the warehouse: ``named`` (DAGSTER_PG_DB) or
    dagster_<warehouse database>, created when missing and allowed; a role that may not create one shares
    the warehouse database, unless the user named one, which must then exist and answer."""
    wanted = named or f"dagster_{conn.info.dbname}"
    if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [wanted]).fetchone() is None:
        try:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(wanted)))
        except psycopg.Error as error:
            if named:
                raise UnusableSetting(
                    f"{DAGSTER_DB_VARIABLE}: database {named!r} does not exist and role "
                    f"{conn.info.user!r} may not create it ({_first_line(str(error))}): create it, or unset "
                    f"{DAGSTER_DB_VARIABLE}"
                ) from None
            return str(conn.info.dbname)  # no right to create one: share the warehouse database
    if named:
        with connect(url_with_database(url, wanted), DAGSTER_DB_VARIABLE):
            pass
    return wanted


def url_with_database(url: str, database: str) -> str:
    parts = conninfo_to_dict(url)
    parts["dbname"] = database
    return make_conninfo(**{k: str(v) for k, v in parts.items() if v is not None})


def probe(url: str, named_dagster_db: str = "") -> str:
    """The Dagster database to use with the warehouse at ``url``, or UnusableSetting."""
    with connect(url) as conn:
        check_warehouse(conn)
        return dagster_database(conn, url, named_dagster_db)


def check_data_dir(path: str) -> None:
    """UnusableSetting unless the data folder exists (or can be made) and a file can be written in it."""
    folder = Path(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".probe-"):
            pass
    except OSError as error:
        reason = error.strerror or str(error)
        raise UnusableSetting(
            f"{DATA_DIR_VARIABLE}: the data folder {str(folder)!r} is not writable ({reason}): "
            "choose a folder this user may write, or fix its permissions"
        ) from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("url", nargs="?", help="the warehouse URL to probe")
    parser.add_argument("--data-dir", help="a data folder to check instead")
    arguments = parser.parse_args(argv)
    try:
        if arguments.data_dir is not None:
            check_data_dir(arguments.data_dir)
            return 0
        if not arguments.url:
            parser.error("a URL or --data-dir")
        print(probe(arguments.url, os.environ.get(DAGSTER_DB_VARIABLE, "").strip()))
    except UnusableSetting as unusable:
        print(f"provision: {unusable}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    exit_process(main())
