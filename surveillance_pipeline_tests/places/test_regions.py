"""region_assignment: point in polygon, else nearest; ties by distance then region id, never by order."""

from __future__ import annotations

import json
import random

import dagster as dg
import pytest

from surveillance_pipeline.core.fingerprints import EDITED_OUTSIDE, partition_fingerprint
from surveillance_pipeline.core.keys import sha256_file
from surveillance_pipeline.core.refresh import ensure_state_tables
from surveillance_pipeline.gbif.registry import species_by_slug
from surveillance_pipeline.lab.districts import lab_districts_geojson, lab_layer_path
from surveillance_pipeline.occurrences import load
from surveillance_pipeline.occurrences.assets import gbif_derived, gbif_raw, occurrences
from surveillance_pipeline.places.assets import geocoded_localities, region_assignment
from surveillance_pipeline.places.regions import (
    REGION_ASSIGNMENT,
    RegionLayer,
    assign_points,
    held_assignment_inputs,
    likely_assignment_parts,
    load_regions,
    refresh_region_assignment,
    region_counts,
)
from surveillance_pipeline_tests.support.pipeline import DEVIL, metadata, resources

pytestmark = [pytest.mark.db]
NATURAL_EARTH = "regions/naturalearth-admin1-50m/ne_50m_admin_1_states_provinces.json"
HOBART = (147.3272, -42.8821)
CRADLE_MOUNTAIN = (145.9508, -41.6835)


def _square(region_id: str, west: float, south: float, east: float, north: float) -> dict:
    ring = [[west, south], [east, south], [east, north], [west, north], [west, south]]
    return {
        "type": "Feature",
        "properties": {"region_id": region_id, "name": f"region {region_id}"},
        "geometry": {"type": "Polygon", "coordinates": [ring]},
    }


def _layer(tmp_path, features: list[dict], name: str = "layer.geojson") -> RegionLayer:
    path = tmp_path / name
    path.write_text(json.dumps({"type": "FeatureCollection", "features": features}))
    return RegionLayer(path)


def _assign(db, layer: RegionLayer, points):
    ensure_state_tables(db)
    load_regions(db, layer, run_id="test")
    return {row[0]: row[2:] for row in assign_points(db, points)}


def test_the_committed_lab_layer_is_what_its_script_generates():
    assert lab_layer_path().read_bytes() == lab_districts_geojson()


@pytest.mark.parametrize("listed", ["higher id first", "lower id first"])
def test_equidistant_regions_go_to_the_lower_region_id(db, tmp_path, listed):
    # Two squares 1 degree apart on the equator: (1.5, 0) is exactly between them.
    features = [_square("R2", 0.0, -1.0, 1.0, 1.0), _square("R1", 2.0, -1.0, 3.0, 1.0)]
    if listed == "lower id first":
        features.reverse()
    assigned = _assign(db, _layer(tmp_path, features), [(1, 1.5, 0.0), (2, 1.2, 0.0), (3, 0.5, 0.5)])
    region, method, distance = assigned[1]
    assert (region, method) == ("R1", "nearest")
    assert distance == pytest.approx(55_660, rel=0.01)  # half a degree of the equator
    # Distance decides before the id: nearer to R2 than to R1.
    assert assigned[2][:2] == ("R2", "nearest")
    assert assigned[3] == ("R2", "within", 0.0)


def test_a_point_on_a_shared_border_goes_to_the_lower_region_id(db, tmp_path):
    features = [
        _square("B", 0.0, 0.0, 1.0, 1.0),
        _square("A", 1.0, 0.0, 2.0, 1.0),
        _square("C", 0.0, 1.0, 2.0, 2.0),
    ]
    assigned = _assign(db, _layer(tmp_path, features), [(1, 1.0, 0.5), (2, 1.0, 1.0), (3, 0.5, 1.0)])
    assert assigned == {1: ("A", "within", 0.0), 2: ("A", "within", 0.0), 3: ("B", "within", 0.0)}


def test_shuffled_points_and_features_give_identical_rows(db, tmp_path):
    features = json.loads(lab_districts_geojson())["features"]
    rng = random.Random(6)  # seeded: the test is deterministic too
    points = [(i, 143.5 + rng.random() * 5.5, -44.0 + rng.random() * 5.0) for i in range(1, 401)]
    ordered = assign_points_rows(db, _layer(tmp_path, features, "a.geojson"), points)
    shuffled_features = features[:]
    rng.shuffle(shuffled_features)
    shuffled_points = points[:]
    rng.shuffle(shuffled_points)
    shuffled = assign_points_rows(db, _layer(tmp_path, shuffled_features, "b.geojson"), shuffled_points)
    assert shuffled == ordered
    methods = {row[3] for row in ordered}
    assert methods == {"within", "nearest"}, "the lab layer leaves sea between its districts"


def assign_points_rows(db, layer, points):
    ensure_state_tables(db)
    load_regions(db, layer, run_id="test")
    return assign_points(db, points)


def test_a_geopackage_layer_loads_the_same_regions_as_its_geojson(db, tmp_path):
    import geopandas

    geopackage = tmp_path / "districts.gpkg"
    geopandas.read_file(lab_layer_path()).to_file(geopackage, driver="GPKG")
    ensure_state_tables(db)
    rows = []
    for path in (lab_layer_path(), geopackage):
        load_regions(db, RegionLayer(path), run_id="test")
        rows.append(
            db.execute("SELECT region_id, name, ST_AsText(geom) FROM regions ORDER BY region_id").fetchall()
        )
    assert rows[0] == rows[1] and len(rows[0]) == 10


def test_natural_earth_puts_a_tasmanian_point_in_tasmania(db, shared_data):
    layer = RegionLayer(shared_data / NATURAL_EARTH, id_property="iso_3166_2", name_property="name")
    ensure_state_tables(db)
    outcome = load_regions(db, layer, run_id="test")
    assert outcome.rows == 100
    # Goiás has a self-intersecting ring: repaired, not dropped.
    assert db.execute("SELECT bool_and(ST_IsValid(geom)) FROM regions").fetchone() == (True,)
    points = [(1, *CRADLE_MOUNTAIN), (2, 146.5, -40.95), (3, *HOBART)]
    assigned = {row[0]: row[2:] for row in assign_points(db, points)}
    assert assigned[1] == ("AU-TAS", "within", 0.0)
    region, method, distance = assigned[2]  # Bass Strait, off the north coast
    assert (region, method) == ("AU-TAS", "nearest") and 0 < distance < 30_000
    # At 1:50m the coastline cuts Hobart's harbour shore off: still Tasmania, by a few hundred metres.
    region, method, distance = assigned[3]
    assert (region, method) == ("AU-TAS", "nearest") and 0 < distance < 1_000


SPECIES_CHAIN = [gbif_raw, gbif_derived, occurrences, geocoded_localities, region_assignment]


def _materialize(instance, database_url, data_dir, config=None):
    run_config = {"ops": {"region_assignment": {"config": config}}} if config else {}
    return dg.materialize(
        SPECIES_CHAIN,
        instance=instance,
        partition_key=DEVIL,
        resources=resources(database_url, data_dir),
        run_config=run_config,
    )


def _assignment_md5(db) -> str:
    return db.execute(
        "SELECT md5(string_agg(concat_ws('|', id, species_id, point_source, region_id, method, distance_m),"
        " E'\\n' ORDER BY id)) FROM region_assignment"
    ).fetchone()[0]


@pytest.mark.dagster
def _counted(db) -> list[dict]:
    """region_counts of the devil, read now, as the UI's table shows it."""
    return [vars(count) for count in region_counts(db, species_by_slug(DEVIL))]


def test_region_assignment_loads_skips_and_reloads_for_another_layer(db, database_url, data_dir, shared_data):
    with dg.instance_for_test() as instance:
        first = metadata(_materialize(instance, database_url, data_dir), "region_assignment")
        assert (first["action"], first["reason"]) == ("loaded", "first load")
        assert first["layer_sha256"] == sha256_file(lab_layer_path())
        expected = db.execute(
            "SELECT (SELECT count(*) FROM occurrences WHERE geom IS NOT NULL)"
            " + (SELECT count(*) FROM geocoded_localities WHERE status = 'found')"
        ).fetchone()[0]
        assert first["rows"] == expected
        sources = dict(
            db.execute("SELECT point_source, count(*) FROM region_assignment GROUP BY 1").fetchall()
        )
        assert set(sources) == {"record", "geocoded"}
        # Hobart's geocoded records are in the South district.
        assert db.execute(
            "SELECT DISTINCT a.region_id, a.method FROM region_assignment a"
            " JOIN geocoded_localities g USING (id) WHERE g.longitude = %s AND g.latitude = %s",
            list(HOBART),
        ).fetchall() == [("TAS-S", "within")]
        before = _assignment_md5(db)

        again = metadata(_materialize(instance, database_url, data_dir), "region_assignment")
        assert (again["action"], again["reason"]) == ("skipped", "nothing changed")
        assert _assignment_md5(db) == before
        # The step's guess of the key, from its inputs' keys read once without a lock, is the key: the
        # skip was the one statement (refresh_partition's likely_parts).
        lab_layer = RegionLayer.configured("", "region_id", "name", default=str(lab_layer_path()))
        guessed = likely_assignment_parts(held_assignment_inputs(db), species_by_slug(DEVIL), lab_layer)
        assert guessed is not None and guessed.key == again["job_key"]
        # The skip shows the counts its load kept under the job key, without counting the rows again:
        # counts planted in the memo under the same key are what it shows.
        memo_path = data_dir / "memos" / "region_assignment" / f"{DEVIL}.json"
        memo = json.loads(memo_path.read_text())
        assert memo["job_key"] == again["job_key"] == first["job_key"]
        assert again["regions"] == first["regions"] == _counted(db)
        planted = [{**count, "within": count["within"] + 1000} for count in first["regions"]]
        memo["counts"] = [[c["region_id"], c["name"], c["within"], c["nearest"]] for c in planted]
        memo_path.write_text(json.dumps(memo))
        shown = metadata(_materialize(instance, database_url, data_dir), "region_assignment")
        assert shown["action"] == "skipped" and shown["regions"] == planted

        # A hand edit: the next run repairs the partition and counts its rows again, never trusting a memo.
        db.execute("UPDATE region_assignment SET region_id = 'TAS-N' WHERE region_id = 'TAS-S'")
        db.commit()
        assert _counted(db) != first["regions"]
        repaired = metadata(_materialize(instance, database_url, data_dir), "region_assignment")
        assert repaired["action"] == "loaded" and repaired["reason"].startswith(EDITED_OUTSIDE)
        assert repaired["regions"] == first["regions"] == _counted(db)
        assert _assignment_md5(db) == before
        assert json.loads(memo_path.read_text())["counts"] == [list(c.values()) for c in first["regions"]]

        natural_earth = {"layer": str(shared_data / NATURAL_EARTH), "id_property": "iso_3166_2"}
        other = metadata(_materialize(instance, database_url, data_dir, natural_earth), "region_assignment")
        assert (other["action"], other["reason"]) == ("loaded", "input and config changed")
        regions = dict(db.execute("SELECT region_id, count(*) FROM region_assignment GROUP BY 1").fetchall())
        # The devil's points are on Tasmania's land, but for the few the lab puts on known error points
        # (Canberra, a centroid, GBIF in Copenhagen, near 0,0, in New Zealand): each goes to its region, or
        # to the nearest of the layer's four countries' regions.
        assert regions["AU-TAS"] > 0.98 * sum(regions.values())
        outside_tasmania = db.execute(
            "SELECT count(*) FILTER (WHERE o.longitude BETWEEN 144.5 AND 148.5"
            " AND o.latitude BETWEEN -43.6 AND -39.6), count(*)"
            " FROM region_assignment AS r JOIN occurrences AS o USING (id, species_id)"
            " WHERE r.region_id <> 'AU-TAS' AND r.point_source = 'record'"
        ).fetchone()
        # Of those not given Tasmania, at most a few (a point offshore, nearer Victoria) lie in the lab's box.
        assert outside_tasmania[1] > 0 and outside_tasmania[0] <= 0.01 * regions["AU-TAS"]
        assert db.execute(
            "SELECT DISTINCT region_id, method FROM region_assignment WHERE point_source = 'geocoded'"
            " AND id IN (SELECT id FROM geocoded_localities WHERE longitude = %s AND latitude = %s)",
            list(CRADLE_MOUNTAIN),
        ).fetchall() == [("AU-TAS", "within")]


def _assignment_rows_md5(db) -> str:
    """Every column of the devil's assignments (the point as EWKT), in id order."""
    return db.execute(
        "SELECT md5(string_agg(concat_ws('|', id, species_id, point_source, ST_AsEWKT(geom), region_id,"
        " method, distance_m), E'\\n' ORDER BY id)) FROM region_assignment WHERE species_id = %s",
        [species_by_slug(DEVIL).species_id],
    ).fetchone()[0]


def _assignment_state(db):
    return db.execute(
        "SELECT job_key, rows, digest FROM target_state"
        " WHERE target = 'region_assignment' AND partition_key = %s",
        [DEVIL],
    ).fetchone()


def test_moved_points_alone_are_reassigned_and_the_partition_ends_as_a_full_reload(
    db, database_url, data_dir
):
    """A month later a few records moved (some into another district), went or came: only those are
    assigned again, and the partition, its fingerprint and its key are what a full reload gives."""
    devil = species_by_slug(DEVIL)
    lab_layer = RegionLayer.configured("", "region_id", "name", default=str(lab_layer_path()))
    with dg.instance_for_test() as instance:
        _materialize(instance, database_url, data_dir)
    assigned = dict(
        db.execute(
            "SELECT id, region_id FROM region_assignment WHERE point_source = 'record' ORDER BY id"
        ).fetchall()
    )
    header, *lines = (data_dir / "derived" / f"{DEVIL}.csv").read_text().splitlines()
    assert header == "id,year,longitude,latitude,license"
    rows = {int(line.split(",")[0]): line.split(",") for line in lines}
    with_point = [record for record in sorted(assigned) if record in rows]
    moved, gone = with_point[10:16], with_point[40:43]
    later = dict(rows)
    for record in moved:
        # Half a degree north: from the South district into the North, or farther within the North.
        later[record] = [*rows[record][:3], f"{float(rows[record][3]) + 0.5:.4f}", rows[record][4]]
    for record in gone:
        del later[record]
    added = [max(rows) + n for n in (1, 2, 3, 4)]
    for n, record in enumerate(added):
        later[record] = [str(record), "2020", f"{146.0 + n / 10:.4f}", "-42.0000", rows[with_point[0]][4]]
    derived = ("\n".join([header, *(",".join(later[r]) for r in sorted(later))]) + "\n").encode()
    loaded = load.load_occurrences(
        db, species=devil, derived=derived, rules=load.OccurrenceRules(), run_id="r1"
    )
    assert loaded.action == "loaded"
    before = dict(db.execute("SELECT id, xmin::text FROM region_assignment").fetchall())

    outcome = refresh_region_assignment(db, species=devil, layer=lab_layer, run_id="r1")
    assert (outcome.action, outcome.reason) == ("loaded", "input changed")
    assert outcome.changes is not None and outcome.changes.applied
    counts = (outcome.changes.added, outcome.changes.changed, outcome.changes.removed)
    assert counts == (len(added), len(moved), len(gone))
    after = dict(db.execute("SELECT id, xmin::text FROM region_assignment").fetchall())
    assert {record for record in after if after[record] != before.get(record)} == {*moved, *added}
    assert set(before) - set(after) == set(gone)
    # Some moved records changed district.
    moved_to = dict(
        db.execute("SELECT id, region_id FROM region_assignment WHERE id = ANY(%s)", [moved]).fetchall()
    )
    assert any(moved_to[record] != assigned[record] for record in moved)
    by_delta = (_assignment_rows_md5(db), _assignment_state(db))
    found = partition_fingerprint(db, REGION_ASSIGNMENT, str(devil.species_id))
    assert by_delta[1][1:] == (found.rows, found.digest)  # the fingerprint carried forward is the rows' own

    db.execute("DELETE FROM target_state WHERE target = 'region_assignment' AND partition_key = %s", [DEVIL])
    reloaded = refresh_region_assignment(db, species=devil, layer=lab_layer, run_id="r2")
    assert (reloaded.action, reloaded.changes) == ("loaded", None)
    assert (_assignment_rows_md5(db), _assignment_state(db)) == by_delta
    assert db.execute("SELECT count(*) FROM target_edits").fetchone() == (0,)
