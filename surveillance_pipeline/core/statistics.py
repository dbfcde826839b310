"""A table's planner statistics brought up to date before a statement that needs them (Dagster-free).

A delta joins a few thousand changed records with one species' rows of a table that holds every
species. Planned with statistics from before the last run loaded most of that table (autovacuum analyzes
it some minutes after a large load), the planner takes the species for a few rows and picks joins that
read millions of rows many times: at 5M records the month-later ``occurrence_quality`` took 168.2 s run
straight after the first run, and 58.6 s run again 17 minutes later (docs/performance.md).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import psycopg
from psycopg import sql

from surveillance_pipeline.core.sql_files import load_sql

CORE = "surveillance_pipeline.core"


class StatisticsBeforeUse:
    """Analyzes ``table`` at most once (per step: one instance is shared by its partitions' threads), the
    first time ``ensure`` is called, when autovacuum would judge its statistics stale.

    ANALYZE runs on a connection of its own, outside the caller's transaction: inside it, ANALYZE would
    hold its lock (which conflicts with another ANALYZE) until that transaction ended. Its lock does not
    conflict with the reads and writes of the other partitions' transactions.
    """

    def __init__(self, connect: Callable[[], psycopg.Connection], table: str) -> None:
        self._connect, self.table = connect, table
        self._lock = threading.Lock()
        self._checked = False
        # Seconds the ANALYZE took, when one ran (None: the statistics were current, or not yet checked).
        self.analyzed_seconds: float | None = None

    def ensure(self) -> None:
        with self._lock:
            if self._checked:
                return
            with self._connect() as conn:
                row = conn.execute(
                    load_sql(CORE, "select_statistics_stale"), {"table": self.table}
                ).fetchone()
                if row is not None and row[0]:
                    began = time.perf_counter()
                    conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(self.table)))
                    self.analyzed_seconds = time.perf_counter() - began
            self._checked = True
