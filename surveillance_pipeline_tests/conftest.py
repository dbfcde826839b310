"""Fixtures: a real PostGIS database per session, emptied per test, and a data folder per test.

There is no fallback: without a reachable PostGIS server the database tests fail, loudly, so a CI run
can never pass by skipping them. ``make test`` provisions the server first.
"""

from __future__ import annotations

import gzip
import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from surveillance_pipeline.orchestration.instance_storage import storage_config
from surveillance_pipeline_tests.support.paths import CARRIED_DATA, PROJECT_ROOT
from surveillance_pipeline_tests.support.scratch_databases import scratch_database as scratch_database_named

# The public GBIF and Natural Earth files the tests read are carried in the repository (CARRIED_DATA:
# data/shared/, with each folder's PROVENANCE.md and every file's sha256 in SHA256SUMS), so a plain clone
# runs every test. Files over 200 kB are kept gzip-compressed and written out whole for the session.
# The workplace's copy, where it exists: the carried files must be the same bytes.
SHARED_DATA = PROJECT_ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def server_url() -> str:
    url = os.environ.get("SURVEILLANCE_DATABASE_URL")
    if not url:
        pytest.fail(
            "SURVEILLANCE_DATABASE_URL is not set: run the tests with `make test`, which provisions PostGIS"
        )
    return url


@contextmanager
def scratch_database(server_url: str, prefix: str) -> Iterator[str]:
    """A new PostGIS database named after the prefix and this process, dropped afterwards; yields its URL."""
    with scratch_database_named(server_url, f"{prefix}_{os.getpid()}") as url:
        yield url


@pytest.fixture(scope="session")
def database_url(server_url: str) -> Iterator[str]:
    """The warehouse the tests load into: a scratch database, emptied per test by ``db``."""
    with scratch_database(server_url, "surveillance_test") as url:
        yield url


@pytest.fixture()
def db(database_url: str) -> Iterator[psycopg.Connection]:
    """An autocommit connection to an empty project schema (every table but PostGIS's own dropped)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        tables = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'spatial_ref_sys'"
        ).fetchall()
        for (table,) in tables:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {} CASCADE").format(sql.Identifier(table)))
        yield conn


@pytest.fixture()
def data_dir(tmp_path: Path) -> Path:
    path = tmp_path / "data"
    path.mkdir()
    return path


@pytest.fixture(scope="session")
def shared_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The carried public files, laid out as ../shared/data lays them out, each checked by its sha256."""
    folder = tmp_path_factory.mktemp("shared_data")
    for line in (CARRIED_DATA / "SHA256SUMS").read_text(encoding="utf-8").splitlines():
        expected, name = line.split(maxsplit=1)
        carried = CARRIED_DATA / name
        data = (
            carried.read_bytes()
            if carried.exists()
            else gzip.decompress((CARRIED_DATA / f"{name}.gz").read_bytes())
        )
        assert hashlib.sha256(data).hexdigest() == expected, f"{name}: not the bytes SHA256SUMS names"
        if (SHARED_DATA / name).exists():
            assert (SHARED_DATA / name).read_bytes() == data, f"{name}: differs from ../shared/data/{name}"
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    return folder


@pytest.fixture(scope="session")
def dagster_storage_url(server_url: str) -> Iterator[str]:
    """A scratch database for a Postgres-backed Dagster instance, like the project's dagster.yaml."""
    with scratch_database(server_url, "dagster_test") as url:
        yield url.replace("postgresql://", "postgresql+psycopg2://", 1)


@pytest.fixture()
def postgres_instance(dagster_storage_url: str):
    """A real Dagster instance with the project's storage class on Postgres (wiped per test)."""
    import dagster as dg

    overrides = {"storage": storage_config(dagster_storage_url)}
    with dg.instance_for_test(overrides=overrides) as instance:
        instance.wipe()
        yield instance


# The two sessions that take minutes (the browser session, the Celery workers) run one after the other on
# the first xdist worker, while the second works through the short files. Side by side, one on each worker,
# each with its own dagster dev (webserver, daemon, code servers) and run processes on two cores, each took
# twice its time alone (one CI run: 755 s and 567 s; the browser session alone: 377 s), and the suite
# waited for the later of the two. xdist (--dist loadfile --no-loadscope-reorder) hands files out in
# collection order: one to each worker, then one more to each at once, then one to whichever has at most
# two tests left. So the order is the browser session's file, one short file, the distributed session's
# file, then the rest (test_workers, the shorter distributed file, first among them).
LONG_SESSIONS = ("e2e", "distributed")


def _session(item: pytest.Item) -> int:
    marked = [i for i, name in enumerate(LONG_SESSIONS) if item.get_closest_marker(name)]
    return marked[0] if marked else len(LONG_SESSIONS)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_session)
    files = list(dict.fromkeys(item.path for item in items))
    browser = [path for path in files if path in {i.path for i in items if _session(i) == 0}]
    distributed = [path for path in files if path in {i.path for i in items if _session(i) == 1}]
    short = [path for path in files if path not in browser and path not in distributed]
    if not (browser and distributed and short):
        return  # a selection without both sessions: the plain order
    # test_distributed (the long one) third, after one short file; test_workers and the rest follow.
    longest = [path for path in distributed if path.name == "test_distributed.py"] or distributed[:1]
    order = browser + short[:1] + longest + [p for p in distributed if p not in longest] + short[1:]
    rank = {path: index for index, path in enumerate(order)}
    items.sort(key=lambda item: rank[item.path])
