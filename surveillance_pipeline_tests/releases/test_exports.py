"""Exports that are the same bytes: re-export, manifest, GeoParquet, and the course's ORDER BY exercise."""

import hashlib
import json

import dagster as dg
import geopandas as gpd
import pytest

from surveillance_pipeline.lab.deliveries import write_lab_delivery
from surveillance_pipeline.releases.assets import devil_snapshot_export, sample_export
from surveillance_pipeline.releases.build import build_devil_snapshot_export
from surveillance_pipeline.samples.assets import occurrence_sample_summary
from surveillance_pipeline.snapshots.assets import devil_snapshot
from surveillance_pipeline_tests.support.pipeline import SAMPLED, keep_all, materialize, resources

pytestmark = pytest.mark.db
PLATYPUS = "ornithorhynchus-anatinus"


@pytest.fixture()
def instance():
    with dg.instance_for_test() as instance:
        yield instance


def _files(folder):
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


def _export_all(instance, database_url, data_dir):
    result = dg.materialize(
        [occurrence_sample_summary, sample_export, devil_snapshot, devil_snapshot_export],
        instance=instance,
        resources=resources(database_url, data_dir),
        run_config=keep_all("sample_export", "devil_snapshot_export"),
    )
    return {
        node: {k: v.value for k, v in result.asset_materializations_for_node(node)[0].metadata.items()}
        for node in ("sample_export", "devil_snapshot_export")
    }


@pytest.fixture()
def loaded(db, database_url, data_dir, instance):
    for slug in ("sarcophilus-harrisii", PLATYPUS):
        materialize(instance, database_url, data_dir, slug, assets=SAMPLED)
    write_lab_delivery(data_dir, "A", "2026-11-02")


def test_exports_are_byte_identical_when_rebuilt_and_skip_when_current(
    loaded, database_url, data_dir, instance
):
    first = _export_all(instance, database_url, data_dir)
    assert {meta["action"] for meta in first.values()} == {"loaded"}
    sample_dir, devil_dir = data_dir / "exports" / "sample", data_dir / "exports" / "devil_snapshot"
    sample_files, devil_files = _files(sample_dir), _files(devil_dir)
    assert sorted(sample_files) == ["manifest.json", "sample.csv", "sample.parquet"]
    mtimes = {p: p.stat().st_mtime_ns for p in sample_dir.iterdir()}

    again = _export_all(instance, database_url, data_dir)
    assert {meta["action"] for meta in again.values()} == {"skipped"}
    assert {p: p.stat().st_mtime_ns for p in sample_dir.iterdir()} == mtimes, "a skip rewrites nothing"

    for folder in (sample_dir, devil_dir):
        for path in folder.iterdir():
            path.unlink()
    rebuilt = _export_all(instance, database_url, data_dir)
    assert {meta["reason"] for meta in rebuilt.values()} == {"output was missing or edited"}
    assert _files(sample_dir) == sample_files
    assert _files(devil_dir) == devil_files

    manifest = json.loads(sample_files["manifest.json"])
    assert manifest["job_key"] == first["sample_export"]["job_key"]
    assert manifest["order"] == "ORDER BY id"
    for name in ("sample.csv", "sample.parquet"):
        assert manifest["files"][name]["sha256"] == hashlib.sha256(sample_files[name]).hexdigest()
        assert manifest["files"][name]["rows"] == 200


def test_sample_csv_and_geoparquet_hold_the_sample_in_id_order(loaded, db, database_url, data_dir, instance):
    _export_all(instance, database_url, data_dir)
    folder = data_dir / "exports" / "sample"
    lines = (folder / "sample.csv").read_bytes().split(b"\n")
    assert lines[0] == b"id,species,pick,year,longitude,latitude,license" and lines[-1] == b""
    ids = [int(line.split(b",")[0]) for line in lines[1:-1]]
    assert (
        ids == sorted(ids) == [row[0] for row in db.execute("SELECT id FROM occurrence_sample ORDER BY id")]
    )
    frame = gpd.read_parquet(folder / "sample.parquet")
    assert frame.crs.to_epsg() == 4326
    assert list(frame["id"]) == ids
    with_point = frame[frame.geometry.notna()]
    assert (with_point.geometry.x.round(6) == with_point["longitude"].round(6)).all()


def test_an_update_that_moves_a_row_changes_an_unordered_export_but_not_ours(
    loaded, db, database_url, data_dir, instance
):
    """The course's exercise: UPDATE ... SET year = year on the lowest id."""
    dg.materialize([devil_snapshot], instance=instance, resources=resources(database_url, data_dir))

    def unordered():
        rows = db.execute("SELECT id, year, license, pick FROM devil_snapshot").fetchall()
        return hashlib.sha256(repr(rows).encode()).hexdigest()

    ours_before = [f.data for f in build_devil_snapshot_export(db, "keep_all").files]
    unordered_before = unordered()
    # Content unchanged, so written as a refresh writes (the watch would rightly note any other UPDATE).
    with db.transaction():
        db.execute("SELECT set_config('surveillance.refreshing', 'on', true)")
        db.execute("UPDATE devil_snapshot SET year = year WHERE id = (SELECT min(id) FROM devil_snapshot)")
    assert unordered() != unordered_before, "the updated row moved to the end of the heap"
    assert [f.data for f in build_devil_snapshot_export(db, "keep_all").files] == ours_before
