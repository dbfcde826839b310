"""Release policies over occurrence_quality's flags: which records an output leaves out, what its key reads,
and what its manifest says. Dagster-free.

Under ``keep_all`` an output reads no flags: its input is its upstream's key alone. Under
``drop_any_flagged`` it leaves out every record whose ``first_flag`` is set, and its input names the flags'
content version (not their job key) beside the upstream's key, so a threshold change that flags the same
records moves no output. The masked release, the md5-capped sample (when asked) and the two exports apply
one of these.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import psycopg
from psycopg import sql

from surveillance_pipeline.core.keys import canonical_json, sha256_hex
from surveillance_pipeline.core.refresh import upstream_job_key
from surveillance_pipeline.core.sql_files import load_sql
from surveillance_pipeline.occurrences.load import OCCURRENCES
from surveillance_pipeline.quality.flags import OCCURRENCE_QUALITY, PACKAGE, flags_for_release
from surveillance_pipeline.quality.rules import POLICIES, POLICY_ANY_ENABLED, POLICY_KEEP_ALL

DROP_RULE = "leave out every record that an enabled test flags (occurrence_quality.first_flag is set)"


def checked_policy(policy: str, asset: str) -> str:
    if policy not in POLICIES:
        raise ValueError(f"{asset}: unknown policy {policy!r} (known: {', '.join(POLICIES)})")
    return policy


def drops_flagged(policy: str) -> bool:
    return policy == POLICY_ANY_ENABLED


def kept_by_policy(policy: str, record_id: sql.Composable, species_id: sql.Composable) -> sql.Composable:
    """A row condition: true for a record the policy keeps. ``record_id`` and ``species_id`` say where the
    row's gbifID and species id are (a column, or a bound parameter for a one-species table)."""
    if not drops_flagged(policy):
        return sql.SQL("TRUE")
    return load_sql(PACKAGE, "condition_not_flagged").format(
        quality=sql.Identifier(OCCURRENCE_QUALITY.name), record_id=record_id, species_id=species_id
    )


def input_under_policy(
    conn: psycopg.Connection,
    policy: str,
    upstream: tuple[str, str],
    slugs: Iterable[str],
    *,
    refuse_edits: bool = True,
) -> tuple[str, dict[str, Any]]:
    """An output's input key under ``policy`` and the tests' versions and parameters it applies.

    ``upstream``: (name, key) of what the output reads besides the flags; ``slugs``: the species whose flags
    it reads. Each species' flags must be made for the rows its occurrences partition holds now
    (flags_for_release refuses them otherwise, naming what to materialize). One species keeps the shape
    the masked release has always had: sha256 of {upstream: key, occurrence_quality: content version}.
    """
    name, key = upstream
    if not drops_flagged(policy):
        return key, {}
    versions: dict[str, str] = {}
    tests: dict[str, dict[str, Any]] = {}
    for slug in sorted(slugs):
        occurrences_key = key if name == OCCURRENCES.name else upstream_job_key(conn, OCCURRENCES.name, slug)
        versions[slug], tests[slug] = flags_for_release(
            conn, slug, occurrences_key, refuse_edits=refuse_edits
        )
    if len(versions) == 1:
        flags: str | dict[str, str] = next(iter(versions.values()))
    else:
        flags = versions
    combined = canonical_json({name: key, OCCURRENCE_QUALITY.name: flags})
    return sha256_hex(combined.encode("utf-8")), _one_or_each(tests)


def _one_or_each(tests: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The tests' config once when every species' flags ran with the same, else by species."""
    distinct = {canonical_json(config) for config in tests.values()}
    if len(distinct) <= 1:
        return next(iter(tests.values()), {})
    return {"by_species": tests}


def policy_record(policy: str, tests: dict[str, Any], excluded: dict[str, int]) -> dict[str, Any]:
    """A manifest's account of the policy: its name, each test's version and parameters as
    occurrence_quality applied them, and how many records each test was the first to exclude."""
    if not drops_flagged(policy):
        return {"name": POLICY_KEEP_ALL, "excluded": 0}
    return {
        "name": policy,
        "rule": DROP_RULE,
        "tests": tests,
        "excluded": sum(excluded.values()),
        "excluded_by_first_reason": dict(sorted(excluded.items())),
    }


def flagged_ids(conn: psycopg.Connection, species_id: int) -> frozenset[int]:
    """The ids of a species' records that a policy which drops flagged records leaves out."""
    rows = conn.execute(
        load_sql(PACKAGE, "select_flagged_ids").format(quality=sql.Identifier(OCCURRENCE_QUALITY.name)),
        {"species_id": species_id},
    )
    return frozenset(int(row[0]) for row in rows)
