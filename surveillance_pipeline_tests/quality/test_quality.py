"""occurrence_quality: each test flags just inside its limit and not just outside; config in the key, the
rows' digest as the data version; bad input named and nothing changed; the reference layers versioned."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from collections import Counter

import dagster as dg
import numpy as np
import pytest
from shapely.geometry import Point, shape

from surveillance_pipeline.core.errors import InputError
from surveillance_pipeline.core.keys import sha256_file
from surveillance_pipeline.core.line_digests import (
    RECORDS_FILE_LINES,
    SEARCH_RECORDS,
    KeptDigests,
    LineDigests,
    read_kept_lines,
    write_kept_lines,
)
from surveillance_pipeline.core.refresh import ensure_state_tables
from surveillance_pipeline.gbif.registry import species_by_slug
from surveillance_pipeline.lab.deliveries import write_lab_delivery
from surveillance_pipeline.planning.plan import make_plan
from surveillance_pipeline.quality import flags as quality_flags
from surveillance_pipeline.quality.assets import occurrence_quality
from surveillance_pipeline.quality.flags import degree_bounds
from surveillance_pipeline.quality.outliers import (
    EARTH_RADIUS_M,
    SiteSums,
    distance_sums,
    mean_distances,
    outlier_sites,
    read_site_sums,
    site_distance_sums,
    updated_distance_sums,
    weighted_quantiles,
    write_site_sums,
)
from surveillance_pipeline.quality.references import ReferenceLayers, load_quality_references
from surveillance_pipeline.quality.rules import TESTS, QualityConfigError, QualityRules
from surveillance_pipeline.quality.settings import configured_rules
from surveillance_pipeline.releases.assets import (
    devil_snapshot_export,
    masked_release,
    quality_report,
    sample_export,
)
from surveillance_pipeline.samples.assets import (
    occurrence_sample,
    occurrence_sample_summary,
    sample_engines_agree,
)
from surveillance_pipeline.snapshots.assets import devil_snapshot
from surveillance_pipeline_tests.support.pipeline import (
    DEVIL,
    SPINE,
    TEST_SEED_KEY,
    data_version,
    metadata,
    resources,
    rows_md5,
)
from surveillance_pipeline_tests.support.quality_probes import (
    BASE_RECORDS,
    FIRST_KEY,
    SCATTERED_RECORDS,
    _features,
    probe_keys,
    probes,
)

FLAGS = [test.column for test in TESTS]
QUALITY_CHAIN = [*SPINE, occurrence_quality]


def _materialize(
    instance, database_url, data_dir, *, edit="quality_probes", config=None, partition=DEVIL, **kw
):
    run_config = {"ops": {"occurrence_quality": {"config": config}}} if config else {}
    return dg.materialize(
        QUALITY_CHAIN,
        instance=instance,
        partition_key=partition,
        resources=resources(database_url, data_dir, edit),
        run_config=run_config,
        **kw,
    )


def _flags(db, species_id: int) -> dict[int, dict[str, object]]:
    columns = ", ".join(FLAGS)
    rows = db.execute(
        f"SELECT id, first_flag, {columns} FROM occurrence_quality WHERE species_id = %s ORDER BY id",  # noqa: S608
        [species_id],
    ).fetchall()
    return {row[0]: {"first_flag": row[1], **dict(zip(FLAGS, row[2:], strict=True))} for row in rows}


def test_the_defaults_are_coordinatecleaners_and_gbifs_and_equal_settings_are_one_config():
    rules = QualityRules.from_settings()
    config = rules.as_config()
    assert sorted(config) == sorted(test.name for test in TESTS if test.name != "urban")
    assert config["uncertainty"] == {
        "version": 1,
        "limit_m": 10_000.0,
        "placeholders_m": [301.0, 999.0, 3036.0, 9999.0],
    }
    assert config["capitals"]["radius_m"] == 10_000.0 and config["centroids"]["radius_m"] == 1_000.0
    assert config["old"] == {"version": 1, "before_year": 1900}
    assert "ZERO_COORDINATE" in config["gbif_issues"]["issues"]
    assert config["basis"]["basis_of_record"] == ["FOSSIL_SPECIMEN", "LIVING_SPECIMEN"]
    # 1900.0 and 1900 are one setting, placeholders in any order and type are one set: one key.
    same = QualityRules.from_settings(
        parameters={
            "old": {"before_year": 1900.0},
            "uncertainty": {"placeholders_m": [9999, 301, 3036, 999, 301]},
        }
    )
    assert same.as_config() == config
    with pytest.raises(QualityConfigError, match="unknown test"):
        QualityRules.from_settings(disabled=["coastline"])
    with pytest.raises(QualityConfigError, match="unknown parameter"):
        QualityRules.from_settings(parameters={"sea": {"radius_m": 5.0}})
    with pytest.raises(QualityConfigError, match=">= 0"):
        QualityRules.from_settings(parameters={"capitals": {"radius_m": -1.0}})
    with pytest.raises(QualityConfigError, match="whole number"):
        QualityRules.from_settings(parameters={"old": {"before_year": 1899.5}})


def test_the_run_config_wins_over_the_quality_file_which_wins_over_the_defaults(tmp_path):
    file = tmp_path / "quality.yaml"
    file.write_text("enabled_tests: [uncertainty, sea]\nuncertainty_limit_m: 5000\nsea_buffer_m: 500\n")
    rules = configured_rules({"sea_buffer_m": 750.0, "old_before_year": None}, file)
    assert sorted(rules.enabled) == ["sea", "uncertainty"]
    assert rules.param("uncertainty", "limit_m") == 5000.0 and rules.param("sea", "buffer_m") == 750.0
    file.write_text("uncertainty_limit_m: 5000\ncoast_buffer_m: 3\n")
    with pytest.raises(InputError, match=r"quality\.yaml.*coast_buffer_m.*unknown setting"):
        configured_rules({}, file)
    file.write_text("uncertainty_limit_m: [5000\n")
    with pytest.raises(InputError, match=r"quality\.yaml: line 2"):
        configured_rules({}, file)


@pytest.mark.db
def test_the_reference_layers_load_once_per_version_and_skip(db):
    ensure_state_tables(db)
    first = load_quality_references(db, ReferenceLayers(), run_id="test")
    again = load_quality_references(db, ReferenceLayers(), run_id="test")
    assert (first.action, again.action) == ("loaded", "skipped") and first.job_key == again.job_key
    layers = dict(
        db.execute("SELECT layer, count(DISTINCT feature) FROM quality_references GROUP BY 1").fetchall()
    )
    # Natural Earth 4.0.0: 241 countries (of which 236 have an ISO code), 215 country capitals, 100 provinces.
    assert layers["countries"] == 241 and layers["country_centroids"] == 241
    assert layers["capitals"] == 215 and layers["province_centroids"] == 100
    assert layers["land"] == 1420 and layers["urban"] == 2143
    # France and Norway have ISO_A2 -99 in this version: their polygons still carry their codes.
    codes = {
        row[0] for row in db.execute("SELECT DISTINCT code FROM quality_references WHERE layer = 'countries'")
    }
    assert {"FR", "NO", "AU", "NZ"} <= codes and "-99" not in codes


@pytest.mark.db
@pytest.mark.dagster
def test_each_test_flags_just_inside_its_limit_and_not_just_outside(db, database_url, data_dir):
    with dg.instance_for_test() as instance:
        shown = metadata(_materialize(instance, database_url, data_dir), "occurrence_quality")
    devil = species_by_slug(DEVIL)
    flags = _flags(db, devil.species_id)
    keys = probe_keys()
    assert len(flags) == BASE_RECORDS + len(keys) - 0 == shown["rows"]
    wrong = {
        (probe.name, column): flags[keys[probe.name]][column]
        for probe in probes()
        for column, expected in probe.expected.items()
        if flags[keys[probe.name]][column] is not expected
    }
    assert wrong == {}
    # The clean base: every enabled test passed; urban is off by default, so not evaluated.
    for key in range(FIRST_KEY + 2, FIRST_KEY + BASE_RECORDS):
        expected = {column: False for column in FLAGS} | {"flag_urban": None, "first_flag": None}
        expected["flag_precision"] = None  # the base gives no coordinatePrecision: nothing to test
        assert flags[key] == expected, key
    # The first reason follows the tests' order: a fossil from 1850 is excluded for its basis.
    assert flags[keys["fossil from 1850"]]["first_flag"] == "basis"
    # GBIF is in Copenhagen: within 10 km of Denmark's capital, which comes first.
    assert flags[keys["GBIF, 0.9 km"]]["first_flag"] == "capitals"
    # The terms are kept, typed, from the search answer.
    terms = db.execute(
        "SELECT basis_of_record, coordinate_uncertainty_m, institution_code, issues FROM occurrence_quality"
        " WHERE id = %s",
        [keys["uncertainty over"]],
    ).fetchone()
    assert terms == ("HUMAN_OBSERVATION", 10000.5, "TMAG", [])
    issues = {
        name: db.execute("SELECT issues FROM occurrence_quality WHERE id = %s", [keys[name]]).fetchone()[0]
        for name in ("issues unsorted, repeated, padded", "one issue, padded", "serious issue")
    }
    assert issues == {
        "issues unsorted, repeated, padded": ["COORDINATE_ROUNDED", "TAXON_MATCH_FUZZY"],
        "one issue, padded": ["COORDINATE_ROUNDED"],
        "serious issue": ["TAXON_MATCH_FUZZY"],
    }
    # The metadata's table counts what the rows hold.
    by_test = {row["test"]: row for row in shown["tests"]}
    for column in FLAGS:
        name = column.removeprefix("flag_")
        assert by_test[name]["flagged"] == sum(row[column] is True for row in flags.values()), name
        assert by_test[name]["first_reason"] == sum(row["first_flag"] == name for row in flags.values())
    assert shown["flagged"] == sum(row["first_flag"] is not None for row in flags.values())
    # The map: every published point on its grid cell, the flagged ones apart (the probes hold points
    # on both sides of the equator, so cells of both signs).
    points = db.execute(
        "SELECT first_flag IS NOT NULL, decimal_longitude, decimal_latitude FROM occurrence_quality"
        " WHERE species_id = %s AND decimal_longitude IS NOT NULL AND decimal_latitude IS NOT NULL",
        [devil.species_id],
    ).fetchall()
    grid = quality_flags.MAP_GRID_DEGREES
    cells = Counter(
        (flagged, round(lon / grid) * grid, round(lat / grid) * grid) for flagged, lon, lat in points
    )
    assert any(lat < 0 for _, _, lat in cells) and any(lat > 0 for _, _, lat in cells)
    kept, flagged_cells = quality_flags.flagged_map_cells(db, devil)
    assert kept == sorted((lon, lat, n) for (flagged, lon, lat), n in cells.items() if not flagged)
    assert flagged_cells == sorted((lon, lat, n) for (flagged, lon, lat), n in cells.items() if flagged)


def test_a_touch_cell_is_the_coarsest_power_of_two_whose_diagonal_is_within_the_sure_bound():
    for buffer_m in (0.0, 5.0, 20.0, 100.0, 999.0, 4_990.0, 5_000.0, 10_000.0, 100_000.0, 1_000_000.0):
        bounds = degree_bounds("sea", buffer_m)
        side, sure, settles = (
            bounds["sea_touch_cell"],
            bounds["sea_sure_degrees"],
            bounds["sea_touch_settles"],
        )
        assert math.log2(side) == round(math.log2(side)) and side <= 0.5
        if settles:
            assert side * math.sqrt(2) <= sure and (side == 0.5 or 2 * side * math.sqrt(2) > sure), buffer_m
        else:
            assert side == 2.0**-12 and side * math.sqrt(2) > sure, buffer_m
    # The defaults: the sea's 5 km settles by cells of 1/32 degree, the country's 10 km by 1/16.
    assert degree_bounds("sea", 5_000.0)["sea_touch_cell"] == 1 / 32
    assert degree_bounds("country", 10_000.0)["country_touch_cell"] == 1 / 16


# Buffers (sea, country) in metres, and the touch cells they give: the defaults; buffers whose touch cells
# are coarser than the sub-cells; buffers no touch cell fits (they settle nothing, only spare a probe).
BUFFERS = {
    "defaults": (None, None, (1 / 32, True), (1 / 16, True)),
    "wide": (30_000.0, 40_000.0, (1 / 8, True), (1 / 4, True)),
    "narrow": (40.0, 40.0, (2.0**-12, False), (2.0**-12, False)),
}


@pytest.mark.db
@pytest.mark.dagster
@pytest.mark.parametrize("buffers", BUFFERS)
def test_the_buffer_tests_flag_what_the_geodesic_distance_alone_flags_point_for_point(
    db, database_url, data_dir, buffers
):
    # Points scattered over a coast, each flagged for the sea and for its country as one geodesic
    # ST_DWithin per point over every piece of the layers would flag it: whatever cell, sub-cell, touch
    # cell or bound in degrees settled it first.
    sea_m, country_m, sea_touch, country_touch = BUFFERS[buffers]
    config = {"sea_buffer_m": sea_m, "country_buffer_m": country_m} if sea_m is not None else None
    with dg.instance_for_test() as instance:
        _materialize(instance, database_url, data_dir, edit="scattered_on_coasts", config=config)
    rules = configured_rules(config or {})
    for test, touch in (("sea", sea_touch), ("country", country_touch)):
        bounds = degree_bounds(test, float(rules.param(test, "buffer_m")))
        assert (bounds[f"{test}_touch_cell"], bounds[f"{test}_touch_settles"]) == touch
    rows = db.execute(
        """
        SELECT q.id, q.country_code, q.flag_sea, q.flag_country,
               NOT EXISTS (
                   SELECT 1 FROM quality_references AS r
                   WHERE r.layer = 'land' AND ST_DWithin(r.geog, point.geog, %(sea)s)
               ),
               NOT EXISTS (
                   SELECT 1 FROM quality_references AS r
                   WHERE r.layer = 'countries' AND r.code = q.country_code
                     AND ST_DWithin(r.geog, point.geog, %(country)s)
               )
        FROM occurrence_quality AS q
        CROSS JOIN LATERAL (
            SELECT ST_SetSRID(ST_MakePoint(q.decimal_longitude, q.decimal_latitude), 4326)::geography AS geog
        ) AS point
        WHERE q.species_id = %(species)s
        ORDER BY q.id
        """,
        {
            "sea": rules.param("sea", "buffer_m"),
            "country": rules.param("country", "buffer_m"),
            "species": species_by_slug(DEVIL).species_id,
        },
    ).fetchall()
    assert len(rows) == SCATTERED_RECORDS
    wrong = [row for row in rows if (row[2], row[3]) != (row[4], row[5])]
    assert wrong == []
    if buffers != "defaults":
        return
    # Both ways, for both tests, and for both countries.
    assert {(row[1], row[2], row[3]) for row in rows} >= {
        ("AU", False, False),
        ("AU", True, False),
        ("AU", True, True),
        ("NZ", False, True),
        ("NZ", True, True),
    }


@pytest.mark.db
@pytest.mark.dagster
def test_a_threshold_change_reloads_but_the_data_version_moves_only_with_the_flags(
    db, database_url, data_dir
):
    with dg.instance_for_test() as instance:
        first = metadata(_materialize(instance, database_url, data_dir), "occurrence_quality")
        version = data_version(instance, "occurrence_quality")
        rows = rows_md5(db, "occurrence_quality")
        # 10,000.2 m flags what 10,000 m flags here (10,000.0 passes, 10,000.5 is flagged): a reload under
        # a new key whose rows, and so data version, are the same.
        nudged = metadata(
            _materialize(instance, database_url, data_dir, config={"uncertainty_limit_m": 10_000.2}),
            "occurrence_quality",
        )
        assert (nudged["action"], nudged["reason"]) == ("loaded", "config changed (uncertainty)")
        assert nudged["job_key"] != first["job_key"]
        assert (
            data_version(instance, "occurrence_quality") == version
            and rows_md5(db, "occurrence_quality") == rows
        )
        # 10,001 m lets the 10,000.5 m record pass: another version.
        moved = metadata(
            _materialize(instance, database_url, data_dir, config={"uncertainty_limit_m": 10_001.0}),
            "occurrence_quality",
        )
        assert moved["action"] == "loaded" and data_version(instance, "occurrence_quality") != version
        assert (
            _flags(db, species_by_slug(DEVIL).species_id)[probe_keys()["uncertainty over"]][
                "flag_uncertainty"
            ]
            is False
        )
        # Back to the defaults: the first rows again (a return to an earlier config reloads it), then a skip.
        back = metadata(_materialize(instance, database_url, data_dir), "occurrence_quality")
        assert back["action"] == "loaded" and back["job_key"] == first["job_key"]
        assert (
            data_version(instance, "occurrence_quality") == version
            and rows_md5(db, "occurrence_quality") == rows
        )
        skipped = metadata(_materialize(instance, database_url, data_dir), "occurrence_quality")
        assert (skipped["action"], skipped["reason"]) == ("skipped", "nothing changed")
        # Urban areas, off by default, on: Hobart's probe is flagged exactly when the shipped layer holds it.
        urban = metadata(
            _materialize(instance, database_url, data_dir, config={"enabled_tests": [t.name for t in TESTS]}),
            "occurrence_quality",
        )
        assert urban["reason"] == "config changed (urban)"
        hobart = Point(147.3272, -42.8821)
        inside = any(shape(feature["geometry"]).contains(hobart) for feature in _features("urban"))
        assert (
            _flags(db, species_by_slug(DEVIL).species_id)[probe_keys()["in Hobart"]]["flag_urban"] is inside
        )


@pytest.mark.db
@pytest.mark.dagster
def test_a_species_that_lives_at_sea_is_never_flagged_for_the_sea(db, database_url, data_dir):
    seal = species_by_slug("arctocephalus-pusillus")
    assert seal.habitat == "marine" and not seal.terrestrial
    with dg.instance_for_test() as instance:
        _materialize(instance, database_url, data_dir, edit="none", partition=seal.slug)
    sea = db.execute(
        "SELECT count(*), count(flag_sea), count(*) FILTER (WHERE decimal_longitude IS NOT NULL"
        " AND flag_country IS NULL) FROM occurrence_quality WHERE species_id = %s",
        [seal.species_id],
    ).fetchone()
    # Not one record evaluated for the sea; the country test leaves its points at sea alone too.
    assert sea[0] > 0 and sea[1] == 0 and sea[2] > 0


@pytest.mark.db
@pytest.mark.dagster
def test_a_bad_term_is_named_by_record_and_field_and_the_partition_keeps_its_rows(db, database_url, data_dir):
    with dg.instance_for_test() as instance:
        _materialize(instance, database_url, data_dir, edit="none")
        before = rows_md5(db, "occurrence_quality")
        state = db.execute("SELECT job_key FROM target_state WHERE target = 'occurrence_quality'").fetchone()
        result = _materialize(
            instance, database_url, data_dir, edit="bad_individual_count", raise_on_error=False
        )
        assert not result.success
        failure = next(
            event for event in result.all_events if event.event_type_value == "STEP_FAILURE"
        ).event_specific_data.error.to_string()
        assert "sarcophilus-harrisii.json" in failure and "record 0" in failure
        assert "individualCount" in failure and "'many'" in failure
    assert rows_md5(db, "occurrence_quality") == before
    assert (
        db.execute("SELECT job_key FROM target_state WHERE target = 'occurrence_quality'").fetchone() == state
    )


def test_the_outliers_quantiles_are_rs_over_every_record_without_repeating_them():
    generator = np.random.default_rng(20261206)
    values = generator.uniform(0, 1000, 300)
    counts = generator.integers(1, 40, 300)
    repeated = np.repeat(values, counts)
    for probability in (0.0, 0.25, 0.5, 0.75, 1.0):
        expected = float(np.percentile(repeated, 100 * probability))
        assert weighted_quantiles(values, counts, (probability,))[0] == pytest.approx(expected, abs=1e-9)
    # 2,000 sites over Tasmania and one in Copenhagen: that one, alone, is an outlier.
    longitude = np.append(generator.uniform(145.0, 148.0, 2000), 12.58)
    latitude = np.append(generator.uniform(-43.5, -41.0, 2000), 55.67)
    records = np.ones(len(longitude), dtype=np.int64)
    flagged = outlier_sites(longitude, latitude, records, multiplier=5.0, min_records=7)
    assert flagged is not None and flagged[-1] and not flagged[:-1].any()
    # Fewer records than the minimum: not evaluated.
    assert outlier_sites(longitude[:6], latitude[:6], records[:6], multiplier=5.0, min_records=7) is None


def test_the_outliers_mean_distances_are_every_pairs_haversine():
    # Sites a block apart and within one, one site twice, both poles, either side of the antimeridian,
    # antipodes: each mean against the textbook formula, pair by pair.
    generator = np.random.default_rng(6)
    longitude = np.concatenate(
        [generator.uniform(-180, 180, 90), [147.3, 147.3, 0.0, 0.0, 179.99, -179.99, 10.0, -170.0]]
    )
    latitude = np.concatenate(
        [generator.uniform(-90, 90, 90), [-42.9, -42.9, 90.0, -90.0, 10.0, 10.0, 45.0, -45.0]]
    )
    weights = generator.integers(1, 5, len(longitude)).astype(np.float64)
    total = int(weights.sum())

    def haversine(i: int, j: int) -> float:
        lat_i, lat_j = math.radians(latitude[i]), math.radians(latitude[j])
        h = (
            math.sin((lat_j - lat_i) / 2) ** 2
            + math.cos(lat_i) * math.cos(lat_j) * math.sin(math.radians(longitude[j] - longitude[i]) / 2) ** 2
        )
        return 2 * EARTH_RADIUS_M * math.asin(math.sqrt(min(h, 1.0)))

    expected = [
        sum(haversine(i, j) * weights[j] for j in range(len(longitude))) / (total - 1)
        for i in range(len(longitude))
    ]
    # Each pair in whole metres: a mean within half a metre of the exact one.
    assert mean_distances(longitude, latitude, weights, total) == pytest.approx(expected, rel=0, abs=0.51)
    sums = distance_sums(longitude, latitude, weights)
    assert np.array_equal(sums, np.rint(sums))


def test_the_outliers_sums_a_load_kept_are_updated_to_every_pairs_bit_for_bit(tmp_path):
    generator = np.random.default_rng(20261207)
    count = 3000
    longitude = np.round(generator.uniform(140.0, 150.0, count), 5)
    latitude = np.round(generator.uniform(-44.0, -38.0, count), 5)
    records = generator.integers(1, 30, count)
    kept = SiteSums(
        longitude, latitude, records.astype(np.float64), distance_sums(longitude, latitude, records)
    )
    # A month later: 25 sites gone, 40 new (one in Copenhagen), 60 with other counts, the rest as they were.
    keep = np.ones(count, dtype=bool)
    keep[generator.choice(count, 25, replace=False)] = False
    new_longitude = np.concatenate([longitude[keep], generator.uniform(140.0, 150.0, 39).round(5), [12.58]])
    new_latitude = np.concatenate([latitude[keep], generator.uniform(-44.0, -38.0, 39).round(5), [55.67]])
    new_records = np.concatenate([records[keep], generator.integers(1, 30, 40)])
    new_records[generator.choice(count - 25, 60, replace=False)] += 3
    every_pair = distance_sums(new_longitude, new_latitude, new_records.astype(np.float64))
    updated = updated_distance_sums(kept, new_longitude, new_latitude, new_records)
    assert updated is not None and np.array_equal(updated, every_pair)
    # Nothing changed: the kept sums as they are; most sites changed: every pair costs less.
    assert np.array_equal(updated_distance_sums(kept, longitude, latitude, records), kept.sums)
    assert updated_distance_sums(kept, longitude, latitude, records + 1) is None
    # Kept in a file for the next load; damaged, or of another kind of sites, it is not read.
    path = tmp_path / "sites.bin"
    write_site_sums(path, kept, thinned=False, cell_degrees=0.5)
    read = read_site_sums(path, thinned=False, cell_degrees=0.5)
    assert read is not None and all(
        np.array_equal(a, b)
        for a, b in zip(dataclasses.astuple(read), dataclasses.astuple(kept), strict=True)
    )
    assert read_site_sums(path, thinned=True, cell_degrees=0.5) is None
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    assert read_site_sums(path, thinned=False, cell_degrees=0.5) is None


def test_the_outliers_sums_start_from_the_kept_ones_unless_the_memo_is_not_trusted(tmp_path):
    generator = np.random.default_rng(7)
    longitude = np.round(generator.uniform(140.0, 150.0, 500), 5)
    latitude = np.round(generator.uniform(-44.0, -38.0, 500), 5)
    records = generator.integers(1, 9, 500)
    every_pair = distance_sums(longitude, latitude, records.astype(np.float64))
    memo = tmp_path / "sites.bin"
    assert np.array_equal(
        site_distance_sums(longitude, latitude, records, memo, thinned=False, cell_degrees=0.5), every_pair
    )
    kept = read_site_sums(memo, thinned=False, cell_degrees=0.5)
    assert kept is not None and np.array_equal(kept.sums, every_pair)
    # A memo that reads well but holds other sums (written by hand): a run that trusts it starts from it,
    # make repair (which trusts no memo) takes every pair and keeps the true sums again.
    write_site_sums(memo, dataclasses.replace(kept, sums=kept.sums + 1000), thinned=False, cell_degrees=0.5)
    trusted = site_distance_sums(longitude, latitude, records, memo, thinned=False, cell_degrees=0.5)
    assert np.array_equal(trusted, every_pair + 1000)
    repaired = site_distance_sums(
        longitude, latitude, records, memo, thinned=False, cell_degrees=0.5, trust_memo=False
    )
    assert np.array_equal(repaired, every_pair)
    kept_again = read_site_sums(memo, thinned=False, cell_degrees=0.5)
    assert kept_again is not None and np.array_equal(kept_again.sums, every_pair)


def test_the_kept_lines_are_read_only_for_the_raw_snapshot_and_kind_they_were_made_from(tmp_path):
    """A delta copies in only the lines the memo lacks: a memo of another snapshot, of the other kind of
    lines, or damaged, would name the wrong ones, and is not read."""
    digests = LineDigests()
    lines = [f"{key}\tPRESERVED_SPECIMEN\t{key % 7}".encode() for key in range(1000, 1100)]
    digests.add_lines(lines[:60])
    digests.add_lines(lines[60:])
    made = digests.lines("a" * 64, RECORDS_FILE_LINES)
    memo = tmp_path / "lines.bin"
    write_kept_lines(memo, made)
    kept = read_kept_lines(memo, source_sha256="a" * 64, kind=RECORDS_FILE_LINES)
    assert kept is not None
    assert kept.ids.tolist() == list(range(1000, 1100))
    assert np.array_equal(kept.digests, made.digests)
    assert read_kept_lines(memo, source_sha256="b" * 64, kind=RECORDS_FILE_LINES) is None
    assert read_kept_lines(memo, source_sha256="a" * 64, kind=SEARCH_RECORDS) is None
    damaged = bytearray(memo.read_bytes())
    damaged[-3] ^= 1
    memo.write_bytes(bytes(damaged))
    assert read_kept_lines(memo, source_sha256="a" * 64, kind=RECORDS_FILE_LINES) is None
    # A line edited, one gone, one new: the kept digests tell the edited and the new from the others.
    later = LineDigests()
    edited = [
        *lines[:5],
        lines[5].replace(b"PRESERVED", b"FOSSIL"),
        *lines[6:99],
        b"2000\tHUMAN_OBSERVATION\t0",
    ]
    unseen = KeptDigests(kept).unseen(later.add_lines(edited))
    assert [line for line, new in zip(edited, unseen.tolist(), strict=True) if new] == [edited[5], edited[-1]]
    assert kept.gone_ids(later.lines("c" * 64, RECORDS_FILE_LINES)).tolist() == [1099]

    # Lines with a gbifID twice are not kept (the memo of another file goes), and a header that is not an
    # object is a damaged memo.
    twice = LineDigests()
    twice.add_lines([*lines[:3], lines[1].replace(b"PRESERVED", b"FOSSIL")])
    assert not twice.lines("d" * 64, RECORDS_FILE_LINES).ids_unique()
    write_kept_lines(memo, twice.lines("d" * 64, RECORDS_FILE_LINES))
    assert not memo.exists()
    memo.write_bytes(b"0\n")
    assert read_kept_lines(memo, source_sha256="d" * 64, kind=RECORDS_FILE_LINES) is None


@pytest.mark.db
@pytest.mark.dagster
def test_a_species_with_more_points_than_the_exact_limit_is_thinned_to_cells(db, database_url, data_dir):
    with dg.instance_for_test() as instance:
        _materialize(instance, database_url, data_dir, config={"outliers_exact_up_to_points": 10})
    flags = _flags(db, species_by_slug(DEVIL).species_id)
    keys = probe_keys()
    # Central Tasmania's points share a few half-degree cells; GBIF's in Copenhagen is still far out.
    assert flags[keys["GBIF, 0.9 km"]]["flag_outliers"] is True
    assert not any(flags[key]["flag_outliers"] for key in range(FIRST_KEY, FIRST_KEY + BASE_RECORDS))


def _released_ids(data_dir) -> set[int]:
    text = (data_dir / "masked_release" / DEVIL / f"{DEVIL}.csv").read_text(encoding="utf-8")
    return {int(line.split(",", 1)[0]) for line in text.splitlines()[1:]}


@pytest.mark.db
@pytest.mark.dagster
def test_the_release_leaves_out_exactly_what_its_policy_names_and_says_so(db, database_url, data_dir):
    chain = [*QUALITY_CHAIN, masked_release]
    with dg.instance_for_test() as instance:

        def release(quality_config=None, policy=None):
            ops = {"occurrence_quality": {"config": quality_config or {}}}
            if policy:
                ops["masked_release"] = {"config": {"policy": policy}}
            result = dg.materialize(
                chain,
                instance=instance,
                partition_key=DEVIL,
                resources=resources(database_url, data_dir, "quality_probes"),
                run_config={"ops": ops},
            )
            return metadata(result, "masked_release")

        first = release()
        flags = _flags(db, species_by_slug(DEVIL).species_id)
        flagged = {key for key, row in flags.items() if row["first_flag"] is not None}
        assert flagged and _released_ids(data_dir) == set(flags) - flagged
        manifest = json.loads((data_dir / "masked_release" / DEVIL / "manifest.json").read_bytes())
        assert manifest["policy"]["excluded"] == len(flagged) == first["excluded"]
        assert sum(manifest["policy"]["excluded_by_first_reason"].values()) == len(flagged)
        assert manifest["policy"]["tests"]["uncertainty"] == {
            "version": 1,
            "limit_m": 10_000.0,
            "placeholders_m": [301.0, 999.0, 3036.0, 9999.0],
        }
        files = {path.name: sha256_file(path) for path in (data_dir / "masked_release" / DEVIL).iterdir()}
        # A threshold change that flags the same records: the flags reload, the release is not rebuilt.
        nudged = release({"uncertainty_limit_m": 10_000.2})
        assert (nudged["action"], nudged["reason"]) == ("skipped", "nothing changed")
        assert {p.name: sha256_file(p) for p in (data_dir / "masked_release" / DEVIL).iterdir()} == files
        # One that lets a record through: it is released, the manifest says the new limit.
        moved = release({"uncertainty_limit_m": 10_001.0})
        assert moved["action"] == "loaded" and moved["excluded"] == len(flagged) - 1
        assert probe_keys()["uncertainty over"] in _released_ids(data_dir)
        # keep_all: every record, nothing excluded.
        everything = release({"uncertainty_limit_m": 10_001.0}, policy="keep_all")
        assert everything["excluded"] == 0 and _released_ids(data_dir) == set(flags)
        # Back to the defaults: the first release again, byte for byte.
        release()
        assert {p.name: sha256_file(p) for p in (data_dir / "masked_release" / DEVIL).iterdir()} == files


@pytest.mark.db
@pytest.mark.dagster
def test_the_quality_report_counts_what_the_flags_hold_and_says_the_parameters_they_ran_with(
    db, database_url, data_dir
):
    chain = [*QUALITY_CHAIN, quality_report]
    with dg.instance_for_test() as instance:

        def run(config=None):
            result = dg.materialize(
                chain,
                instance=instance,
                partition_key=DEVIL,
                resources=resources(database_url, data_dir, "quality_probes"),
                run_config={"ops": {"occurrence_quality": {"config": config or {}}}},
            )
            return metadata(result, "quality_report")

        first = run()
        folder = data_dir / "exports" / "quality_report"
        flags = _flags(db, species_by_slug(DEVIL).species_id)
        with (folder / "quality_counts.csv").open(encoding="utf-8") as handle:
            counted = {row["test"]: row for row in csv.DictReader(handle)}
        assert first["rows"] == len(TESTS) == len(counted)
        for test in TESTS:
            assert int(counted[test.name]["flagged"]) == sum(r[test.column] is True for r in flags.values())
            assert int(counted[test.name]["first_reason"]) == sum(
                r["first_flag"] == test.name for r in flags.values()
            )
            assert counted[test.name]["enabled"] == ("false" if test.name == "urban" else "true")
        page = (folder / "quality_report.md").read_text(encoding="utf-8")
        assert "| uncertainty | 1 |" in page and "limit_m 10000.0" in page and "| urban | 1 |" in page
        files = {path.name: sha256_file(path) for path in folder.iterdir()}
        assert run()["action"] == "skipped"
        assert {path.name: sha256_file(path) for path in folder.iterdir()} == files
        # The same flags under a nudged threshold: the report states the parameters, so it says the new one.
        assert run({"uncertainty_limit_m": 10_000.2})["action"] == "loaded"
        assert "limit_m 10000.2" in (folder / "quality_report.md").read_text(encoding="utf-8")


@pytest.mark.db
@pytest.mark.dagster
def test_a_hand_edit_of_the_flags_is_planned_repaired_and_the_release_kept(db, database_url, data_dir):
    chain = [*QUALITY_CHAIN, masked_release]
    devil = species_by_slug(DEVIL)
    with dg.instance_for_test() as instance:

        def run():
            result = dg.materialize(
                chain, instance=instance, partition_key=DEVIL, resources=resources(database_url, data_dir)
            )
            return metadata(result, "occurrence_quality"), metadata(result, "masked_release")

        run()
        rows = rows_md5(db, "occurrence_quality")
        release = sha256_file(data_dir / "masked_release" / DEVIL / "manifest.json")
        db.execute(
            "UPDATE occurrence_quality SET flag_sea = true"
            " WHERE id = (SELECT min(id) FROM occurrence_quality)"
        )
        bound = resources(database_url, data_dir)
        planned = make_plan(db, bound["paths"], bound["geocoder"], [devil], masking_key_id=TEST_SEED_KEY.id)
        assert (
            planned.steps["occurrence_quality"][DEVIL].reason == "target edited outside the pipeline (UPDATE)"
        )
        # The repair gives back the rows the digest names: the release the plan keeps, the run keeps.
        assert planned.steps["masked_release"][DEVIL].action == "skip"
        quality, released = run()
        assert quality["reason"] == "target edited outside the pipeline (UPDATE)"
        assert released["action"] == "skipped" and rows_md5(db, "occurrence_quality") == rows
        assert sha256_file(data_dir / "masked_release" / DEVIL / "manifest.json") == release


def _csv_ids(path) -> list[int]:
    return [int(line.split(",", 1)[0]) for line in path.read_text(encoding="utf-8").splitlines()[1:]]


@pytest.mark.db
@pytest.mark.dagster
def test_the_sample_and_the_exports_apply_their_policy_and_say_so(db, database_url, data_dir):
    """By default the sample is over every record and the exports leave out what a test flagged; asked,
    the sample is drawn from the unflagged records (and the three engines agree on it)."""
    write_lab_delivery(data_dir, "A", "2026-11-02")
    devil = species_by_slug(DEVIL)
    exports = [
        occurrence_sample_summary,
        sample_engines_agree,
        sample_export,
        devil_snapshot,
        devil_snapshot_export,
    ]
    with dg.instance_for_test() as instance:

        def run(sample_policy=None, export_policy=None):
            sample = {"occurrence_sample": {"config": {"policy": sample_policy}}} if sample_policy else {}
            dg.materialize(
                [*QUALITY_CHAIN, occurrence_sample],
                instance=instance,
                partition_key=DEVIL,
                resources=resources(database_url, data_dir),
                run_config={"ops": sample},
            )
            ops = {}
            if export_policy:
                ops = {
                    name: {"config": {"policy": export_policy}}
                    for name in ("sample_export", "devil_snapshot_export")
                }
            result = dg.materialize(
                exports,
                instance=instance,
                resources=resources(database_url, data_dir),
                run_config={"ops": ops},
            )
            assert all(check.passed for check in result.get_asset_check_evaluations())
            return metadata(result, "sample_export"), metadata(result, "devil_snapshot_export")

        sample_meta, devil_meta = run()
        flagged = {key for key, row in _flags(db, devil.species_id).items() if row["first_flag"] is not None}
        sampled = {row[0] for row in db.execute("SELECT id FROM occurrence_sample")}
        snapshot = {row[0] for row in db.execute("SELECT id FROM devil_snapshot")}
        # The sample keeps its definition (over every record), so some of its records are flagged.
        assert len(sampled) == 100 and sampled & flagged and snapshot & flagged
        sample_folder, devil_folder = data_dir / "exports" / "sample", data_dir / "exports" / "devil_snapshot"
        assert _csv_ids(sample_folder / "sample.csv") == sorted(sampled - flagged)
        assert _csv_ids(devil_folder / "devil_snapshot.csv") == sorted(snapshot - flagged)
        for folder, meta, excluded in (
            (sample_folder, sample_meta, sampled & flagged),
            (devil_folder, devil_meta, snapshot & flagged),
        ):
            policy = json.loads((folder / "manifest.json").read_bytes())["policy"]
            assert policy["name"] == meta["policy"] == "drop_any_flagged"
            assert policy["excluded"] == meta["excluded"] == len(excluded)
            assert sum(policy["excluded_by_first_reason"].values()) == len(excluded)
            assert policy["tests"]["uncertainty"]["limit_m"] == 10_000.0
        files = {path.name: sha256_file(path) for path in sample_folder.iterdir()}

        # Asked, the sample is the first 100 by md5 among the unflagged records; the engines agree on it.
        run(sample_policy="drop_any_flagged")
        unflagged = db.execute(
            "SELECT id FROM occurrences WHERE species_id = %s ORDER BY md5(id::text), id", [devil.species_id]
        ).fetchall()
        expected = [row[0] for row in unflagged if row[0] not in flagged][:100]
        picked = db.execute("SELECT id FROM occurrence_sample ORDER BY pick").fetchall()
        assert [row[0] for row in picked] == expected
        assert json.loads((sample_folder / "manifest.json").read_bytes())["policy"]["excluded"] == 0

        # keep_all releases every record; back to the defaults, the first exports byte for byte.
        sample_meta, devil_meta = run(export_policy="keep_all")
        assert sample_meta["excluded"] == devil_meta["excluded"] == 0
        assert _csv_ids(devil_folder / "devil_snapshot.csv") == sorted(snapshot)
        run()
        assert {path.name: sha256_file(path) for path in sample_folder.iterdir()} == files
