"""masked_release: donut geomasking of one species' occurrence points for public release (Dagster-free).

Each point moves a random distance between ``min_m`` and ``max_m`` metres in a random direction, along the
geodesic on the WGS84 ellipsoid, so no released point sits closer than ``min_m`` (or farther than ``max_m``)
to the true one wherever on Earth it lies; a fixed projection would hold those distances only in its own
region. The radius is drawn uniformly over the donut's area (not over distance), so masked points do not
crowd the inner ring.

Each record's radius and azimuth are drawn from its gbifID under the release masking key
(core.seeds.SeedKey.record_draws, a secret from the environment) and the donut (RecordDraws): the same
input and key give the same release, byte for byte, and ``replay`` can prove it. A record keeps its masked
point in every release of the same donut, whatever else changed in its species: a reader who keeps each
month's release gets one masked point per true point, never several to average toward it (when a draw
followed the species' input, every new release moved every point afresh). The manifest names the key's
id, never anything the draws could be made from without the key (a release whose manifest held its seed
gave back all its 13,351 true points within 7 cm, 2026-12-07).

The rows are read a page at a time (``PAGE_ROWS``, by id). A release of at most a Parquet row group (which
the GeoParquet writer holds before it writes it) is read once and written from its masked pages; a larger
one is read twice, the bounding box first, and written as its pages come, so a release of millions of rows
holds a row group in memory, not the species.
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from surveillance_pipeline.core.errors import StaleInputError
from surveillance_pipeline.core.fingerprints import verify_every_skip
from surveillance_pipeline.core.keys import JobKeyParts, canonical_json, sha256_file, sha256_hex
from surveillance_pipeline.core.lazy_modules import LazyModule
from surveillance_pipeline.core.partition_files import recover_partition_folder
from surveillance_pipeline.core.refresh import (
    HeldKeys,
    RefreshOutcome,
    held_state,
    last_recorded_output,
    read_held_keys,
    report_derived_output,
    upstream_job_key,
)
from surveillance_pipeline.core.seeds import SeedKey, logical_run_id
from surveillance_pipeline.core.sql_files import load_sql
from surveillance_pipeline.core.statistics import StatisticsBeforeUse
from surveillance_pipeline.occurrences.load import OCCURRENCES
from surveillance_pipeline.quality.flags import first_flag_counts
from surveillance_pipeline.quality.policy import (
    checked_policy,
    drops_flagged,
    input_under_policy,
    kept_by_policy,
    policy_record,
)
from surveillance_pipeline.quality.rules import POLICY_ANY_ENABLED
from surveillance_pipeline.releases.exports import (
    EXPORT_FORMAT,
    GEOPARQUET_FORMAT,
    MANIFEST,
    PARQUET_ROW_GROUP,
    CsvStream,
    GeoParquetStream,
    WrittenFile,
    csv_export_columns,
    export_is_current,
    geoparquet_export_columns,
    geoparquet_kind,
    manifest_rows,
    point_bbox,
    publish_export,
    publish_written_export,
    remember_export_stamps,
)

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa
    from pyproj import Geod
else:
    np = LazyModule("numpy")

PACKAGE = "surveillance_pipeline.releases"
STAGE = "masked_release"
# Bump when the same input, config and key would give other masked points (the draw or how it is made).
# 2: displaced along the WGS84 geodesic instead of in EPSG:3577 metres. 3: the seed keyed (SeedKey).
# 4: each record's draw keyed by its gbifID (RecordDraws), no longer by its place in the species' id order.
# 5: the draws keyed by DRAW_VERSION where 4 keyed them by MASKING_VERSION (other draws, the same method).
MASKING_VERSION = 5
# Bump only when a record's draw itself must change: it keys the draws (draw_scope), so a bump gives every
# reader of two releases two masked points of each record; bump MASKING_VERSION with it, which the job key
# holds (this does not), or held releases stay "current" beside other bytes. A change to what is done with
# the draw (the displacement, the rounding) bumps MASKING_VERSION alone, and each record keeps its draw.
DRAW_VERSION = 1
ORDER = "ORDER BY id"
COLUMNS = ("id", "species", "year", "longitude", "latitude", "license")
# Released coordinates keep 6 decimals (about 0.1 m), the precision the CSV writes, in both files.
COORDINATE_DECIMALS = 6
DEFAULT_MIN_M = 100.0
DEFAULT_MAX_M = 1000.0
# Written into the manifest: the config no longer says how the metres were measured.
DISPLACEMENT = "geodesic on the WGS84 ellipsoid"
# The histogram of distances the UI shows: equal bins from min_m to max_m.
DISPLACEMENT_BINS = 10


_geods = threading.local()


def _geod() -> Geod:
    """WGS84's geodesics, built on a thread's first use (pyproj is imported only by a release that masks).
    One per thread: partitions are released side by side, and pyproj makes no promise that one object may
    be used by several threads at once."""
    geod: Geod | None = getattr(_geods, "geod", None)
    if geod is None:
        from pyproj import Geod

        geod = _geods.geod = Geod(ellps="WGS84")
    return geod


@dataclass(frozen=True)
class MaskingRules:
    """The donut, in geodesic metres: the config part of masked_release's job key."""

    min_m: float = DEFAULT_MIN_M
    max_m: float = DEFAULT_MAX_M
    # The release policy over occurrence_quality's flags: which records the release leaves out.
    policy: str = POLICY_ANY_ENABLED

    def as_config(self) -> dict[str, Any]:
        if not 0 <= self.min_m < self.max_m:
            raise ValueError(f"masked_release: need 0 <= min_m < max_m, got {self.min_m} and {self.max_m}")
        checked_policy(self.policy, "masked_release")
        return {"min_m": float(self.min_m), "max_m": float(self.max_m), "policy": self.policy}

    @property
    def drops_flagged(self) -> bool:
        return drops_flagged(self.policy)


def donut_mask(
    ids: np.ndarray, longitudes: np.ndarray, latitudes: np.ndarray, rules: MaskingRules, key: SeedKey
) -> tuple[np.ndarray, np.ndarray]:
    """Move every point by its record's draw from the donut; NaN (no coordinates) stays NaN."""
    radius, azimuth = RecordDraws(key, rules).of(np.asarray(ids, dtype=np.int64))
    return _displace(np.asarray(longitudes, dtype=float), np.asarray(latitudes, dtype=float), radius, azimuth)


def _displace(
    longitudes: np.ndarray, latitudes: np.ndarray, radius: np.ndarray, azimuth: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    masked_lon, masked_lat, _ = _geod().fwd(longitudes, latitudes, azimuth, radius)
    # A record without coordinates must stay without them, whatever the geodesic code makes of NaN.
    missing = np.isnan(longitudes) | np.isnan(latitudes)
    return (
        np.where(missing, np.nan, np.round(np.asarray(masked_lon, dtype=float), COORDINATE_DECIMALS)),
        np.where(missing, np.nan, np.round(np.asarray(masked_lat, dtype=float), COORDINATE_DECIMALS)),
    )


def draw_scope(rules: MaskingRules) -> str:
    """What a record's draw is keyed by besides its id: the stage, the draw's version and the donut.

    Not the release policy, which picks records and moves none; not the species, so a record GBIF moved
    to another species keeps its point. The donut, because two releases of one record with one draw and
    two donuts would share its azimuth and put the true point on the line through both masked points."""
    config = rules.as_config()
    donut = {"draw_version": DRAW_VERSION, "max_m": config["max_m"], "min_m": config["min_m"]}
    return f"{STAGE}|{canonical_json(donut)}"


def _radius(area_share: np.ndarray, rules: MaskingRules) -> np.ndarray:
    return np.sqrt(rules.min_m**2 + area_share * (rules.max_m**2 - rules.min_m**2))


@dataclass(frozen=True)
class RecordDraws:
    """Each record's distance (metres, uniform over the donut's area) and azimuth (degrees), from its id
    under the key: a page draws what the whole species would, whichever rows are beside it."""

    key: SeedKey
    rules: MaskingRules

    def of(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        area_share, turn = self.key.record_draws(draw_scope(self.rules), ids)
        return _radius(area_share, self.rules), turn * 360.0


def displacement_edges(rules: MaskingRules) -> list[float]:
    return [float(edge) for edge in np.linspace(rules.min_m, rules.max_m, DISPLACEMENT_BINS + 1)]


def _column(rows: list[tuple[Any, ...]], index: int) -> np.ndarray:
    return np.array([np.nan if row[index] is None else row[index] for row in rows], dtype=float)


def masked_rows(rows: list[tuple[Any, ...]], rules: MaskingRules, key: SeedKey) -> list[tuple[Any, ...]]:
    """``COLUMNS`` rows with masked coordinates, in id order (the release's).

    The row form of ``masked_columns`` (a build reads columns), for rows held in Python.
    """
    ordered = sorted(rows, key=lambda row: row[0])
    ids = np.array([row[0] for row in ordered], dtype=np.int64)
    longitudes, latitudes = donut_mask(ids, _column(ordered, 3), _column(ordered, 4), rules, key)
    return [
        (row[0], row[1], row[2], _coordinate(lon), _coordinate(lat), row[5])
        for row, lon, lat in zip(ordered, longitudes, latitudes, strict=True)
    ]


# The columns COPY sends (COLUMNS without species, which is the slug asked for).
_COPIED = ("id", "year", "longitude", "latitude", "license")
_POINTS = ("id", "longitude", "latitude")
# Rows per page read: a quarter of a Parquet row group, so a release holds a few pages, whatever its size.
PAGE_ROWS = PARQUET_ROW_GROUP // 4
# A species whose occurrences hold at most this many rows is read from the warehouse once, its pages
# kept until the files are written; a larger one is counted, then read twice (the bounding box first). A
# read of the points took 0.4 s, of every column 0.5-0.7 s, for the 161,114 released rows of the 1M bench
# download's largest species (2026-12-07).
READ_ONCE_UP_TO_ROWS = PARQUET_ROW_GROUP
_BEFORE_EVERY_ID = -(2**63)
# A column as a CSV field of select_masked_release_page's lines: NULL empty, text quoted.
_FIELD = "coalesce({}::text, '')"
_QUOTED_FIELD = "coalesce('\"' || replace({}, '\"', '\"\"') || '\"', '')"


def _pages(
    conn: psycopg.Connection, species_id: int, columns: Sequence[str], kept: sql.Composable
) -> Iterator[pa.Table]:
    """The species' rows in id order, ``PAGE_ROWS`` at a time, as Arrow columns (COPY's CSV parsed in C)."""
    page_rows = PAGE_ROWS
    after = _BEFORE_EVERY_ID
    while True:
        page = _read_page(conn, species_id, columns, after, page_rows, kept)
        ids = page.column("id").to_numpy()
        if len(ids) > 1 and not bool(np.all(ids[1:] > ids[:-1])):
            raise ValueError(f"species {species_id}: rows must arrive in ascending id order")
        if len(ids):
            yield page
        if len(ids) < page_rows:
            return
        after = int(ids[-1])


def _read_page(
    conn: psycopg.Connection,
    species_id: int,
    columns: Sequence[str],
    after: int,
    rows: int,
    kept: sql.Composable,
) -> pa.Table:
    import pyarrow as pa
    import pyarrow.csv as pacsv

    fields = [sql.SQL(_QUOTED_FIELD if c == "license" else _FIELD).format(sql.Identifier(c)) for c in columns]
    statement = load_sql(PACKAGE, "select_masked_release_page").format(
        line=sql.SQL(" || ',' || ").join(fields), kept=kept
    )
    # Shortest-exact float text whatever the server's default: the coordinates parse back bit for bit.
    conn.execute("SET LOCAL extra_float_digits = 3")
    found = conn.execute(statement, {"species_id": species_id, "after": after, "rows": rows}).fetchone()
    text = found[0] if found is not None and found[0] is not None else ""
    everything = {"id": pa.int64(), "year": pa.int64(), "longitude": pa.float64(), "latitude": pa.float64()}
    everything["license"] = pa.large_string()
    types = {c: everything[c] for c in columns}
    if not text:
        # No rows: Arrow reads no columns from empty text, so they are made here.
        return pa.table({c: pa.array([], type=types[c]) for c in columns})
    return pacsv.read_csv(
        pa.BufferReader(text.encode("utf-8")),
        read_options=pacsv.ReadOptions(column_names=list(columns)),
        convert_options=pacsv.ConvertOptions(
            column_types=types,
            # NULL is an unquoted empty field, an empty text a quoted one: only the first is null.
            strings_can_be_null=True,
            quoted_strings_can_be_null=False,
        ),
    )


def masked_columns(table: pa.Table, slug: str, draws: RecordDraws) -> tuple[pa.Table, list[int]]:
    """``COLUMNS`` of the release, masked, from all its rows in id order; and the displacement histogram."""
    rules = draws.rules
    released, radius, has_point = _masked_page(table, slug, draws)
    return released, _histogram(radius[has_point], rules)


def _histogram(radius: np.ndarray, rules: MaskingRules) -> list[int]:
    """How far the rows with coordinates moved (the geodesic moves each exactly its drawn distance)."""
    counts, _ = np.histogram(radius, bins=DISPLACEMENT_BINS, range=(rules.min_m, rules.max_m))
    return [int(count) for count in counts]


def _masked_page(table: pa.Table, slug: str, draws: RecordDraws) -> tuple[pa.Table, np.ndarray, np.ndarray]:
    """A page of ``COLUMNS`` rows, masked with its records' draws; its radii and which rows have a point."""
    import pyarrow as pa

    longitudes = table.column("longitude").to_numpy().astype(float)
    latitudes = table.column("latitude").to_numpy().astype(float)
    radius, azimuth = draws.of(table.column("id").to_numpy().astype(np.int64))
    masked_lon, masked_lat = _displace(longitudes, latitudes, radius, azimuth)
    columns = {
        "id": table.column("id"),
        "species": pa.repeat(pa.scalar(slug, pa.large_string()), table.num_rows),
        "year": table.column("year") if "year" in table.column_names else None,
        "longitude": pa.array(masked_lon, from_pandas=True),
        "latitude": pa.array(masked_lat, from_pandas=True),
        "license": table.column("license") if "license" in table.column_names else None,
    }
    released = pa.table({c: v for c, v in columns.items() if v is not None})
    return released, radius, ~(np.isnan(longitudes) | np.isnan(latitudes))


def _coordinate(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


@dataclass(frozen=True)
class MaskedRelease:
    parts: JobKeyParts
    logical_run_id: str
    rows: int
    manifest_sha256: str
    written: bool
    # Rows per displacement bin (displacement_edges), when known: drawn on a build, recorded, read back on a
    # skip; for the UI only.
    displacement_counts: list[int] | None = None
    # Records the release policy left out (from the manifest; 0 under keep_all).
    excluded: int = 0

    def detail(self) -> dict[str, Any]:
        """What the provenance row keeps so ``replay`` can regenerate this release (and the histogram)."""
        return {
            "stage": STAGE,
            "logical_run_id": self.logical_run_id,
            "masking_key_id": self.parts.config[MASKING_KEY_ID],
            "manifest_sha256": self.manifest_sha256,
            **(
                {"displacement_counts": self.displacement_counts}
                if self.displacement_counts is not None
                else {}
            ),
        }


def kept_records(rules: MaskingRules) -> sql.Composable:
    """The release's row filter (a condition on ``occurrences``) for its policy."""
    return kept_by_policy(
        rules.policy, sql.Identifier("occurrences", "id"), sql.Identifier("occurrences", "species_id")
    )


def release_input(
    conn: psycopg.Connection,
    slug: str,
    rules: MaskingRules,
    occurrences_key: str,
    *,
    refuse_edits: bool = True,
) -> tuple[str, dict[str, Any]]:
    """The release's input: what occurrences holds and, under a policy over the flags, what
    occurrence_quality holds for those rows (its content version, so a threshold change that flags the
    same records rebuilds nothing); and the tests' versions and parameters the policy applies."""
    return input_under_policy(
        conn, rules.policy, (OCCURRENCES.name, occurrences_key), [slug], refuse_edits=refuse_edits
    )


# The config's name for the id of the key the draws were keyed by: another key draws other points.
MASKING_KEY_ID = "masking_key_id"


def masked_release_parts(input_job_key: str, rules: MaskingRules, key_id: str) -> JobKeyParts:
    return JobKeyParts(
        input=input_job_key,
        transform=MASKING_VERSION,
        config={**rules.as_config(), MASKING_KEY_ID: key_id},
        schema=EXPORT_FORMAT,
    )


def rules_of_config(config: dict[str, Any]) -> tuple[MaskingRules, str | None]:
    """The rules and the key id a release's job key config names (the key id is None before version 3)."""
    rules = {name: value for name, value in config.items() if name != MASKING_KEY_ID}
    return MaskingRules(**rules), config.get(MASKING_KEY_ID)


def build_masked_release(
    conn: psycopg.Connection,
    slug: str,
    rules: MaskingRules,
    folder: Path,
    *,
    key: SeedKey,
    expected_input: str | None = None,
    rebuild: bool = False,
    stamps: Path | None = None,
    held: HeldKeys | None = None,
    statistics: StatisticsBeforeUse | None = None,
) -> MaskedRelease:
    """Mask one species and publish it into ``folder`` (swapped in whole), unless it already holds the key.

    ``key``: the release masking key the draws are keyed by (its id enters the job key).
    ``expected_input``: the upstream key the caller needs (a replay); a different one fails the build.
    ``rebuild``: build even when the folder holds the key (a replay proves, it does not trust).
    ``stamps``: the memo of the files' stamps (exports.export_is_current), so that deciding a skip does not
    read every file of the release again (0.4 s for a 5M-record download's 71 species); not trusted when
    the connection verifies every skip (``make repair``).
    ``held``: the keys occurrences held when the step began (read_held_keys): a release that is current
    for the held key is kept without the transaction and its share lock, which only a build needs.
    ``statistics``: occurrence_quality's statistics, brought up to date before a build plans its pages
    (the release policy reads the flags record by record).
    """
    # First, whatever a killed run left (a stale staging folder) goes, even when this run then skips.
    recover_partition_folder(folder)
    if stamps is not None and (held.verifying if held is not None else verify_every_skip(conn)):
        stamps = None
    held_occurrences = held.get(OCCURRENCES.name, slug) if held is not None else None
    held_input = None  # not tried
    if held_occurrences is not None and not rebuild and expected_input is None:
        try:
            held_input = release_input(conn, slug, rules, held_occurrences)[0]
        except StaleInputError:
            pass  # the transaction below reads it again, under its lock, and says why
        kept = _kept_release(conn, slug, rules, folder, held_input, stamps, key) if held_input else None
        if kept is not None:
            return kept
    with conn.transaction():
        # Share-locks occurrences' state row (and occurrence_quality's): their rows cannot be reloaded
        # while we read them.
        input_key, tests = release_input(conn, slug, rules, upstream_job_key(conn, OCCURRENCES.name, slug))
        if expected_input is not None and input_key != expected_input:
            raise ValueError(
                f"occurrences for {slug!r} now holds job key {input_key}, not {expected_input}: the release "
                "can be regenerated only from the input it was made from"
            )
        # Tried above for the held key; a file hashed again would give the same answer.
        tried = rebuild or input_key == held_input
        kept = None if tried else _kept_release(conn, slug, rules, folder, input_key, stamps, key)
        if kept is not None:
            return kept
        if statistics is not None:
            # occurrence_quality holds every species in one table, which autovacuum analyzes some time
            # after a load. One page of the 5M download's largest species, planned before that analyze in
            # a fresh warehouse's first run, ran for 9 minutes; after it, the same page plans an index
            # anti join on the flags (2026-12-07).
            statistics.ensure()
        parts = masked_release_parts(input_key, rules, key.id)
        logical = logical_run_id(slug, input_key)
        draws = RecordDraws(key, rules)
        found = conn.execute(load_sql(PACKAGE, "select_species_id"), {"slug": slug}).fetchone()
        species_id = int(found[0]) if found is not None else None
        kept_rows = kept_records(rules)
        extra = {
            "masking": {
                "stage": STAGE,
                "logical_run_id": logical,
                MASKING_KEY_ID: key.id,
                "displacement": DISPLACEMENT,
            },
            "policy": _policy_record(conn, rules, tests, species_id),
        }
        # A release of at most a row group (what the GeoParquet writer holds before it writes one anyway)
        # is read once, its pages kept and counted here, and the files written from them masked; a larger
        # one is counted by the warehouse and read twice (_masked_pass), so that it holds a few pages,
        # whatever its size. occurrences' own rows bound the release's, read under the share lock above.
        import pyarrow as pa

        occurrences_held = held_state(conn, OCCURRENCES.name, slug)
        read_once = (
            species_id is not None
            and occurrences_held is not None
            and occurrences_held.rows <= READ_ONCE_UP_TO_ROWS
        )
        read_pages: list[pa.Table] = []
        totals: tuple[int, ...] = (0, 0, 0, 0, 0)
        if species_id is not None and read_once:
            read_pages = list(_pages(conn, species_id, _COPIED, kept_rows))
            totals = _page_totals(read_pages)
        elif species_id is not None:
            counting = load_sql(PACKAGE, "select_masked_release_counts").format(kept=kept_rows)
            row = conn.execute(counting, {"species_id": species_id})
            totals = tuple(int(n) for n in (row.fetchone() or totals))
        count, years, longitudes, latitudes, licenses = totals
        if species_id is None or count == 0 or longitudes == 0 or longitudes != latitudes:
            # No point to write (or none at all): geopandas types such a file, from the rows in memory.
            table = (
                pa.concat_tables(read_pages).combine_chunks()
                if read_pages
                else _read_page(conn, species_id or 0, _COPIED, _BEFORE_EVERY_ID, max(count, 1), kept_rows)
            )
            released, counts = masked_columns(table, slug, draws)
            files = [
                csv_export_columns(f"{slug}.csv", released),
                geoparquet_export_columns(f"{slug}.parquet", released),
            ]
            manifest = publish_export(folder, files, parts, ORDER, extra)
            if stamps is not None:
                remember_export_stamps(folder, stamps)
            excluded = int(extra["policy"]["excluded"])
            return MaskedRelease(parts, logical, count, sha256_hex(manifest), True, counts, excluded)
        kinds = {
            "id": "int64",
            "species": "str",
            "year": geoparquet_kind(pa.int64(), count - years, count),
            "longitude": "float64",
            "latitude": "float64",
            "license": geoparquet_kind(pa.large_string(), count - licenses, count),
        }
        bbox, counts, held_pages = _masked_pass(
            conn, species_id, slug, count, draws, kept_rows, read_pages if read_once else None
        )

        def released_pages() -> Iterator[pa.Table]:
            if read_once:
                yield from held_pages
                return
            for page in _pages(conn, species_id, _COPIED, kept_rows):
                yield _masked_page(page, slug, draws)[0]

        def write_files(staging: Path) -> list[WrittenFile]:
            csv = CsvStream(staging / f"{slug}.csv", COLUMNS)
            parquet_path = staging / f"{slug}.parquet"
            parquet = GeoParquetStream(str(parquet_path), kinds, bbox)
            for released in released_pages():
                csv.write(released)
                parquet.write(released)
            parquet.close()
            if parquet.rows != count:
                raise ValueError(f"masked_release of {slug!r}: the rows changed while being read")
            _fsync(parquet_path)
            written = WrittenFile(parquet_path.name, sha256_file(parquet_path), count, GEOPARQUET_FORMAT)
            return [csv.close(), written]

        manifest = publish_written_export(folder, write_files, parts, ORDER, extra)
        if stamps is not None:
            remember_export_stamps(folder, stamps)
    excluded = int(extra["policy"]["excluded"])
    return MaskedRelease(parts, logical, count, sha256_hex(manifest), True, counts, excluded)


def _kept_release(
    conn: psycopg.Connection,
    slug: str,
    rules: MaskingRules,
    folder: Path,
    input_key: str,
    stamps: Path | None,
    key: SeedKey,
) -> MaskedRelease | None:
    """The release the folder holds, when it is current for ``input_key`` (else None: build it)."""
    parts = masked_release_parts(input_key, rules, key.id)
    if not export_is_current(folder, parts.key, stamps):
        return None
    logical = logical_run_id(slug, input_key)
    recorded = last_recorded_output(conn, STAGE, slug)
    same = recorded is not None and recorded.job_key == parts.key
    counts = recorded.detail.get("displacement_counts") if same and recorded is not None else None
    policy = json.loads((folder / MANIFEST).read_bytes()).get("policy", {})
    return MaskedRelease(
        parts,
        logical,
        manifest_rows(folder),
        sha256_file(folder / MANIFEST),
        False,
        counts,
        int(policy.get("excluded", 0)),
    )


def _policy_record(
    conn: psycopg.Connection, rules: MaskingRules, tests: dict[str, Any], species_id: int | None
) -> dict[str, Any]:
    """The manifest's account of the policy (policy_record), counted over the species' records."""
    excluded = first_flag_counts(conn, species_id) if rules.drops_flagged and species_id is not None else {}
    return policy_record(rules.policy, tests, excluded)


def _masked_pass(
    conn: psycopg.Connection,
    species_id: int,
    slug: str,
    count: int,
    draws: RecordDraws,
    kept: sql.Composable,
    read_pages: list[pa.Table] | None,
) -> tuple[list[float], list[int], list[pa.Table]]:
    """A pass over the rows, masked: their bounding box, which the GeoParquet's metadata holds before its
    first row; the displacement histogram; and the masked pages of ``read_pages`` (the release's rows,
    read already), or none kept when the pass reads the points alone."""
    bbox: list[float] | None = None
    histograms: list[np.ndarray] = []
    kept_pages: list[pa.Table] = []
    rows = 0
    pages = read_pages if read_pages is not None else _pages(conn, species_id, _POINTS, kept)
    for page in pages:
        released, radius, has_point = _masked_page(page, slug, draws)
        rows += page.num_rows
        histograms.append(np.asarray(_histogram(radius[has_point], draws.rules)))
        if has_point.any():
            box = point_bbox(_floats(released, "longitude"), _floats(released, "latitude"))
            bbox = box if bbox is None else [*map(min, bbox[:2], box[:2]), *map(max, bbox[2:], box[2:])]
        if read_pages is not None:
            kept_pages.append(released)
    if bbox is None or rows != count:
        raise ValueError(f"masked_release of {slug!r}: the rows changed while being read")
    return bbox, [int(n) for n in np.sum(histograms, axis=0)], kept_pages


def _page_totals(pages: list[pa.Table]) -> tuple[int, ...]:
    """What select_masked_release_counts.sql counts (rows, then the values of year, longitude, latitude
    and license), over pages read already."""
    rows = sum(page.num_rows for page in pages)
    values = [
        rows - sum(page.column(column).null_count for page in pages)
        for column in ("year", "longitude", "latitude", "license")
    ]
    return (rows, *values)


def _floats(table: pa.Table, column: str) -> np.ndarray:
    return table.column(column).to_numpy().astype(float)


def _fsync(path: Path) -> None:
    with path.open("rb") as handle:
        os.fsync(handle.fileno())


def held_release_inputs(conn: psycopg.Connection) -> HeldKeys:
    """What occurrences holds, read once for a step's species (build_masked_release's ``held``)."""
    return read_held_keys(conn, OCCURRENCES.name)


def release_masked_partition(
    conn: psycopg.Connection,
    *,
    slug: str,
    rules: MaskingRules,
    folder: Path,
    run_id: str,
    key: SeedKey,
    stamps: Path | None = None,
    held: HeldKeys | None = None,
    statistics: StatisticsBeforeUse | None = None,
) -> tuple[RefreshOutcome, MaskedRelease]:
    """Build (or skip) one species' masked release and record it in provenance (its logical run and key id,
    from which the key's holder replays it; nothing the draws could be made from without the key)."""
    release = build_masked_release(
        conn, slug, rules, folder, key=key, stamps=stamps, held=held, statistics=statistics
    )
    outcome = report_derived_output(
        conn,
        asset=STAGE,
        partition_key=slug,
        parts=release.parts,
        rows=release.rows,
        run_id=run_id,
        unchanged=not release.written,
        detail=release.detail(),
    )
    return outcome, release
