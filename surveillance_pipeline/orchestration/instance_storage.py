"""The project's Dagster instance storage: dagster-postgres, with its event log and run storage pooled.

dagster-postgres gives every storage call a new connection (SQLAlchemy's ``NullPool``), so an idle
instance holds nothing open. Storing one materialization takes three or four such connections (the event;
its tags and the asset's row on another; a table-exists check on a third, while that one is open), and
with password authentication (SCRAM) each costs about 8 ms here. A no-change ``make run`` stores one
materialization per partition and asset (7 × 71), and spent more time connecting than doing anything else.

The event log and the run storage are pooled: the event log is written per partition, and the run storage
is asked about its runs and its own columns a dozen times per run, each time on a new connection (about 50
connections in a no-change ``make run``). One connection stays open for each of them per instance, as in
the Dagster webserver's own pooled storage (its ``optimize_for_webserver`` swaps both engines likewise);
the event log's table-exists check is answered from memory once the table is seen, so no call needs a
second. Connections are pinged when checked out, so one dropped by a server restart is replaced instead of
failing a run. Runs launched by the daemon rebuild their instance from the same ``dagster.yaml`` and pool
the same way. Schedule storage keeps dagster-postgres's behaviour: it is read by the daemon's ticks, not
per partition.

Pool slots are claimed and freed one process at a time. Dagster's claim is several statements on
autocommit connections: it counts the unassigned slots, adds the step to the pool's queue as assigned if
one was left, then picks a free slot row ``FOR UPDATE SKIP LOCKED`` and fills it. In autocommit the row
lock ends with the SELECT, so steps claiming at the same moment all counted the same free slot and were
all assigned it, and two could fill the one slot: of 30 trials of three simultaneous claims of a pool
with limit 1, 6 ended with two steps holding it and 28 with more steps assigned than slots (an assigned
step is no longer counted as waiting; the fault suite waited for waiters it could not see). Each claim
and each release therefore runs under one transaction-scoped advisory lock in Dagster's database, held
on a connection of its own: the same 30 trials then gave one holder and two waiters every time.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Self

import dagster as dg
from dagster_postgres import (
    DagsterPostgresStorage,
    PostgresEventLogStorage,
    PostgresRunStorage,
    PostgresScheduleStorage,
)
from dagster_postgres.utils import create_pg_engine, get_token_provider_from_config, pg_url_from_config
from sqlalchemy import select, text, true
from sqlalchemy.engine import Connection, Engine

from surveillance_pipeline.core.keys import advisory_lock_id
from surveillance_pipeline.orchestration.dagster_internals import (
    AssetEventTagsTable,
    ConfigurableClassData,
    EventLogEntry,
    PostgresStorageConfig,
    SqlEventLogStorageTable,
    pg_config,
)

if TYPE_CHECKING:
    from dagster_postgres.auth import PgTokenProvider

    from surveillance_pipeline.orchestration.dagster_internals import ConcurrencyClaimStatus, UserConfigSchema

POOLED_CONNECTIONS = 1
# The event log's pool keeps two: a pool-slot claim or release holds one for its lock
# (_pool_slots_locked) while Dagster's own statements take another. With one, each of those statements
# opened and closed a connection of its own (five or six per step, 10-20 ms each with its
# authentication): 1.2 s of a no-change make run under py-spy.
EVENT_LOG_POOLED_CONNECTIONS = 2
# Beyond the pool, for threads of a daemon storing at once; closed when returned.
OVERFLOW_CONNECTIONS = 8
# Reconnect after an hour, as the Dagster webserver does with its own pooled storage.
RECYCLE_SECONDS = 3600
# The advisory lock every pool claim and release takes, in Dagster's database.
POOL_SLOTS_LOCK = advisory_lock_id("dagster", "pool-slots")


def _arguments_from_config(config_value: Mapping[str, Any]) -> dict[str, Any]:
    """What dagster-postgres's storages read from their config block (``pg_config``)."""
    return {
        "postgres_url": pg_url_from_config(config_value),
        "should_autocreate_tables": bool(config_value.get("should_autocreate_tables", True)),
        "token_provider": get_token_provider_from_config(config_value),
    }


def pooled_engine(
    postgres_url: str, token_provider: PgTokenProvider | None, pool_size: int = POOLED_CONNECTIONS
) -> Engine:
    """The engine dagster-postgres builds for a storage, holding ``pool_size`` connections instead of none."""
    return create_pg_engine(
        postgres_url,
        token_provider,
        isolation_level="AUTOCOMMIT",
        pool_size=pool_size,
        max_overflow=OVERFLOW_CONNECTIONS,
        pool_recycle=RECYCLE_SECONDS,
        pool_pre_ping=True,
    )


class _PooledEngine:
    """What the pooled storages add to dagster-postgres's: the pooled engine, built from the same arguments
    (also from config) and disposed with the storage. Comes first in the bases, before the storage class."""

    _engine: Engine
    # Connections the engine keeps open.
    pooled_connections = POOLED_CONNECTIONS

    def __init__(
        self,
        postgres_url: str,
        should_autocreate_tables: bool = True,
        inst_data: ConfigurableClassData | None = None,
        token_provider: PgTokenProvider | None = None,
    ):
        super().__init__(postgres_url, should_autocreate_tables, inst_data, token_provider)  # type: ignore[call-arg]
        self._engine = pooled_engine(postgres_url, token_provider, self.pooled_connections)

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData | None, config_value: Any) -> Self:
        return cls(inst_data=inst_data, **_arguments_from_config(config_value))

    def dispose(self) -> None:
        super().dispose()  # type: ignore[misc]
        self._engine.dispose()


class PooledPostgresRunStorage(_PooledEngine, PostgresRunStorage):
    """``PostgresRunStorage`` whose engine keeps a connection open instead of none."""


class PooledPostgresEventLogStorage(_PooledEngine, PostgresEventLogStorage):
    """``PostgresEventLogStorage`` whose engine keeps two connections open instead of none."""

    pooled_connections = EVENT_LOG_POOLED_CONNECTIONS

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._present_tables: set[str] = set()
        self._present_asset_key_columns: set[str] = set()

    def has_table(self, table_name: str) -> bool:
        """Asked on every asset event, on a second connection; a table once there stays there."""
        if table_name in self._present_tables:
            return True
        present = super().has_table(table_name)
        if present:
            self._present_tables.add(table_name)
        return present

    def _has_asset_key_col_on_connection(self, conn: Connection, column_name: str) -> bool:
        """Whether Dagster's asset_keys table has a column (added by its schema migrations): Dagster asks
        before every step (its input versions), on every batch of events and for every asset status,
        each time reflecting the table's columns from the server's catalog, 2-4 ms here; 72 times in a
        no-change ``make run``. A column once there stays there (migrations add them), so a present one
        is remembered; a missing one is asked about again."""
        if column_name in self._present_asset_key_columns:
            return True
        present = super()._has_asset_key_col_on_connection(conn, column_name)
        if present:
            self._present_asset_key_columns.add(column_name)
        return present

    def get_latest_tags_by_partition(
        self,
        asset_key: dg.AssetKey,
        event_type: dg.DagsterEventType,
        tag_keys: Sequence[str],
        asset_partitions: Sequence[str] | None = None,
        before_cursor: int | None = None,
        after_cursor: int | None = None,
    ) -> Mapping[str, Mapping[str, str]]:
        """Each partition's latest event's tags: Dagster's own query, its tags looked up by event id.

        Asked once or twice per upstream before every step of a partitioned asset (Dagster's input
        versions, and reporting.py's lineage). Dagster joins the latest event id of each partition to
        the tags table, and PostgreSQL, guessing some 1,300 partitions where there are 71, hashes every
        data version tag ever written: 12-15 ms per upstream in the project's instance after a few
        hundred runs, growing with its history. Joined laterally (``OFFSET 0`` keeps PostgreSQL from
        undoing that), each partition's tags are one index lookup: 1.7 ms, the same rows."""
        if not tag_keys or len(tag_keys) != len(self.get_asset_tags_to_index(set(tag_keys))):
            # Dagster's own refusal (only indexed tags can be asked for).
            return super().get_latest_tags_by_partition(
                asset_key, event_type, tag_keys, asset_partitions, before_cursor, after_cursor
            )
        latest = self._latest_event_ids_by_partition_subquery(
            asset_key=asset_key,
            event_types=[event_type],
            asset_partitions=asset_partitions,
            before_cursor=before_cursor,
            after_cursor=after_cursor,
        )
        tags = (
            select(AssetEventTagsTable.c.key, AssetEventTagsTable.c.value)
            .where(AssetEventTagsTable.c.event_id == latest.c.id, AssetEventTagsTable.c.key.in_(tag_keys))
            .offset(0)
            .lateral("latest_tags")
        )
        query = select(latest.c.partition, tags.c.key, tags.c.value).select_from(latest.join(tags, true()))
        with self.index_connection() as conn:
            rows = conn.execute(query).fetchall()
        latest_tags: dict[str, dict[str, str]] = {}
        for partition, key, value in rows:
            latest_tags.setdefault(partition, {})[key] = value
        return latest_tags

    def store_event_batch(self, events: Sequence[EventLogEntry]) -> None:
        """dagster-postgres writes a batch of materializations in one insert, but a batch of planned
        materializations (one per partition and asset, at a range run's creation: 497 for the species run)
        one event at a time, about four statements each. These are written as materializations are: one
        insert, their tags, and the asset's row from the batch's last event per asset (the row keeps the
        latest planned event's id; the partitions' own events are read from the event log itself)."""
        planned = dg.DagsterEventType.ASSET_MATERIALIZATION_PLANNED
        if not events or any(event.get_dagster_event().event_type != planned for event in events):
            super().store_event_batch(events)
            return
        statement = self.prepare_insert_event_batch(events)
        with self._connect() as conn:
            result = conn.execute(statement.returning(SqlEventLogStorageTable.c.id))
            event_ids = [int(row[0]) for row in result.fetchall()]
        last_by_asset = {event.get_dagster_event().asset_key: index for index, event in enumerate(events)}
        with self.index_transaction() as conn:
            self._store_asset_event_tags(conn, events, event_ids)
            for index in sorted(last_by_asset.values()):
                self._store_asset_event(conn, events[index], event_ids[index])

    @contextmanager
    def _pool_slots_locked(self) -> Iterator[None]:
        """Hold the pool-slots lock for the block: Dagster's claim and release then run one at a time.

        Transaction-scoped, so whatever ends the block (an error, the KeyboardInterrupt a waiting run gets
        on SIGTERM, a dropped connection) gives it back. The block's own statements use other connections
        (dagster-postgres opens its own for each), which is why the lock is taken on a connection of its own.
        """
        with self.index_transaction() as conn:
            conn.execute(text("SELECT pg_advisory_xact_lock(:lock)"), {"lock": POOL_SLOTS_LOCK})
            yield

    def claim_concurrency_slot(
        self, concurrency_key: str, run_id: str, step_key: str, priority: int | None = None
    ) -> ConcurrencyClaimStatus:
        with self._pool_slots_locked():
            return super().claim_concurrency_slot(concurrency_key, run_id, step_key, priority)

    def free_concurrency_slots_for_run(self, run_id: str) -> None:
        with self._pool_slots_locked():
            super().free_concurrency_slots_for_run(run_id)

    def free_concurrency_slot_for_step(self, run_id: str, step_key: str) -> None:
        with self._pool_slots_locked():
            super().free_concurrency_slot_for_step(run_id, step_key)


class PooledPostgresStorage(DagsterPostgresStorage):
    """dagster-postgres storage (runs, schedules, events) with the run storage and event log pooled."""

    def __init__(
        self,
        postgres_url: str,
        should_autocreate_tables: bool = True,
        inst_data: ConfigurableClassData | None = None,
        token_provider: PgTokenProvider | None = None,
    ):
        # dagster-postgres's own __init__ with the pooled storages in place of its two: building both and
        # replacing them would check every table twice per instance (and once more per run worker).
        self.postgres_url = postgres_url
        self.should_autocreate_tables = should_autocreate_tables
        self._inst_data = inst_data
        self._run_storage = PooledPostgresRunStorage(
            postgres_url, should_autocreate_tables, token_provider=token_provider
        )
        self._event_log_storage = PooledPostgresEventLogStorage(
            postgres_url, should_autocreate_tables, token_provider=token_provider
        )
        self._schedule_storage = PostgresScheduleStorage(
            postgres_url, should_autocreate_tables, token_provider=token_provider
        )
        super(DagsterPostgresStorage, self).__init__()

    @classmethod
    def config_type(cls) -> UserConfigSchema:
        return pg_config()

    @classmethod
    def from_config_value(  # type: ignore[override]
        cls, inst_data: ConfigurableClassData | None, config_value: PostgresStorageConfig
    ) -> PooledPostgresStorage:
        return cls(inst_data=inst_data, **_arguments_from_config(config_value))


def storage_config(postgres_url: str) -> dict[str, Any]:
    """dagster.yaml's ``storage`` block for this storage on ``postgres_url`` (tests, scratch instances)."""
    return {
        "custom": {
            "module": __name__,
            "class": PooledPostgresStorage.__name__,
            "config": {"postgres_url": postgres_url},
        }
    }
