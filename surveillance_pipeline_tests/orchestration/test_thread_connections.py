"""A step's warehouse connections: one per thread, the ones its partition threads need opened ahead."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest

from surveillance_pipeline.orchestration.reporting import partition_threads
from surveillance_pipeline.orchestration.resources import ThreadConnections, Warehouse

pytestmark = pytest.mark.db


def _backend_pids(server_url: str, database_url: str) -> set[int]:
    database = psycopg.conninfo.conninfo_to_dict(database_url)["dbname"]
    with psycopg.connect(server_url, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND application_name = %s",
            [database, "surveillance_pipeline"],
        ).fetchall()
    return {pid for (pid,) in rows}


def test_partition_threads_are_used_only_for_several_partitions_side_by_side():
    assert partition_threads(["a", "b", "c"], 2) == 2
    assert partition_threads(["a"], 2) == 0
    assert partition_threads(["a", "b"], 1) == 0


def test_connections_opened_ahead_go_one_to_each_thread_and_none_is_left_open(server_url, database_url):
    warehouse = Warehouse(database_url=database_url)
    before = _backend_pids(server_url, database_url)
    with ThreadConnections.for_partitions(warehouse, threads=2, this_thread_too=True) as connections:
        # Opened before anyone asks: the step's reads of Dagster's versions go on meanwhile.
        deadline = time.monotonic() + 30
        while len(_backend_pids(server_url, database_url) - before) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(_backend_pids(server_url, database_url) - before) == 3
        own = connections.get()
        assert connections.get() is own
        ready = threading.Barrier(2)

        def in_a_thread(_: int) -> int:
            conn = connections.get()
            ready.wait(timeout=10)  # both threads hold theirs at once: no thread takes another's
            assert connections.get() is conn
            return id(conn)

        with ThreadPoolExecutor(2) as pool:
            theirs = set(pool.map(in_a_thread, range(2)))
        assert len(theirs) == 2 and id(own) not in theirs
        # Three opened ahead, three handed out: the fourth thread to ask connects itself.
        assert len(_backend_pids(server_url, database_url) - before) == 3
    assert _backend_pids(server_url, database_url) <= before


def test_connections_opened_ahead_that_nobody_asked_for_are_closed(server_url, database_url):
    warehouse = Warehouse(database_url=database_url)
    before = _backend_pids(server_url, database_url)
    with ThreadConnections.for_partitions(warehouse, threads=2, this_thread_too=True) as connections:
        connections.get()
    assert _backend_pids(server_url, database_url) <= before


def test_a_connection_opened_ahead_that_failed_fails_the_thread_that_takes_it(server_url):
    unreachable = Warehouse(database_url="postgresql://nobody:wrong@127.0.0.1:1/nowhere?connect_timeout=5")
    with (
        ThreadConnections.for_partitions(unreachable, threads=0) as connections,
        pytest.raises(psycopg.OperationalError),
    ):
        connections.get()
    # Nobody took this one: its failure is nobody's error, and leaving the block raises nothing.
    with ThreadConnections.for_partitions(unreachable, threads=2):
        pass
