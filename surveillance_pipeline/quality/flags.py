"""occurrence_quality: per record of occurrences, the GBIF terms analysts filter by and the quality flags.

A species' rows are made from its raw snapshot's records (the terms) and its occurrences partition (which
records are kept, their year), against the reference layers in ``quality_references``, in one statement
(``insert_occurrence_quality.sql``). The job key's input names all three (the raw file's sha256, the keys
occurrences and quality_references hold) and the species' habitat; its config is each enabled test's
version and parameters, with the sha256 of every layer the test reads. Dagster-free.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from surveillance_pipeline.core.errors import InputError, StaleInputError
from surveillance_pipeline.core.fingerprints import Fingerprint
from surveillance_pipeline.core.keys import JobKeyParts, canonical_json, sha256_hex
from surveillance_pipeline.core.partition_files import read_memo, replace_file
from surveillance_pipeline.core.record_delta import Delta, apply_record_delta, given_up
from surveillance_pipeline.core.refresh import (
    NOTHING_CHANGED,
    SKIPPED,
    WHOLE_TARGET,
    HeldKeys,
    RefreshOutcome,
    held_state,
    last_recorded_output,
    read_held_keys,
    refresh_partition,
    upstream_job_key,
)
from surveillance_pipeline.core.sql_files import load_sql
from surveillance_pipeline.core.statistics import StatisticsBeforeUse
from surveillance_pipeline.core.targets import Target
from surveillance_pipeline.gbif.raw_snapshots import RawSnapshot, parse_raw_snapshot, read_raw_bytes
from surveillance_pipeline.gbif.records import RECORD_COLUMNS, open_hashed_records
from surveillance_pipeline.gbif.registry import Species
from surveillance_pipeline.occurrences.derive import DERIVED_ASSET, check_request, derive_parts
from surveillance_pipeline.occurrences.load import OCCURRENCES, partition_table_name
from surveillance_pipeline.quality.references import (
    QUALITY_REFERENCES,
    REFERENCE_CELL_DEGREES,
    ReferenceLayers,
)
from surveillance_pipeline.quality.rules import GBIF_HEADQUARTERS, TESTS, TESTS_BY_NAME, QualityRules

if TYPE_CHECKING:
    from surveillance_pipeline.core.line_digests import KeptLines

PACKAGE = "surveillance_pipeline.quality"
OCCURRENCE_QUALITY = Target(
    "occurrence_quality", PACKAGE, "create_occurrence_quality", partition_column="species_id"
)
QUALITY_TEXT_TERMS = (
    "basisOfRecord",
    "countryCode",
    "datasetKey",
    "establishmentMeans",
    "eventDate",
    "institutionCode",
    "occurrenceStatus",
)
WHOLE_TERMS = ("individualCount",)
# Not negative: metres and degrees.
MEASURE_TERMS = ("coordinatePrecision", "coordinateUncertaintyInMeters")
COORDINATES = ("decimalLatitude", "decimalLongitude")
# The columns the quality statement reads from a species' records.
QUALITY_COLUMNS = ("key", *QUALITY_TEXT_TERMS, *WHOLE_TERMS, *MEASURE_TERMS, *COORDINATES, "issues")
# The copied rows' table holds every records-file column (a records file is copied whole) and these.
INCOMING_COLUMNS = (*RECORD_COLUMNS, *(name for name in QUALITY_COLUMNS if name not in RECORD_COLUMNS))
COPY_BLOCK = 1 << 20
# A delta pays while few records differ: past this share of the species' records, its flags reload whole.
# Measured on the largest species of the bench's 1M download (247,207 records), with a share of its points
# moved (each a new point for the layers): the delta took 2.8 s at 1%, 5.8 s at 20%, 8.5 s at 30% and
# 12.3 s at 50%, a full reload 11.3-13.3 s (2026-12-06, /tmp script, not committed). It stops paying at
# about half; the limit stays below that, where a full reload's time varies as much as the gain.
DELTA_SHARE_LIMIT = 0.4
NEXT_QUALITY = "next_occurrence_quality"
# insert_occurrence_quality.sql's {records_made}: every record (a full reload), or those a delta found
# may have another row (create_quality_candidates.sql).
ALL_RECORDS = sql.SQL("TRUE")
CANDIDATES_ONLY = sql.SQL("t.key::bigint IN (SELECT id FROM quality_candidates)")
# Its {held_records_made}: none, or (a delta from the kept lines, core/line_digests.py) the candidates whose
# line did not change, made from their held rows.
NO_HELD_RECORDS = sql.SQL("FALSE")
HELD_CANDIDATES = sql.SQL("h.id IN (SELECT id FROM quality_candidates)")


@dataclass(frozen=True)
class QualityMemos:
    """Where a species' loads keep what the next load starts from (``data/memos/occurrence_quality/``):
    the outliers test's site sums (outliers.py) and the digests of the records' lines (core/line_digests.py);
    ``trusted`` False (``make repair``, which trusts no memo): this load starts from neither, and keeps
    both again."""

    site_sums: Path
    term_lines: Path
    trusted: bool = True


class TooManyCandidates(Exception):
    """A delta found more records whose rows may differ than pay to make again (``count``): given up before
    their rows are made, the species' flags reload whole."""

    def __init__(self, count: int) -> None:
        super().__init__(count)
        self.count = count


class TermsNotHeld(Exception):
    """A delta from the kept lines found a record occurrences keeps whose line did not change and which no
    held row carries (occurrences took it in since): its terms are in neither place, so the species'
    flags are made from every record instead. Also raised for input with a gbifID on two lines, which the
    changed lines alone cannot tell from one record (the full reload refuses it)."""


def quality_parts(
    conn: psycopg.Connection, species: Species, raw_sha256: str, rules: QualityRules, layers: ReferenceLayers
) -> JobKeyParts:
    """The key of a species' quality rows: its inputs as they are held now (share-locked upstream keys)."""
    return quality_parts_of(
        species,
        raw_sha256,
        upstream_job_key(conn, OCCURRENCES.name, species.slug),
        upstream_job_key(conn, QUALITY_REFERENCES.name, WHOLE_TARGET),
        rules,
        layers,
    )


def quality_parts_of(
    species: Species,
    raw_sha256: str,
    occurrences_key: str,
    references_key: str,
    rules: QualityRules,
    layers: ReferenceLayers,
) -> JobKeyParts:
    """The key of a species' quality rows from its inputs' keys (the plan reads them without a lock).

    The input is the inputs' canonical JSON itself, not its hash: a reader of the partition (the masked
    release) can tell which occurrences key its flags were made for.
    """
    inputs = {
        "raw": raw_sha256,
        "occurrences": occurrences_key,
        "quality_references": references_key,
        "terrestrial": species.terrestrial,
    }
    return OCCURRENCE_QUALITY.key_parts(canonical_json(inputs), quality_config(rules, layers))


def quality_config(rules: QualityRules, layers: ReferenceLayers) -> dict[str, Any]:
    """Each enabled test's version and parameters, with the sha256 of each layer it reads: a test's part
    of the key moves with its own layers only (quality_references' key, in the input, moves with any)."""
    sha256s = layers.sha256s()
    config = rules.as_config()
    for name, part in config.items():
        reads = TESTS_BY_NAME[name].reads
        if reads:
            part["layers"] = {layer: sha256s[layer] for layer in reads}
    return config


# The side of the sub-cells that settle the points a reference cell leaves (in a cell only partly land),
# a test per sub-cell for all its points (insert_occurrence_quality.sql): a power of two, so that a point's
# sub-cell, found by a division, contains it exactly. Only how fast the flags come, never which: no part
# of the key.
SUB_CELL_DEGREES = 1 / 16
# The bounds in degrees that settle a buffer test before its geodesic distance (why they hold:
# insert_occurrence_quality.sql): the longest metre per degree of any path, and the slack either side.
METRES_PER_DEGREE_AT_MOST = 111_694.0
BOUND_SLACK_SHARE = 0.01
BOUND_SLACK_M = 10.0


# The finest touch cell tried (about 27 m of latitude): a buffer whose sure bound no coarser cell fits
# settles nothing by its touch cells; they still spare the points of an untouched cell a polygon test.
FINEST_TOUCH_CELL_DEGREES = 2.0**-12
# How far inside the sure bound a touch cell's diagonal must stay: room for PostGIS's rounding.
TOUCH_CELL_MARGIN = 1e-6


def touch_cell(sure_degrees: float) -> tuple[float, bool]:
    """The side of a buffer test's touch cells (insert_occurrence_quality.sql) and whether a touch settles
    the test: the coarsest power of two, from a reference cell down, whose diagonal is within the sure
    bound. A piece that touches such a cell is then within the bound of every point in it (of the piece's
    point in the cell, each is at most a diagonal away), so all its points are within the buffer."""
    side = REFERENCE_CELL_DEGREES
    while side * math.sqrt(2) > sure_degrees * (1 - TOUCH_CELL_MARGIN) and side > FINEST_TOUCH_CELL_DEGREES:
        side /= 2
    return side, side * math.sqrt(2) <= sure_degrees * (1 - TOUCH_CELL_MARGIN)


def degree_bounds(test: str, buffer_m: float) -> dict[str, float | bool]:
    """``<test>_sure_degrees``: a piece this near in degrees is within ``buffer_m``; ``<test>_reach_m``:
    the metres past which the statement's reach in degrees says a piece cannot be within it;
    ``<test>_touch_cell``, ``<test>_touch_settles``: its touch cells (``touch_cell``)."""
    slack = BOUND_SLACK_SHARE * buffer_m + BOUND_SLACK_M
    sure_degrees = max(0.0, buffer_m - slack) / METRES_PER_DEGREE_AT_MOST
    side, settles = touch_cell(sure_degrees)
    return {
        f"{test}_sure_degrees": sure_degrees,
        f"{test}_reach_m": buffer_m + slack,
        f"{test}_touch_cell": side,
        f"{test}_touch_settles": settles,
    }


def statement_parameters(species: Species, rules: QualityRules) -> dict[str, Any]:
    """The bound values of insert_occurrence_quality.sql: every test's switch and parameters (a disabled
    test's defaults are bound too; its flag is null whatever they are)."""
    sea_buffer = float(rules.param("sea", "buffer_m"))
    country_buffer = float(rules.param("country", "buffer_m"))
    return {
        "species_id": species.species_id,
        "terrestrial": species.terrestrial,
        "cell": REFERENCE_CELL_DEGREES,
        "sub_cell": SUB_CELL_DEGREES,
        **{f"on_{test.name}": rules.is_enabled(test.name) for test in TESTS},
        "gbif_issues": list(rules.param("gbif_issues", "issues")),
        "basis_of_record": list(rules.param("basis", "basis_of_record")),
        "uncertainty_limit_m": float(rules.param("uncertainty", "limit_m")),
        "uncertainty_placeholders_m": [float(v) for v in rules.param("uncertainty", "placeholders_m")],
        "precision_limit_degrees": float(rules.param("precision", "limit_degrees")),
        "old_before_year": int(rules.param("old", "before_year")),
        "zero_radius_degrees": float(rules.param("zero", "radius_degrees")),
        "capitals_radius_m": float(rules.param("capitals", "radius_m")),
        "centroids_radius_m": float(rules.param("centroids", "radius_m")),
        "hq_longitude": GBIF_HEADQUARTERS[0],
        "hq_latitude": GBIF_HEADQUARTERS[1],
        "gbif_hq_radius_m": float(rules.param("gbif_hq", "radius_m")),
        "sea_buffer_m": sea_buffer,
        **degree_bounds("sea", sea_buffer),
        "country_buffer_m": country_buffer,
        **degree_bounds("country", country_buffer),
        "outliers_cell_degrees": float(rules.param("outliers", "cell_degrees")),
    }


def refresh_occurrence_quality(
    conn: psycopg.Connection,
    *,
    species: Species,
    raw_path: Path,
    rules: QualityRules,
    layers: ReferenceLayers,
    run_id: str,
    held: HeldKeys | None = None,
    statistics: StatisticsBeforeUse | None = None,
    memos: QualityMemos | None = None,
) -> RefreshOutcome:
    """Make ``occurrence_quality`` hold this species' flags under ``rules``, or skip when it already does.

    The flags are made from the raw snapshot's terms for the records occurrences holds. Launched before
    occurrences has loaded a new raw snapshot's rows, they are made for the rows occurrences still holds;
    the key names both, so once occurrences loads the new rows they are made again.

    ``held``: what the inputs held when the step began (``held_quality_inputs``), from which a skip is
    decided in one statement (refresh_partition's ``likely_parts``). ``statistics``: the table's
    statistics, brought up to date before the first delta of the step plans its joins with them.
    ``memos``: where the load keeps what the next one starts from (QualityMemos); without them, every
    load takes every pair of sites and a delta compares every record with its held row.
    """
    raw = read_raw_bytes(raw_path)
    raw_sha256 = sha256_hex(raw)
    likely = None
    if held is not None:
        occurrences_key = held.get(OCCURRENCES.name, species.slug)
        references_key = held.get(QUALITY_REFERENCES.name, WHOLE_TARGET)
        if occurrences_key is not None and references_key is not None:
            likely = quality_parts_of(species, raw_sha256, occurrences_key, references_key, rules, layers)

    def replace_rows(connection: psycopg.Connection) -> int:
        table = sql.Identifier(OCCURRENCE_QUALITY.name)
        connection.execute(
            sql.SQL("DELETE FROM {} WHERE species_id = %s").format(table), [species.species_id]
        )
        return insert_rows(connection, into=table)

    def insert_rows(connection: psycopg.Connection, **how: Any) -> int:
        return insert_quality_rows(connection, species, rules, raw_path, raw, raw_sha256, memos=memos, **how)

    def apply_changes(
        connection: psycopg.Connection,
        held_rows: Fingerprint,
        loaded_under: Mapping[str, Any],
        loading: JobKeyParts,
    ) -> Delta | None:
        # The held rows' spatial flags are reused only where they were made under today's layers and
        # habitat (the config is unchanged whenever a delta is tried).
        try:
            before, now = json.loads(loaded_under["input"]), json.loads(loading.input)
        except (KeyError, TypeError, ValueError):
            return None  # loaded under another key recipe: nothing to tell what its flags were made under
        if not isinstance(before, dict) or any(
            before.get(name) != now[name] for name in ("quality_references", "terrestrial")
        ):
            return None
        if statistics is not None:
            statistics.ensure()
        connection.execute(
            load_sql(PACKAGE, "create_next_quality").format(table=sql.Identifier(OCCURRENCE_QUALITY.name))
        )
        # Past this many candidates the delta would cost more than a reload: decided before their rows are
        # made (with 70% of a 1M download's records changed, a delta found too large only after them made
        # the step 64.9 s against a first load's 41.9 s; 2026-12-08 at 52bbcac).
        most = int(DELTA_SHARE_LIMIT * max(held_rows.rows, 1))
        try:
            insert_rows(
                connection,
                into=sql.Identifier(NEXT_QUALITY),
                reuse_held=True,
                held_raw=before.get("raw"),
                most_candidates=most,
            )
        except TermsNotHeld:
            return None  # refresh_partition rolls the attempt back, its temporary tables with it
        except TooManyCandidates as past:
            return given_up(past.count, held_rows)
        return apply_record_delta(
            connection,
            target=OCCURRENCE_QUALITY,
            partition_ref=str(species.species_id),
            next_table=NEXT_QUALITY,
            held=held_rows,
            share_limit=DELTA_SHARE_LIMIT,
            only_ids="quality_candidates",
        )

    return refresh_partition(
        conn,
        target=OCCURRENCE_QUALITY,
        partition_key=species.slug,
        parts=lambda connection: quality_parts(connection, species, raw_sha256, rules, layers),
        replace_rows=replace_rows,
        run_id=run_id,
        partition_value=species.species_id,
        likely_parts=likely,
        apply_changes=apply_changes,
    )


def insert_quality_rows(
    connection: psycopg.Connection,
    species: Species,
    rules: QualityRules,
    raw_path: Path,
    raw: bytes,
    raw_sha256: str,
    *,
    into: sql.Identifier,
    reuse_held: bool = False,
    held_raw: str | None = None,
    memos: QualityMemos | None = None,
    most_candidates: int | None = None,
) -> int:
    """The species' quality rows into ``into`` (occurrence_quality, or a delta's temporary table); with
    ``reuse_held`` (a delta), only the rows of the records in quality_candidates, a table this makes of
    those whose row may differ from the held one, and a point the held rows carry keeps their spatial
    flags (insert_occurrence_quality.sql).

    A delta whose ``memos`` keep the lines of ``held_raw`` (the raw snapshot the held rows were made from,
    core/line_digests.py) copies in only the records whose line changed, and takes every other record's terms
    from its held row; TermsNotHeld when a record occurrences keeps has neither (its caller reloads);
    TooManyCandidates when the records whose row may differ are more than ``most_candidates``."""
    # Imported here: loading the definitions must not import numpy (test_lazy_modules.py).
    from surveillance_pipeline.core.line_digests import (
        RECORDS_FILE_LINES,
        SEARCH_RECORDS,
        read_kept_lines,
        write_kept_lines,
    )

    snapshot = parse_raw_snapshot(raw_path, raw, raw_sha256)
    check_request(snapshot, species, raw_path)
    kind = SEARCH_RECORDS if snapshot.records_file is None else RECORDS_FILE_LINES
    kept = None
    if reuse_held and held_raw is not None and memos is not None and memos.trusted:
        kept = read_kept_lines(memos.term_lines, source_sha256=held_raw, kind=kind)
    columns = sql.SQL(", ").join(sql.SQL("{} text").format(sql.Identifier(name)) for name in INCOMING_COLUMNS)
    connection.execute(load_sql(PACKAGE, "create_incoming_quality_terms").format(columns=columns))
    connection.execute(load_sql(PACKAGE, "create_incoming_gone_records"))
    lines = copy_terms(connection, snapshot, raw_path, raw_sha256, kept)
    if memos is not None:
        write_kept_lines(memos.term_lines, lines)
    if kept is not None and not lines.ids_unique():
        raise TermsNotHeld(species.slug)  # a gbifID twice: the full reload says so, as it always has
    terms_from_held = kept is not None
    points_from_occurrences = (
        memos is not None and memos.trusted and occurrences_made_from(connection, species, raw_sha256)
    )
    thinned = copy_outliers(
        connection,
        species,
        rules,
        memos,
        terms_from_held=terms_from_held,
        points_from_occurrences=points_from_occurrences,
    )
    # PostGIS's costs cross the JIT threshold; compiling costs more. The statement sorts and hashes
    # every record several times: in memory, not in temporary files. The incoming tables analyzed:
    # with their real sizes the planner hashes where it guessed a few thousand rows and merged.
    connection.execute("SET LOCAL jit = off")
    connection.execute("SET LOCAL work_mem = '128MB'")
    connection.execute("SET LOCAL default_statistics_target = 10")
    # The statement joins every record with its point's flags, its site's verdict and its duplicates rank.
    # Guessing from its CTEs a tenth of the points there are, the planner sorted the records' wide rows
    # for merge joins, three times; hashed, they are read once, and the rows come out the same. For a
    # delta's candidates, 3.3-3.5 s instead of 6.1-8.3 s (the largest species of the bench's 1M download,
    # 2026-12-06 at d4c6aa5); for a full reload of that species 6.5-6.7 s instead of 7.1-7.2 s, and of
    # its second largest (114,237 records) 3.1-3.2 s instead of 3.5-3.7 s (alternating, 2026-12-07 at
    # 3bf8602; the same md5 over the rows both ways). At 5M (1,232,322 records in the largest species),
    # the step's first run took 117.9 s hashed against 143.1 s merged (two runs of the refresh bench, at
    # 8eaf87e and 265d40a).
    connection.execute("SET LOCAL enable_mergejoin = off")
    # The plans read the table's size, not its columns' statistics (the statements read the terms through
    # casts, expressions no column's statistics describe): one column is analyzed, for the row count. The
    # same plans as with every column analyzed (EXPLAIN of the three statements, five species of the
    # bench's 1M download), in 2-13 ms instead of 17-30 ms a species (2026-12-07, /tmp scripts).
    connection.execute("ANALYZE incoming_quality_terms (key)")
    parameters = {
        **statement_parameters(species, rules),
        "outliers_thinned": thinned,
        "reuse_held": reuse_held,
        "terms_from_held": terms_from_held,
    }
    held = sql.Identifier(OCCURRENCE_QUALITY.name)
    occurrences = sql.Identifier(partition_table_name(species.species_id))
    records_made = ALL_RECORDS
    if reuse_held:
        connection.execute("ANALYZE incoming_outliers")
        candidates = "create_quality_candidates_of_lines" if terms_from_held else "create_quality_candidates"
        connection.execute(
            load_sql(PACKAGE, candidates).format(held=held, occurrences=occurrences), parameters
        )
        if terms_from_held and connection.execute(load_sql(PACKAGE, "select_terms_not_held")).fetchone():
            raise TermsNotHeld(species.slug)
        counted = connection.execute(load_sql(PACKAGE, "select_quality_candidate_count")).fetchone()
        assert counted is not None
        if most_candidates is not None and int(counted[0]) > most_candidates:
            raise TooManyCandidates(int(counted[0]))
        connection.execute("ANALYZE quality_candidates")
        records_made = CANDIDATES_ONLY
    statement = load_sql(PACKAGE, "insert_occurrence_quality").format(
        table=into,
        held=held,
        occurrences=occurrences,
        references=sql.Identifier(QUALITY_REFERENCES.name),
        records_made=records_made,
        held_records_made=HELD_CANDIDATES if terms_from_held else NO_HELD_RECORDS,
    )
    rows = connection.execute(statement, parameters).rowcount
    connection.execute("SET LOCAL enable_mergejoin TO DEFAULT")
    return rows


def held_quality_inputs(conn: psycopg.Connection) -> HeldKeys:
    """What the flags' inputs in the warehouse hold, read once for a step's species."""
    return read_held_keys(conn, OCCURRENCES.name, QUALITY_REFERENCES.name)


def occurrences_made_from(conn: psycopg.Connection, species: Species, raw_sha256: str) -> bool:
    """Whether occurrences holds the species' rows derived from this raw snapshot: gbif_derived recorded a
    derive of these raw bytes by today's derive code, and its CSV is the input occurrences' rows were
    loaded from (read under the share lock quality_parts took on occurrences' state row). Derive is pure
    and writes a record's coordinates as the shortest text of the double the raw record holds, the text
    the quality terms cast: so a record occurrences gave a point has its terms' point there. False when
    either cannot be told (a fresh derive not recorded, occurrences loaded from another raw snapshot):
    the points are then read from the terms."""
    memo = last_recorded_output(conn, DERIVED_ASSET, species.slug)
    if memo is None or memo.job_key != derive_parts(raw_sha256).key:
        return False
    derived = memo.detail.get("derived_sha256")
    held = held_state(conn, OCCURRENCES.name, species.slug)
    return isinstance(derived, str) and held is not None and held.input == derived


def copy_outliers(
    conn: psycopg.Connection,
    species: Species,
    rules: QualityRules,
    memos: QualityMemos | None = None,
    *,
    terms_from_held: bool = False,
    points_from_occurrences: bool = False,
) -> bool:
    """incoming_outliers: the outliers test's verdict per site of the species' kept records (their distinct
    points, or cells when there are more than the exact limit); whether the sites are cells.

    With ``memos``, the sites' distance sums start from those kept by the last load (updated by what
    changed, the same sums as from every pair; unless the memos are not trusted), and the new ones are
    kept in turn. A memo kept by a load whose transaction then rolled back still holds true sums of its
    own sites. ``terms_from_held``: the records whose line did not change are read from their held rows;
    ``points_from_occurrences``: occurrences' rows were made from these terms (occurrences_made_from), so
    a record's point is read from occurrences where it has one (create_quality_points.sql)."""
    conn.execute(load_sql(PACKAGE, "create_incoming_outliers"))
    if not rules.is_enabled("outliers"):
        return False
    # Imported here: loading the definitions must not import numpy (test_lazy_modules.py).
    import numpy as np

    from surveillance_pipeline.quality.outliers import outlier_sites, site_distance_sums

    exact = int(rules.param("outliers", "exact_up_to_points"))
    occurrences = sql.Identifier(partition_table_name(species.species_id))
    points = conn.execute(
        load_sql(PACKAGE, "create_quality_points").format(
            occurrences=occurrences, held=sql.Identifier(OCCURRENCE_QUALITY.name)
        ),
        {
            "terms_from_held": terms_from_held,
            "points_from_occurrences": points_from_occurrences,
            "species_id": species.species_id,
        },
    ).rowcount
    thinned = points > exact
    cell = float(rules.param("outliers", "cell_degrees"))
    sites = conn.execute(
        load_sql(PACKAGE, "select_quality_sites"), {"thinned": thinned, "cell": cell}
    ).fetchall()
    table = np.array(sites, dtype=np.float64).reshape(-1, 3)
    longitude, latitude, records = table[:, 0], table[:, 1], table[:, 2].astype(np.int64)
    min_records = int(rules.param("outliers", "min_records"))
    sums = None
    if memos is not None and int(records.sum()) >= max(min_records, 2):
        sums = site_distance_sums(
            longitude,
            latitude,
            records,
            memos.site_sums,
            thinned=thinned,
            cell_degrees=cell,
            trust_memo=memos.trusted,
        )
    verdicts = outlier_sites(
        longitude, latitude, records, float(rules.param("outliers", "multiplier")), min_records, sums=sums
    )
    if verdicts is not None:
        with conn.cursor().copy("COPY incoming_outliers (lon, lat, outlier) FROM STDIN") as copy:
            for (lon, lat, _), outlier in zip(sites, verdicts.tolist(), strict=True):
                copy.write_row((lon, lat, outlier))
    return thinned


def copy_terms(
    conn: psycopg.Connection,
    snapshot: RawSnapshot,
    raw_path: Path,
    raw_sha256: str,
    kept: KeptLines | None = None,
) -> KeptLines:
    """The species' records into incoming_quality_terms: a records file as it is (its text format is
    COPY's: the same escapes, an empty field for null), checked against the sha256 its header names; a
    search answer's records field by field, each value checked. Every record's line is digested on the
    way (what the next load's ``kept`` is); with ``kept``, only the records whose line it lacks are
    copied, and the gbifIDs of those whose line went into incoming_gone_records."""
    from surveillance_pipeline.core import line_digests

    digests = line_digests.LineDigests()
    seen = line_digests.KeptDigests(kept) if kept is not None else None
    if snapshot.records_file is None:
        kind = line_digests.SEARCH_RECORDS
        names = sql.SQL(", ").join(sql.Identifier(name) for name in QUALITY_COLUMNS)
        with conn.cursor().copy(sql.SQL("COPY incoming_quality_terms ({}) FROM STDIN").format(names)) as copy:
            for row in line_digests.changed_rows(search_rows(snapshot.records, raw_path), digests, seen):
                copy.write_row(row)
    else:
        kind = line_digests.RECORDS_FILE_LINES
        records = raw_path.with_name(snapshot.records_file)
        names = sql.SQL(", ").join(sql.Identifier(name) for name in RECORD_COLUMNS)
        statement = sql.SQL("COPY incoming_quality_terms ({}) FROM STDIN (FORMAT text, NULL '')").format(
            names
        )
        with (
            open_hashed_records(records, snapshot.records_sha256) as unzipped,
            conn.cursor().copy(statement) as copy,
        ):
            carried = b""
            while block := unzipped.read(COPY_BLOCK):
                lines, carried = line_digests.lines_of_block(block, carried)
                unseen = digests.add_lines(lines)
                if seen is None:
                    copy.write(block)
                elif lines:
                    new = seen.unseen(unseen).tolist()
                    changed = [line for line, unseen_line in zip(lines, new, strict=True) if unseen_line]
                    if changed:
                        copy.write(b"\n".join(changed) + b"\n")
            if carried:  # a last line without its newline
                unseen = digests.add_lines([carried])
                if seen is not None and seen.unseen(unseen)[0]:
                    copy.write(carried)
    made = digests.lines(raw_sha256, kind)
    if kept is not None:
        with conn.cursor().copy("COPY incoming_gone_records (id) FROM STDIN") as copy:
            for record_id in kept.gone_ids(made).tolist():
                copy.write_row((record_id,))
    return made


def search_rows(records: list[dict[str, Any]], path: Path) -> Iterator[list[str | None]]:
    """QUALITY_COLUMNS of each search record as text (None: absent); InputError names record and field."""
    for index, record in enumerate(records):
        key = record.get("key")
        where = f"record {index} (key {key})"
        if isinstance(key, bool) or not isinstance(key, int):
            raise InputError(path, where, "key", f"expected a gbifID (a whole number), got {key!r}")
        row: list[str | None] = [str(key)]
        for name in QUALITY_TEXT_TERMS:
            value = record.get(name)
            if value is not None and not isinstance(value, str):
                raise InputError(path, where, name, f"expected text, got {value!r}")
            row.append(value or None)
        for name in WHOLE_TERMS:
            value = record.get(name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise InputError(path, where, name, f"expected a whole number >= 0, got {value!r}")
            row.append(None if value is None else str(value))
        for name in (*MEASURE_TERMS, *COORDINATES):
            value = record.get(name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
            ):
                raise InputError(path, where, name, f"expected a number, got {value!r}")
            if value is not None and name in MEASURE_TERMS and value < 0:
                raise InputError(path, where, name, f"expected a number >= 0, got {value!r}")
            row.append(None if value is None else repr(float(value)))
        issues = record.get("issues") or []
        if not isinstance(issues, list) or not all(isinstance(issue, str) for issue in issues):
            raise InputError(path, where, "issues", f"expected a list of GBIF issue names, got {issues!r}")
        row.append(";".join(issues) or None)
        yield row


def flags_for_release(
    conn: psycopg.Connection, slug: str, occurrences_key: str, *, refuse_edits: bool = True
) -> tuple[str, dict[str, Any]]:
    """What a release over the flags reads: the partition's content version and its key's config (each
    test's version and parameters), share-locked; refused while the flags were made for other rows of
    occurrences than ``occurrences_key``, or (``refuse_edits``) edited outside the pipeline. The plan
    passes False: the run repairs an edited partition first, back to the rows its digest names."""
    row = conn.execute(
        load_sql(PACKAGE, "select_quality_for_share"),
        {"target": OCCURRENCE_QUALITY.name, "partition_key": slug},
    ).fetchone()
    if row is None:
        raise StaleInputError(f"occurrence_quality holds nothing for {slug!r}: materialize it first")
    parts, rows, digest, edits = row
    if edits and refuse_edits:
        raise StaleInputError(
            f"occurrence_quality partition {slug!r} was edited outside the pipeline ({edits}) since its "
            f"load: materialize occurrence_quality for {slug!r} to repair it first"
        )
    made_for = json.loads(parts["input"]).get("occurrences") if isinstance(parts.get("input"), str) else None
    if made_for != occurrences_key:
        raise StaleInputError(
            f"occurrence_quality of {slug!r} was made for other rows of occurrences: materialize "
            f"occurrence_quality for {slug!r} first"
        )
    return content_version(rows, digest), dict(parts.get("config") or {})


def content_version(rows: Any, digest: Any) -> str:
    return sha256_hex(canonical_json({"rows": rows, "digest": digest}).encode())


def held_rows_digest(conn: psycopg.Connection, species: Species) -> str:
    """The partition's content version: sha256 of its rows' count and digest as its load recorded them.

    It is occurrence_quality's Dagster data version (not the job key): a threshold change that leaves
    every flag as it was reloads the partition under a new key, but the same rows give the same version,
    so nothing downstream goes Unsynced or reloads.
    """
    row = conn.execute(
        load_sql(PACKAGE, "select_held_rows_digest"),
        {"target": OCCURRENCE_QUALITY.name, "partition_key": species.slug},
    ).fetchone()
    if row is None:
        raise StaleInputError(f"{OCCURRENCE_QUALITY.name} holds nothing for {species.slug}")
    return content_version(row[0], row[1])


def first_flag_counts(conn: psycopg.Connection, species_id: int) -> dict[str, int]:
    """Per test, the species' records it was the first to flag (tests that flagged none left out)."""
    query = load_sql(PACKAGE, "select_first_flag_counts").format(
        table=sql.Identifier(OCCURRENCE_QUALITY.name)
    )
    return first_flag_counts_of(conn, query, {"species_id": species_id})


def first_flag_counts_of(
    conn: psycopg.Connection, query: sql.Composed, params: dict[str, Any]
) -> dict[str, int]:
    """Per test, how many of some records it was the first to flag: ``query`` returns (first_flag, count)
    rows (the masked release counts a species, an export the records it holds)."""
    return {str(name): int(count) for name, count in conn.execute(query, params).fetchall()}


@dataclass(frozen=True)
class QualityCounts:
    records: int
    flagged: int
    # Per test (enabled or not, in TESTS order): records it flagged, and records it was the first reason for.
    by_test: Mapping[str, tuple[int, int]]


# Bump when the counts kept for a job key could differ from what quality_counts reads for it.
COUNTS_MEMO_VERSION = 1


def outcome_quality_counts(
    conn: psycopg.Connection, species: Species, outcome: RefreshOutcome, memo_path: Path
) -> tuple[QualityCounts, str]:
    """``quality_counts`` and the content version of the partition ``outcome`` left, for the UI: kept in a
    memo under the job key. A partition that skipped with nothing changed holds exactly the rows its load
    wrote for that key, so the counts kept for the key are its counts (counting is a scan of the species'
    rows on every run); anything else counts and keeps the result."""
    if outcome.action == SKIPPED and outcome.reason == NOTHING_CHANGED:
        kept = read_memo(memo_path, version=COUNTS_MEMO_VERSION, job_key=outcome.job_key)
        try:
            if kept is not None:
                by_test = {name: (int(pair[0]), int(pair[1])) for name, pair in kept["by_test"].items()}
                return QualityCounts(int(kept["records"]), int(kept["flagged"]), by_test), str(
                    kept["version_of_rows"]
                )
        except (TypeError, KeyError, ValueError, IndexError):
            pass  # a damaged memo costs a count, never a wrong one
    counts = quality_counts(conn, species)
    version = held_rows_digest(conn, species)
    memo = {
        "version": COUNTS_MEMO_VERSION,
        "job_key": outcome.job_key,
        "records": counts.records,
        "flagged": counts.flagged,
        "by_test": {name: list(pair) for name, pair in counts.by_test.items()},
        "version_of_rows": version,
    }
    replace_file(memo_path, canonical_json(memo).encode("utf-8"))
    return counts, version


def quality_counts(conn: psycopg.Connection, species: Species) -> QualityCounts:
    """A species' records, how many any test flagged, and per test its flags and first reasons."""
    table = sql.Identifier(OCCURRENCE_QUALITY.name)
    flags = sql.SQL(", ").join(
        sql.SQL("count(*) FILTER (WHERE {})").format(sql.Identifier(test.column)) for test in TESTS
    )
    firsts = sql.SQL(", ").join(
        sql.SQL("count(*) FILTER (WHERE first_flag = {})").format(sql.Placeholder(f"first_{i}"))
        for i in range(len(TESTS))
    )
    parameters: dict[str, Any] = {"species_id": species.species_id}
    parameters.update({f"first_{i}": test.name for i, test in enumerate(TESTS)})
    row = conn.execute(
        load_sql(PACKAGE, "select_quality_counts").format(table=table, flags=flags, firsts=firsts), parameters
    ).fetchone()
    assert row is not None
    tests = len(TESTS)
    by_test = {test.name: (int(row[2 + i]), int(row[2 + tests + i])) for i, test in enumerate(TESTS)}
    return QualityCounts(int(row[0]), int(row[1]), by_test)


# The map's grid, as occurrences' map has it.
MAP_GRID_DEGREES = 0.05


def flagged_map_cells(
    conn: psycopg.Connection, species: Species
) -> tuple[list[tuple[float, float, int]], list[tuple[float, float, int]]]:
    """The species' points on the map's grid: (cells of records no test flagged, cells of flagged ones)."""
    query = load_sql(PACKAGE, "select_quality_grid").format(table=sql.Identifier(OCCURRENCE_QUALITY.name))
    rows = conn.execute(query, {"grid": MAP_GRID_DEGREES, "species_id": species.species_id}).fetchall()
    kept = [(float(lon), float(lat), int(n)) for flagged, lon, lat, n in rows if not flagged]
    flagged_cells = [(float(lon), float(lat), int(n)) for flagged, lon, lat, n in rows if flagged]
    return kept, flagged_cells
