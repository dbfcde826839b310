"""The scratch places the bench measures in, as the tests make them: psql's environment for a database,
a Dagster home like the project's on a scratch storage database, a warehouse emptied of the project's
tables. The lab warehouse, its Dagster storage and ``data/`` are never touched."""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import yaml
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from surveillance_pipeline.core.settings import DATABASE_URL_VARIABLE, PROJECT_ROOT


def makefile_event_batch_size() -> str:
    """What `make` exports besides .local/env.sh: the Makefile's EVENT_BATCH_SIZE, read from it."""
    found = re.search(r"^EVENT_BATCH_SIZE := (\d+)$", (PROJECT_ROOT / "Makefile").read_text(), re.MULTILINE)
    if found is None:
        raise RuntimeError("the Makefile sets no EVENT_BATCH_SIZE")
    return found[1]


EVENT_BATCH_SIZE = makefile_event_batch_size()


def libpq_environment(url: str) -> dict[str, str]:
    """PG* variables for a URL, so psql never carries the password on its command line."""
    parts = conninfo_to_dict(url)
    names = {"host": "PGHOST", "port": "PGPORT", "user": "PGUSER", "password": "PGPASSWORD"}
    environment = {names[k]: str(v) for k, v in parts.items() if k in names and v is not None}
    environment["PGDATABASE"] = str(parts["dbname"])
    return environment


def drop_project_tables(conn: psycopg.Connection) -> None:
    tables = conn.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'spatial_ref_sys'"
    ).fetchall()
    for (table,) in tables:
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {} CASCADE").format(sql.Identifier(table)))


def dagster_home(directory: Path, storage_db: str, pool_limit: int) -> dict[str, str]:
    """A DAGSTER_HOME like the project's (Postgres storage, queued coordinator), on a scratch database,
    with the events batched as the Makefile batches them (also when the bench is run without make)."""
    directory.mkdir(parents=True, exist_ok=True)
    config = yaml.safe_load((PROJECT_ROOT / "dagster.yaml").read_text(encoding="utf-8"))
    config["concurrency"]["pools"]["default_limit"] = pool_limit
    (directory / "dagster.yaml").write_text(yaml.safe_dump(config, sort_keys=True), encoding="utf-8")
    return {
        "DAGSTER_HOME": str(directory),
        "DAGSTER_PG_DB": storage_db,
        "DAGSTER_ARTIFACTS_DIR": str(directory / "artifacts"),
        "DAGSTER_COMPUTE_LOGS_DIR": str(directory / "compute_logs"),
        "DAGSTER_EVENT_BATCH_SIZE": os.environ.get("DAGSTER_EVENT_BATCH_SIZE", EVENT_BATCH_SIZE),
    }


def download_environment(home: Path, storage_url: str, warehouse_url: str, data: Path) -> dict[str, str]:
    """The environment of a run that reads ``data``'s downloads/, on scratch databases: one slot per pool,
    the events batched as the Makefile batches them (dagster_home)."""
    return {
        **dagster_home(home, urlsplit(storage_url).path.lstrip("/"), pool_limit=1),
        DATABASE_URL_VARIABLE: warehouse_url,
        "SURVEILLANCE_DATA_DIR": str(data),
        "GBIF_SOURCE": "download",
        # A species no download holds is searched through the offline lab data, never GBIF's API.
        "GBIF_FALLBACK_SOURCE": "lab",
    }
