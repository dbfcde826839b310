"""Refresh one species' md5-capped sample in PostGIS under its job key, recording membership drift."""

from __future__ import annotations

from dataclasses import dataclass, field

import psycopg
from psycopg import sql

from surveillance_pipeline.core.errors import StaleInputError
from surveillance_pipeline.core.keys import JobKeyParts, canonical_json, sha256_hex
from surveillance_pipeline.core.refresh import (
    WHOLE_TARGET,
    HeldKeys,
    RefreshOutcome,
    last_recorded_key,
    read_held_keys,
    refresh_partition,
    report_derived_output,
    upstream_job_key,
)
from surveillance_pipeline.core.sql_files import load_sql
from surveillance_pipeline.core.targets import Target
from surveillance_pipeline.gbif.registry import Species
from surveillance_pipeline.occurrences.load import OCCURRENCES
from surveillance_pipeline.quality.policy import checked_policy, input_under_policy, kept_by_policy
from surveillance_pipeline.quality.rules import POLICY_KEEP_ALL
from surveillance_pipeline.samples.engines import postgis_summary
from surveillance_pipeline.samples.rules import SampleSummary

PACKAGE = "surveillance_pipeline.samples"
OCCURRENCE_SAMPLE = Target(
    "occurrence_sample", PACKAGE, "create_occurrence_sample", partition_column="species_id"
)
DEFAULT_CAP = 100
# The sample's definition is over every record of occurrences; asked, it samples under a release policy.
DEFAULT_POLICY = POLICY_KEEP_ALL


@dataclass(frozen=True)
class Drift:
    """Ids that entered the sample (with their pick) and ids that left it (with their old pick)."""

    entered: list[tuple[int, int]] = field(default_factory=list)
    left: list[tuple[int, int]] = field(default_factory=list)


def sample_state(conn: psycopg.Connection) -> tuple[str, list[str]]:
    """What the whole sample holds, in one read of its state rows: the sha256 of every partition's job key
    (one input checksum), and the species it holds a partition of, by slug."""
    keys = conn.execute(
        "SELECT partition_key, job_key FROM target_state WHERE target = %s ORDER BY partition_key",
        [OCCURRENCE_SAMPLE.name],
    ).fetchall()
    digest = sha256_hex(canonical_json([list(k) for k in keys]).encode("utf-8"))
    return digest, [str(slug) for slug, _ in keys]


def sample_state_digest(conn: psycopg.Connection) -> str:
    """sha256 of every sample partition's job key: what the whole sample holds, as one input checksum."""
    return sample_state(conn)[0]


def sample_job_parts(input_key: str, cap: int, policy: str = DEFAULT_POLICY) -> JobKeyParts:
    """``input_key``: what occurrences holds, with the flags' content version under a policy that drops
    (sample_input)."""
    return OCCURRENCE_SAMPLE.key_parts(
        input_key, {"cap": cap, "policy": checked_policy(policy, OCCURRENCE_SAMPLE.name)}
    )


def sample_input(
    conn: psycopg.Connection, slug: str, occurrences_key: str, policy: str, *, refuse_edits: bool = True
) -> str:
    """The sample's input key: occurrences' key, and under a policy that drops the flags' content version."""
    return input_under_policy(
        conn, policy, (OCCURRENCES.name, occurrences_key), [slug], refuse_edits=refuse_edits
    )[0]


def held_sample_inputs(conn: psycopg.Connection) -> HeldKeys:
    """What ``occurrences`` holds, read once for a step's species (refresh_species_sample's ``held``)."""
    return read_held_keys(conn, OCCURRENCES.name)


def refresh_species_sample(
    conn: psycopg.Connection,
    *,
    species: Species,
    cap: int,
    run_id: str,
    held: HeldKeys | None = None,
    policy: str = DEFAULT_POLICY,
) -> tuple[RefreshOutcome, Drift]:
    """Make ``occurrence_sample`` hold this species' first ``cap`` picks of what ``occurrences`` holds
    (under ``policy``, of the records it keeps).

    ``held``: the keys ``occurrences`` held when the step began, from which a skip is decided in one
    statement (refresh_partition's ``likely_parts``).
    """
    if cap < 1:
        raise ValueError(f"occurrence_sample config: cap must be at least 1, got {cap}")
    drift = Drift()

    checked_policy(policy, OCCURRENCE_SAMPLE.name)

    def parts(connection: psycopg.Connection) -> JobKeyParts:
        occurrences_key = upstream_job_key(connection, OCCURRENCES.name, species.slug)
        return sample_job_parts(sample_input(connection, species.slug, occurrences_key, policy), cap, policy)

    def replace_rows(connection: psycopg.Connection) -> int:
        table = sql.Identifier(OCCURRENCE_SAMPLE.name)
        connection.execute(
            sql.SQL(
                "CREATE TEMPORARY TABLE previous_sample ON COMMIT DROP AS "
                "SELECT id, pick FROM {} WHERE species_id = %s"
            ).format(table),
            [species.species_id],
        )
        connection.execute(
            sql.SQL("DELETE FROM {} WHERE species_id = %s").format(table), [species.species_id]
        )
        rows = connection.execute(
            load_sql(PACKAGE, "insert_species_sample").format(
                occurrence_sample=table,
                kept=kept_by_policy(
                    policy, sql.Identifier("occurrences", "id"), sql.Identifier("occurrences", "species_id")
                ),
            ),
            {"species_id": species.species_id, "cap": cap},
        ).rowcount
        changes = connection.execute(
            load_sql(PACKAGE, "insert_sample_drift").format(occurrence_sample=table),
            {"run_id": run_id, "species_id": species.species_id},
        ).fetchall()
        for gbif_id, change, pick in changes:
            (drift.entered if change == "entered" else drift.left).append((gbif_id, pick))
        return rows

    held_upstream = held.get(OCCURRENCES.name, species.slug) if held is not None else None
    likely = None
    if held_upstream is not None:
        try:
            likely = sample_job_parts(sample_input(conn, species.slug, held_upstream, policy), cap, policy)
        except StaleInputError:
            pass  # refresh_partition reads it again, under its lock, and says why
    outcome = refresh_partition(
        conn,
        target=OCCURRENCE_SAMPLE,
        partition_key=species.slug,
        parts=parts,
        replace_rows=replace_rows,
        run_id=run_id,
        partition_value=species.species_id,
        likely_parts=likely,
    )
    return outcome, drift


# occurrence_sample_summary: what the whole sample holds, as the summary the course asks for. Its input is
# every sample partition's job key, so it skips exactly when no partition changed.
SUMMARY_ASSET = "occurrence_sample_summary"
SUMMARY_VERSION = 1


def refresh_sample_summary(conn: psycopg.Connection, *, run_id: str) -> tuple[RefreshOutcome, SampleSummary]:
    """The PostGIS summary of occurrence_sample and its provenance row (skipped when no partition changed)."""
    with conn.transaction():
        # One snapshot for the state rows and the summary they describe.
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        sample_digest = sample_state_digest(conn)
        summary = postgis_summary(conn)
    parts = JobKeyParts(input=sample_digest, transform=SUMMARY_VERSION, config={}, schema=SUMMARY_VERSION)
    outcome = report_derived_output(
        conn,
        asset=SUMMARY_ASSET,
        partition_key=WHOLE_TARGET,
        parts=parts,
        rows=summary.records,
        run_id=run_id,
        unchanged=last_recorded_key(conn, SUMMARY_ASSET, WHOLE_TARGET) == parts.key,
    )
    return outcome, summary
