"""Load a species' derived CSV into PostGIS under its job key (Dagster-free)."""

from __future__ import annotations

import hashlib
import itertools
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from surveillance_pipeline.core.errors import InputError, StaleInputError
from surveillance_pipeline.core.fault_points import AFTER_DELETE, MID_COPY, fault_point
from surveillance_pipeline.core.fingerprints import Fingerprint, partition_fingerprint, watch_table
from surveillance_pipeline.core.keys import JobKeyParts, sha256_file, sha256_file_once, sha256_hex
from surveillance_pipeline.core.line_digests import (
    DERIVED_CSV_LINES,
    KeptLines,
    read_kept_lines,
    write_kept_lines,
)
from surveillance_pipeline.core.record_delta import Delta, RecordChanges, apply_record_delta, too_large
from surveillance_pipeline.core.refresh import (
    LOADED,
    RefreshOutcome,
    last_recorded_output,
    refresh_partition,
)
from surveillance_pipeline.core.sql_files import load_sql
from surveillance_pipeline.core.targets import Target
from surveillance_pipeline.gbif.licenses import LICENSES
from surveillance_pipeline.gbif.registry import Species
from surveillance_pipeline.occurrences.derive import (
    DERIVED_ASSET,
    DERIVED_COLUMNS,
    derive_to_file,
    memo_holds,
)

PACKAGE = "surveillance_pipeline.occurrences"
# Schema 2: one partition per species, each reload swapped in as a freshly loaded and indexed table.
OCCURRENCES = Target(
    "occurrences",
    PACKAGE,
    "create_occurrences",
    transform_version=1,
    schema_version=2,
    partition_column="species_id",
    table_per_partition=True,
)
COPY_BLOCK = 1 << 20
# pg_stat_force_next_flush() (request_statistics_flush.sql) came with PostgreSQL 15.
STATISTICS_FLUSH_SINCE = 150000
# A delta pays while few records differ: past this share of the partition's records, it reloads whole.
DELTA_SHARE_LIMIT = 0.3
NEXT_OCCURRENCES = "next_occurrences"
# A delta from the kept lines: the gbifIDs whose line changed, came or went (the rows that may differ).
OCCURRENCE_CANDIDATES = "occurrence_candidates"


def partition_names(species_id: int, job_key: str) -> dict[str, sql.Composable]:
    """The identifiers a species' reload uses: the parent, the species' partition and the fresh table.

    The fresh table is named after the job key it will hold, so the indexes built on it (named after
    it) never collide with the indexes of the partition it replaces. ``species_id`` is an int composed
    as a literal because DDL (the CHECK, the partition bound) takes no bound parameters.
    """
    return {
        "occurrences": sql.Identifier(OCCURRENCES.name),
        "partition": sql.Identifier(partition_table_name(species_id)),
        "fresh": sql.Identifier(fresh_table_name(species_id, job_key)),
        "species_id": sql.Literal(int(species_id)),
    }


def partition_table_name(species_id: int) -> str:
    """The species' partition of ``occurrences``, by the target's own rule (``Target.partition_table``)."""
    table = OCCURRENCES.partition_table(OCCURRENCES.partition_ref(species_id))
    if table is None:  # table_per_partition is set above; a target without it has no such table
        raise ValueError(f"{OCCURRENCES.name} keeps no table per partition")
    return table


def fresh_table_name(species_id: int, job_key: str) -> str:
    return f"{OCCURRENCES.name}_{int(species_id)}_{job_key[:16]}"


@dataclass(frozen=True)
class OccurrenceRules:
    """The row-shaping settings of ``occurrences``: the config part of its job key."""

    licenses: Sequence[str] = LICENSES
    require_coordinates: bool = False

    def as_config(self) -> dict[str, Any]:
        unknown = sorted(set(self.licenses) - set(LICENSES))
        if unknown:
            raise ValueError(f"occurrences config: unknown licenses {unknown} (known: {list(LICENSES)})")
        # Sorted and deduplicated: the same set of licenses is the same config.
        return {"licenses": sorted(set(self.licenses)), "require_coordinates": self.require_coordinates}


def verified_derived_file(
    conn: psycopg.Connection, species: Species, raw_path: Path, derived_path: Path, stamps: Path | None = None
) -> Path:
    """The derived file, after checking it equals a fresh derive of the raw snapshot.

    gbif_derived records each derive (its key and the CSV's sha256) in provenance; when that record still
    stands for these files (``derive.memo_holds``) the check costs two checksums instead of a derive, or
    none where gbif_derived's ``stamps`` vouch for the files (read here, never written: they are
    gbif_derived's). Otherwise the raw snapshot is derived again (streamed) and compared.
    """
    if not derived_path.is_file():
        raise InputError(
            derived_path, "file", None, "derived file is missing: materialize gbif_derived first"
        )
    memo = last_recorded_output(conn, DERIVED_ASSET, species.slug)
    if memo is not None and memo_holds(raw_path, memo, derived_path, stamps, keep_stamps=False):
        return derived_path
    with tempfile.TemporaryDirectory(dir=derived_path.parent, prefix=".fresh-") as folder:
        fresh = Path(folder) / derived_path.name
        derive_to_file(raw_path, species, fresh)
        if sha256_file(fresh) != sha256_file(derived_path):
            where = _first_difference(derived_path, fresh)
            raise StaleInputError(
                f"{derived_path}: differs from a fresh derive of {raw_path} (first at {where}); "
                f"it was edited or derived by other code: materialize gbif_derived for {species.slug} again"
            )
    return derived_path


def _first_difference(a: Path, b: Path) -> str:
    """Where two derived files first differ: the line, and the column when both lines have it."""
    with a.open("rb") as left_file, b.open("rb") as right_file:
        lines = itertools.zip_longest(left_file, right_file, fillvalue=b"")
        for number, (left, right) in enumerate(lines, start=1):
            if left != right:
                fields = zip(left.rstrip(b"\n").split(b","), right.rstrip(b"\n").split(b","), strict=False)
                column = next((i for i, (x, y) in enumerate(fields) if x != y), len(DERIVED_COLUMNS))
                if column < len(DERIVED_COLUMNS):
                    return f"line {number}, field {DERIVED_COLUMNS[column]!r}"
                return f"line {number}"
    return "the end"


def occurrence_job_parts(derived: bytes | Path, rules: OccurrenceRules) -> JobKeyParts:
    # OCCURRENCES is read at call time, so a version bump (or a test's) takes effect at once.
    checksum = sha256_file_once(derived) if isinstance(derived, Path) else sha256_hex(derived)
    return OCCURRENCES.key_parts(checksum, rules.as_config())


def derived_file_blocks(derived: bytes | Path) -> Iterator[bytes]:
    """A derived file (its path, or its bytes) a block at a time."""
    if isinstance(derived, Path):
        with derived.open("rb") as handle:
            while block := handle.read(COPY_BLOCK):
                yield block
    else:
        for start in range(0, len(derived), COPY_BLOCK):
            yield derived[start : start + COPY_BLOCK]


def load_occurrences(
    conn: psycopg.Connection,
    *,
    species: Species,
    derived: bytes | Path,
    rules: OccurrenceRules,
    run_id: str,
    kept_lines: Path | None = None,
    trust_kept_lines: bool = True,
) -> RefreshOutcome:
    """Make ``occurrences`` hold this species' derived file under ``rules``, or skip when it already does.

    ``derived`` is the file's bytes or its path. Given a path, the key comes from hashing the file in
    blocks and the rows are copied from it block by block, so a skip costs a checksum and the state-row
    read, and a reload never holds the whole file in memory.

    ``kept_lines``: where a load keeps the digests of the file's lines (core/line_digests.py), so that the
    next delta, when the held rows were made from that file, copies in only the lines that changed;
    ``trust_kept_lines`` False (``make repair``): every line is copied and compared, and the digests kept
    again.
    """
    parts = occurrence_job_parts(derived, rules)
    config = parts.config

    def replace_rows(connection: psycopg.Connection) -> Fingerprint:
        names = partition_names(species.species_id, parts.key)
        upsert_species(connection, species)
        connection.execute(load_sql(PACKAGE, "create_occurrences_partition").format(**names))
        keep_lines(copy_incoming(connection, species, derived, parts.input))
        cursor = connection.execute(
            load_sql(PACKAGE, "insert_species_occurrences").format(occurrences=names["fresh"]),
            {
                "species_id": species.species_id,
                "licenses": config["licenses"],
                "require_coordinates": config["require_coordinates"],
            },
        )
        connection.execute(load_sql(PACKAGE, "index_occurrences_partition").format(**names))
        # Taken on the fresh table, before the swap locks the parent until COMMIT (and watched from then on).
        fresh = fresh_table_name(species.species_id, parts.key)
        fingerprint = partition_fingerprint(connection, OCCURRENCES, str(species.species_id), table=fresh)
        if fingerprint.rows != cursor.rowcount:
            raise RuntimeError(f"{fresh}: {fingerprint.rows} rows counted, {cursor.rowcount} inserted")
        watch_table(connection, OCCURRENCES, fresh)
        if connection.info.server_version >= STATISTICS_FLUSH_SINCE:
            connection.execute(load_sql(PACKAGE, "request_statistics_flush"))
        connection.execute(load_sql(PACKAGE, "swap_occurrences_partition").format(**names))
        # The species' previous rows are dropped in this transaction now: a crash here must leave them.
        fault_point(AFTER_DELETE, connection)
        return fingerprint

    def keep_lines(lines: KeptLines) -> None:
        if kept_lines is not None:
            write_kept_lines(kept_lines, lines)

    def apply_changes(
        connection: psycopg.Connection, held: Fingerprint, loaded_under: Mapping[str, Any], __: JobKeyParts
    ) -> Delta | None:
        upsert_species(connection, species)
        # The lines the held rows were made from, when this load kept them: a row is its line's under the
        # same config (a delta's), so only the changed lines' rows, and the gone ones', can differ.
        kept = None
        held_input = loaded_under.get("input")
        if kept_lines is not None and trust_kept_lines and isinstance(held_input, str):
            kept = read_kept_lines(kept_lines, source_sha256=held_input, kind=DERIVED_CSV_LINES)
        lines = copy_incoming(connection, species, derived, parts.input, kept)
        keep_lines(lines)
        if kept is not None and not lines.ids_unique():
            # A gbifID on two lines: the changed lines alone cannot tell them apart; the full reload
            # refuses the file at the partition's primary key, as it always has.
            return None
        if kept is not None:
            # Counted from the changed lines before their rows are made: past the limit, the rows made
            # and compared only to be dropped had cost a reload and more (13.7 s against a first load's
            # 6.5 s with 70% of a 1M download's records changed, 2026-12-08 at 17f2258).
            added, changed, removed = line_changes(connection, species, rules)
            rows = held.rows + added - removed
            if too_large(added + changed + removed, rows, held.rows, DELTA_SHARE_LIMIT):
                return Delta(RecordChanges(added, changed, removed, rows, applied=False), None)
        return apply_record_delta(
            connection,
            target=OCCURRENCES,
            partition_ref=str(species.species_id),
            next_table=make_next_rows(connection, species, rules),
            held=held,
            share_limit=DELTA_SHARE_LIMIT,
            only_ids=None if kept is None else OCCURRENCE_CANDIDATES,
        )

    outcome = refresh_partition(
        conn,
        target=OCCURRENCES,
        partition_key=species.slug,
        parts=parts,
        replace_rows=replace_rows,
        run_id=run_id,
        partition_value=species.species_id,
        apply_changes=apply_changes,
    )
    # A delta changed a few rows in place: autovacuum's own visit is enough for the planner.
    if outcome.action == LOADED and (outcome.changes is None or not outcome.changes.applied):
        analyze_partition(conn, species.species_id)
    return outcome


def line_changes(
    connection: psycopg.Connection, species: Species, rules: OccurrenceRules
) -> tuple[int, int, int]:
    """The records a delta from the kept lines will add, change and remove (select_line_change_counts.sql),
    once copy_incoming has filled OCCURRENCE_CANDIDATES."""
    config = rules.as_config()
    statement = load_sql(PACKAGE, "select_line_change_counts").format(
        candidates=sql.Identifier(OCCURRENCE_CANDIDATES),
        partition=sql.Identifier(partition_table_name(species.species_id)),
    )
    counted = connection.execute(
        statement, {"licenses": config["licenses"], "require_coordinates": config["require_coordinates"]}
    ).fetchone()
    assert counted is not None
    added, changed, removed = (int(count) for count in counted)
    return added, changed, removed


def upsert_species(connection: psycopg.Connection, species: Species) -> None:
    connection.execute(
        load_sql(PACKAGE, "upsert_species"),
        {
            "species_id": species.species_id,
            "slug": species.slug,
            "scientific_name": species.scientific_name,
            "vernacular_name": species.vernacular_name,
            "taxon_key": species.taxon_key,
        },
    )


def copy_incoming(
    connection: psycopg.Connection,
    species: Species,
    derived: bytes | Path,
    sha256: str,
    kept: KeptLines | None = None,
) -> KeptLines:
    """The derived file into the temporary ``incoming_occurrences``, checked against the key's checksum;
    every record's line digested on the way (what the next load's ``kept`` is). With ``kept`` (the lines
    the held rows were made from), only the lines it lacks are copied, and the gbifIDs of the changed and
    the gone records go into the temporary OCCURRENCE_CANDIDATES."""
    from surveillance_pipeline.core import line_digests  # numpy: not on the definitions' import path

    connection.execute(load_sql(PACKAGE, "create_incoming_occurrences"))
    digests = line_digests.LineDigests()
    seen = line_digests.KeptDigests(kept) if kept is not None else None
    copied = hashlib.sha256()
    header: bytes | None = None
    carried = b""
    with connection.cursor().copy("COPY incoming_occurrences FROM STDIN (FORMAT csv, HEADER true)") as copy:
        for block in derived_file_blocks(derived):
            copied.update(block)
            lines, carried = line_digests.lines_of_block(block, carried)
            if header is None and lines:
                header, lines = lines[0], lines[1:]
                if seen is not None:
                    copy.write(header + b"\n")
            unseen = digests.add_lines(lines, b",")
            if seen is None:
                copy.write(block)
            else:
                changed = [line for line, new in zip(lines, seen.unseen(unseen).tolist(), strict=True) if new]
                if changed:
                    copy.write(b"\n".join(changed) + b"\n")
            fault_point(MID_COPY, connection)
        if carried and header is None:
            header, carried = carried, b""  # a file of its header alone, without a newline
            if seen is not None:
                copy.write(header)
        if carried:  # a last line without its newline
            unseen = digests.add_lines([carried], b",")
            if seen is not None and seen.unseen(unseen)[0]:
                copy.write(carried)
    if copied.hexdigest() != sha256:
        # The file changed between hashing and copying: these rows are not the snapshot the key names.
        source = derived if isinstance(derived, Path) else f"derived file of {species.slug}"
        raise StaleInputError(f"{source}: changed while it was being loaded; materialize it again")
    made = digests.lines(sha256, line_digests.DERIVED_CSV_LINES)
    if kept is not None and seen is not None:
        connection.execute(
            sql.SQL("CREATE TEMPORARY TABLE {} (id bigint PRIMARY KEY) ON COMMIT DROP").format(
                sql.Identifier(OCCURRENCE_CANDIDATES)
            )
        )
        candidates = sql.SQL("COPY {} (id) FROM STDIN").format(sql.Identifier(OCCURRENCE_CANDIDATES))
        with connection.cursor().copy(candidates) as copy:
            for record_id in sorted(
                {*made.ids[seen.unseen(made.digests)].tolist(), *kept.gone_ids(made).tolist()}
            ):
                copy.write_row((record_id,))
    return made


def make_next_rows(connection: psycopg.Connection, species: Species, rules: OccurrenceRules) -> str:
    """The rows a full reload would write, from ``incoming_occurrences`` into a temporary table of the
    parent's columns (a delta compares them with the partition); its name."""
    config = rules.as_config()
    connection.execute(
        load_sql(PACKAGE, "create_next_occurrences").format(occurrences=sql.Identifier(OCCURRENCES.name))
    )
    connection.execute(
        load_sql(PACKAGE, "insert_species_occurrences").format(occurrences=sql.Identifier(NEXT_OCCURRENCES)),
        {
            "species_id": species.species_id,
            "licenses": config["licenses"],
            "require_coordinates": config["require_coordinates"],
        },
    )
    return NEXT_OCCURRENCES


def analyze_partition(conn: psycopg.Connection, species_id: int) -> None:
    """The species' partition analyzed once its load has committed (inside the caller's transaction, when
    the load ran in one).

    Analyzed inside the load's transaction, before its commit added the load's rows to the counts
    autovacuum reads, every partition was analyzed twice: autovacuum analyzed each again at its next
    visit. After a first make run of a 600,000-record download that was 1.5 of the 1.8 CPU seconds
    autovacuum spent (0.2 once analyzed here), on 2 cores that the run, or the next, was using.
    """
    with conn.transaction():
        conn.execute(
            load_sql(PACKAGE, "analyze_occurrences_partition").format(
                partition=sql.Identifier(partition_table_name(species_id))
            )
        )
