"""quality_report: what the quality tests found, over every species, as a page a user opens (Dagster-free).

``data/exports/quality_report/`` holds ``quality_report.md`` (the tests with their versions, parameters and
sources; per species its records, the share flagged and the records each test flagged and was first to
flag) and ``quality_counts.csv`` (the same counts, one row per species and test), with a manifest. Its
key's input is every quality partition's content version and config: it is rewritten when a flag or a
parameter it states changed, and skipped otherwise.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import psycopg
from psycopg import sql

from surveillance_pipeline.core.keys import JobKeyParts, canonical_json, sha256_hex
from surveillance_pipeline.core.refresh import refuse_edited_targets
from surveillance_pipeline.core.sql_files import load_sql
from surveillance_pipeline.quality.flags import OCCURRENCE_QUALITY, content_version
from surveillance_pipeline.quality.rules import TESTS, TESTS_BY_NAME
from surveillance_pipeline.releases.exports import EXPORT_FORMAT, ExportFile, csv_export

PACKAGE = "surveillance_pipeline.releases"
REPORT = "quality_report"
REPORT_VERSION = 1
ORDER = "ORDER BY species_id, test (the tests' fixed order)"
COUNT_COLUMNS = ("species_id", "slug", "test", "enabled", "flagged", "first_reason", "records")


def report_parts(conn: psycopg.Connection) -> JobKeyParts:
    """The report's key: every quality partition's content version and config (state rows only)."""
    rows = conn.execute(load_sql(PACKAGE, "select_quality_states"), {"target": OCCURRENCE_QUALITY.name})
    held = {slug: [content_version(count, digest), config] for slug, count, digest, config in rows.fetchall()}
    return JobKeyParts(
        input=sha256_hex(canonical_json(held).encode("utf-8")),
        transform=REPORT_VERSION,
        config={},
        schema=EXPORT_FORMAT,
    )


def build_report(conn: psycopg.Connection) -> tuple[JobKeyParts, list[ExportFile]]:
    """The report's files, read in one snapshot with the state rows its key names."""
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        parts = report_parts(conn)
        refuse_edited_targets(conn, OCCURRENCE_QUALITY.name)
        states = conn.execute(load_sql(PACKAGE, "select_quality_states"), {"target": OCCURRENCE_QUALITY.name})
        configs = {slug: config for slug, _, _, config in states.fetchall()}
        flags = sql.SQL(", ").join(
            sql.SQL("count(*) FILTER (WHERE {}), count(*) FILTER (WHERE first_flag = {})").format(
                sql.Identifier(test.column), sql.Placeholder(test.name)
            )
            for test in TESTS
        )
        query = load_sql(PACKAGE, "select_quality_report_counts").format(
            table=sql.Identifier(OCCURRENCE_QUALITY.name), flags=flags
        )
        counted = conn.execute(query, {test.name: test.name for test in TESTS}).fetchall()
    per_species = []
    for species_id, slug, scientific_name, records, flagged, *values in counted:
        config = configs.get(slug, {})
        by_test = {
            test.name: (test.name in config, int(values[2 * i]), int(values[2 * i + 1]))
            for i, test in enumerate(TESTS)
        }
        per_species.append((int(species_id), slug, scientific_name, int(records), int(flagged), by_test))
    count_rows = [
        (species_id, slug, name, "true" if enabled else "false", flagged_by, first, records)
        for species_id, slug, _, records, _, by_test in per_species
        for name, (enabled, flagged_by, first) in by_test.items()
    ]
    markdown = _markdown(per_species, configs)
    # The counts first: their rows (a species and test each) are the report's rows, as its manifest says.
    files = [
        csv_export("quality_counts.csv", COUNT_COLUMNS, count_rows),
        ExportFile(f"{REPORT}.md", markdown.encode("utf-8"), len(count_rows), "markdown"),
    ]
    return parts, files


def _markdown(per_species: list[tuple[Any, ...]], configs: dict[str, dict[str, Any]]) -> str:
    lines = ["# Record quality", ""]
    records = sum(row[3] for row in per_species)
    flagged = sum(row[4] for row in per_species)
    share = f"{100 * flagged / records:.1f}%" if records else "-"
    lines += [
        f"{len(per_species)} species, {records:,} records; {flagged:,} ({share}) flagged by at least one "
        "enabled test. A flag never drops a record: the table occurrence_quality holds every record with "
        "one column per test; the masked release's policy decides what is left out.",
        "",
        "## The tests",
        "",
        "| test | version | flags | parameters | source |",
        "|---|---:|---|---|---|",
    ]
    # The parameters each test ran with, where every species ran it with the same (else: 'varies').
    seen: dict[str, set[str]] = defaultdict(set)
    for config in configs.values():
        for name in TESTS_BY_NAME:
            seen[name].add(canonical_json(config.get(name)))
    for test in TESTS:
        used = seen.get(test.name, set())
        if used == {canonical_json(None)} or not used:
            parameters = "off"
        elif len(used) == 1:
            config = dict(configs[next(iter(configs))].get(test.name) or {})
            config.pop("version", None)
            config.pop("layers", None)
            parameters = ", ".join(f"{key} {_value(value)}" for key, value in sorted(config.items())) or "-"
        else:
            parameters = "varies by species (see each partition's job_key_parts)"
        description = test.description.replace("|", "\\|")  # a cell's own bars, escaped for markdown
        lines.append(f"| {test.name} | {test.version} | {description} | {parameters} | {test.source} |")
    lines += [
        "",
        "## Per species",
        "",
        "Each cell: records the test flagged / records it was the first test to flag.",
        "",
        "| species | records | flagged | " + " | ".join(test.name for test in TESTS) + " |",
        "|---|---:|---:|" + "---:|" * len(TESTS),
    ]
    for _, slug, scientific_name, count, flagged_count, by_test in per_species:
        cells = [
            f"{flagged_by:,} / {first:,}" if enabled else "off"
            for enabled, flagged_by, first in by_test.values()
        ]
        share = f"{100 * flagged_count / count:.1f}%" if count else "-"
        lines.append(
            f"| {scientific_name} ({slug}) | {count:,} | {flagged_count:,} ({share}) | "
            + " | ".join(cells)
            + " |"
        )
    return "\n".join(lines) + "\n"


def _value(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(str(item) for item in value)
    return str(value)
