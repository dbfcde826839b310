"""A target: a table an asset keeps under job keys, with the versions that name how its rows are made.

Every table-writing asset declares one ``Target``. Its name is the table, the key of its state rows and
the asset its provenance names; its transform and schema versions go into every job key and into the
asset's Dagster ``code_version``; its DDL builds the table, and a new schema version rebuilds it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from psycopg import sql

from surveillance_pipeline.core.keys import JobKeyParts
from surveillance_pipeline.core.sql_files import load_sql

# The partition_ref of a target kept whole.
WHOLE_TARGET_REF = "all"


@dataclass(frozen=True)
class Target:
    # The table, and the target its state rows and provenance rows name.
    name: str
    # The domain package whose sql/ folder holds the DDL.
    package: str
    # ``<package>/sql/<create_sql>.sql``: ``{table}`` is the quoted table name; ``{version}`` in the file
    # name picks one file per schema version.
    create_sql: str
    # Bump when the rows a given input produces change (the SQL or code that shapes them).
    transform_version: int = 1
    # Bump with new DDL; the table is then dropped and rebuilt in the next load's transaction.
    schema_version: int = 1
    # Values the DDL names as literals (a CHECK's list), each a tuple of text: ``{name}`` in the file.
    ddl_literals: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # The column that names the partition a row belongs to (``species_id``); None for a target kept whole.
    # A partition's fingerprint is taken over the rows with its value, and an edit is noted against it.
    partition_column: str | None = None
    # Each partition is a table of its own, ``<name>_<partition_ref>``, attached to the target's table
    # (occurrences): a statement addressed to it is watched there, not on the parent.
    table_per_partition: bool = False

    @property
    def code_version(self) -> str:
        """The asset's Dagster code_version: the two versions, so Dagster marks downstream stale on a bump."""
        return f"transform-v{self.transform_version}.schema-v{self.schema_version}"

    def create_statement(self, table: sql.Identifier) -> sql.Composed:
        """The DDL of this schema version for ``table``."""
        literals = {
            name: sql.SQL(", ").join(sql.Literal(value) for value in values)
            for name, values in self.ddl_literals
        }
        statement = load_sql(self.package, self.create_sql.format(version=self.schema_version))
        return statement.format(table=table, **literals)

    def partition_ref(self, value: int | None) -> str:
        """The text naming a partition's rows: the partition column's value, or ``all`` for a whole target."""
        if self.partition_column is None:
            return WHOLE_TARGET_REF
        if value is None:
            raise ValueError(
                f"{self.name}: a partition of this target is named by its {self.partition_column}"
            )
        return str(int(value))

    def partition_table(self, partition_ref: str) -> str | None:
        """The table a partition is kept in when each partition has its own (else None)."""
        return f"{self.name}_{partition_ref}" if self.table_per_partition else None

    def key_parts(self, input_checksum: str, config: Mapping[str, Any]) -> JobKeyParts:
        """The job key's parts for rows made from ``input_checksum`` under ``config`` by this target."""
        return JobKeyParts(
            input=input_checksum,
            transform=self.transform_version,
            config=dict(config),
            schema=self.schema_version,
        )
