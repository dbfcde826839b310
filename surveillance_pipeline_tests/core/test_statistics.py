"""StatisticsBeforeUse: a table's statistics analyzed once, only when autovacuum's rule finds them stale."""

from __future__ import annotations

import psycopg

from surveillance_pipeline.core.statistics import StatisticsBeforeUse


def _insert(db: psycopg.Connection, rows: int) -> None:
    # Counted in pg_stat_user_tables as the transaction commits, not up to a second later.
    with db.transaction():
        db.execute("SELECT pg_stat_force_next_flush()")
        db.execute("INSERT INTO counted SELECT g FROM generate_series(1, %s) AS g", [rows])


def _analyzed(db: psycopg.Connection) -> tuple[int, float]:
    row = db.execute(
        "SELECT s.analyze_count, c.reltuples FROM pg_stat_user_tables AS s "
        "JOIN pg_class AS c ON c.oid = s.relid WHERE s.relname = 'counted'"
    ).fetchone()
    assert row is not None
    return int(row[0]), float(row[1])


def test_analyzes_once_and_only_stale_statistics(db: psycopg.Connection, database_url: str) -> None:
    # Autovacuum off for this table: it must not analyze it between the test's steps.
    db.execute("CREATE TABLE counted (id integer) WITH (autovacuum_enabled = false)")
    _insert(db, 10_000)

    def connect() -> psycopg.Connection:
        return psycopg.connect(database_url, autocommit=True)

    never_analyzed = StatisticsBeforeUse(connect, "counted")
    never_analyzed.ensure()
    assert never_analyzed.analyzed_seconds is not None
    assert _analyzed(db) == (1, 10_000.0)

    # Once per instance (per step): the rows loaded since are the next step's to count.
    _insert(db, 20_000)
    never_analyzed.ensure()
    assert _analyzed(db) == (1, 10_000.0)

    # 20,000 rows changed against 50 + 10% of 10,000: stale.
    stale = StatisticsBeforeUse(connect, "counted")
    stale.ensure()
    assert stale.analyzed_seconds is not None
    assert _analyzed(db) == (2, 30_000.0)

    # 100 rows changed against 50 + 10% of 30,000: current, left as they are.
    _insert(db, 100)
    current = StatisticsBeforeUse(connect, "counted")
    current.ensure()
    assert current.analyzed_seconds is None
    assert _analyzed(db) == (2, 30_000.0)


def test_analyzes_a_loaded_table_whose_change_counts_were_lost(server_url: str) -> None:
    # A table loaded and vacuumed, never analyzed, then its change counts lost (as after a crash or an
    # immediate shutdown; here a database copied from it, which starts without them): autovacuum's rule
    # sees nothing changed, and the planner would guess every column of it.
    from psycopg import sql

    from surveillance_pipeline_tests.conftest import scratch_database
    from surveillance_pipeline_tests.support.scratch_databases import drop_database, with_database

    with scratch_database(server_url, "statistics_loaded") as loaded_url:
        with psycopg.connect(loaded_url, autocommit=True) as loaded:
            loaded.execute("CREATE TABLE counted (id integer) WITH (autovacuum_enabled = false)")
            loaded.execute("INSERT INTO counted SELECT g FROM generate_series(1, 10000) AS g")
            # Counts its rows (reltuples), as autovacuum's vacuum after many inserts does: no statistics.
            loaded.execute("VACUUM counted")
        copy_name = f"{loaded_url.rsplit('/', 1)[1]}_copy"
        with psycopg.connect(server_url, autocommit=True) as admin:
            drop_database(admin, copy_name)
            admin.execute(
                sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                    sql.Identifier(copy_name), sql.Identifier(loaded_url.rsplit("/", 1)[1])
                )
            )
        copy_url = with_database(server_url, copy_name)
        try:
            with psycopg.connect(copy_url, autocommit=True) as copy:
                row = copy.execute(
                    "SELECT s.n_mod_since_analyze, c.reltuples FROM pg_stat_user_tables AS s "
                    "JOIN pg_class AS c ON c.oid = s.relid WHERE s.relname = 'counted'"
                ).fetchone()
                assert row == (0, 10_000.0)  # what autovacuum's rule reads: nothing changed since a count

                lost = StatisticsBeforeUse(lambda: psycopg.connect(copy_url, autocommit=True), "counted")
                lost.ensure()
                assert lost.analyzed_seconds is not None
                assert _analyzed(copy) == (1, 10_000.0)

                # Analyzed once, its statistics are current again.
                again = StatisticsBeforeUse(lambda: psycopg.connect(copy_url, autocommit=True), "counted")
                again.ensure()
                assert again.analyzed_seconds is None
        finally:
            with psycopg.connect(server_url, autocommit=True) as admin:
                drop_database(admin, copy_name)
