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

    def key_parts(self, input_checksum: str, config: Mapping[str, Any]) -> JobKeyParts:
        """The job key's parts for rows made from ``input_checksum`` under ``config`` by this target."""
        return JobKeyParts(
            input=input_checksum,
            transform=self.transform_version,
            config=dict(config),
            schema=self.schema_version,
        )
