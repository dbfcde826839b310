"""masked_release: donut geomasking from a keyed seed, skipped on an equal key, replayed byte for byte by the
key's holder and by no one else."""

from __future__ import annotations

import csv
import hashlib
import hmac
import json
import os
import random

import dagster as dg
import numpy as np
import psycopg
import pytest
from pyproj import Geod

from surveillance_pipeline.core.keys import canonical_json, sha256_file, sha256_hex
from surveillance_pipeline.core.partition_files import file_stamp
from surveillance_pipeline.core.seeds import SeedKey, logical_run_id, stage_generator
from surveillance_pipeline.core.statistics import StatisticsBeforeUse
from surveillance_pipeline.definitions import assemble
from surveillance_pipeline.gbif.registry import species_by_slug
from surveillance_pipeline.orchestration.resources import Warehouse
from surveillance_pipeline.quality.assets import occurrence_quality
from surveillance_pipeline.quality.flags import content_version
from surveillance_pipeline.releases.assets import masked_release
from surveillance_pipeline.releases.exports import MANIFEST
from surveillance_pipeline.releases.masking import (
    DISPLACEMENT,
    STAGE,
    DonutDraws,
    MaskingRules,
    build_masked_release,
    donut_mask,
    held_release_inputs,
    masked_rows,
)
from surveillance_pipeline.releases.replay import NotReplayable, replay_masked_release
from surveillance_pipeline.releases.replay import main as replay_main
from surveillance_pipeline_tests.support.pipeline import (
    DEVIL,
    SPINE,
    TEST_MASKING_KEY,
    TEST_SEED_KEY,
    materialize,
    metadata,
    resources,
)

RELEASE = [*SPINE, occurrence_quality, masked_release]


@pytest.mark.parametrize(
    ("partition", "input_key", "stage"),
    [("sarcophilus-harrisii", "a" * 64, "masked_release"), ("x", "", "other-stage"), ("é", "k", "s")],
)
def test_the_seed_is_the_first_8_bytes_of_the_keys_hmac_of_logical_run_and_stage(partition, input_key, stage):
    logical = logical_run_id(partition, input_key)
    assert logical == f"{partition}/{input_key}"
    digest = hmac.new(TEST_MASKING_KEY.encode(), f"{logical}|{stage}".encode(), hashlib.sha256).digest()
    assert TEST_SEED_KEY.seed(logical, stage) == int.from_bytes(digest[:8], "big")


def test_seeds_differ_by_key_stage_and_input_the_id_names_the_key_and_generators_are_pcg64():
    logical = logical_run_id(DEVIL, "key-1")
    seed = TEST_SEED_KEY.seed(logical, "masked_release")
    assert seed != TEST_SEED_KEY.seed(logical, "other")
    assert seed != TEST_SEED_KEY.seed(logical_run_id(DEVIL, "key-2"), "masked_release")
    other_key = SeedKey("another key")
    assert seed != other_key.seed(logical, "masked_release") and other_key.id != TEST_SEED_KEY.id
    digest = hmac.new(TEST_MASKING_KEY.encode(), b"surveillance_pipeline key id", hashlib.sha256).hexdigest()
    assert TEST_SEED_KEY.id == digest[:16]
    assert TEST_MASKING_KEY not in repr(TEST_SEED_KEY)
    with pytest.raises(ValueError, match="RELEASE_MASKING_KEY is empty"):
        SeedKey("", "RELEASE_MASKING_KEY")
    generator = stage_generator(12345)
    assert isinstance(generator.bit_generator, np.random.PCG64)
    assert generator.random(3).tolist() == np.random.Generator(np.random.PCG64(12345)).random(3).tolist()


# EPSG:3577 held the donut only near Australia: in Texas points moved 95 m to 1,749 m. Geodesic distance is
# the yardstick here, so the test holds the masking to the distance a reader of the release would measure.
REGIONS = {
    "tasmania": (147.0, -42.0),
    "texas": (-97.0, 31.0),
    "equator": (-60.0, 0.2),
    "high_latitude": (25.0, 70.0),
    "antimeridian": (179.9995, -17.8),
}
WGS84 = Geod(ellps="WGS84")
# 6-decimal rounding of degrees moves a point by at most about 0.08 m.
ROUNDING_M = 0.2


@pytest.mark.parametrize("region", sorted(REGIONS))
@pytest.mark.parametrize(("min_m", "max_m"), [(100.0, 1000.0), (0.0, 50.0), (2000.0, 5000.0)])
def test_every_point_moves_between_min_and_max_geodesic_metres_anywhere(region, min_m, max_m):
    centre_lon, centre_lat = REGIONS[region]
    scatter = np.random.Generator(np.random.PCG64(1))
    lon = centre_lon + scatter.uniform(-0.0004, 0.0004, 500)
    lat = centre_lat + scatter.uniform(-0.5, 0.5, 500)
    masked_lon, masked_lat = donut_mask(lon, lat, MaskingRules(min_m=min_m, max_m=max_m), seed=7)
    _, _, distances = WGS84.inv(lon, lat, masked_lon, masked_lat)
    distances = np.asarray(distances)
    assert distances.min() >= min_m - ROUNDING_M, (region, distances.min())
    assert distances.max() <= max_m + ROUNDING_M, (region, distances.max())
    assert np.isfinite(masked_lon).all() and (np.abs(masked_lon) <= 180).all()


def test_the_same_seed_gives_the_same_points_and_missing_coordinates_stay_missing():
    lon = np.array([147.3, -97.1, np.nan, -60.0, 25.0, 146.8])
    lat = np.array([-42.9, 31.2, np.nan, 0.1, 70.0, np.nan])
    rules = MaskingRules()
    masked_lon, masked_lat = donut_mask(lon, lat, rules, seed=7)
    assert np.isnan(masked_lon[[2, 5]]).all() and np.isnan(masked_lat[[2, 5]]).all()
    assert np.isfinite(masked_lon[[0, 1, 3, 4]]).all()
    again = donut_mask(lon.copy(), lat.copy(), rules, seed=7)
    assert np.array_equal(again[0], masked_lon, equal_nan=True)
    assert np.array_equal(again[1], masked_lat, equal_nan=True)
    assert np.array_equal(lon, [147.3, -97.1, np.nan, -60.0, 25.0, 146.8], equal_nan=True), "input untouched"
    other = donut_mask(lon, lat, rules, seed=8)
    assert not np.array_equal(other[0], masked_lon, equal_nan=True)


def test_no_projection_enters_the_job_key_config():
    # Distances are geodesic, so a CRS would key releases apart that hold the same points.
    assert MaskingRules().as_config() == {"min_m": 100.0, "max_m": 1000.0, "policy": "drop_any_flagged"}


def test_masked_rows_do_not_depend_on_the_order_rows_arrive_in():
    rows = [(i, "s", 2000, 147.0 + i / 1000, -42.0 - i / 1000, "CC0 1.0") for i in range(1, 200)]
    shuffled = rows[:]
    random.Random(3).shuffle(shuffled)
    rules = MaskingRules()
    assert masked_rows(shuffled, rules, 99) == masked_rows(rows, rules, 99)


@pytest.mark.parametrize(("min_m", "max_m"), [(1000, 100), (-1, 10), (5, 5)])
def test_a_donut_without_a_hole_smaller_than_its_rim_is_refused(min_m, max_m):
    with pytest.raises(ValueError, match="min_m < max_m"):
        MaskingRules(min_m=min_m, max_m=max_m).as_config()


def _folder_hashes(folder):
    return {p.name: sha256_file(p) for p in sorted(folder.iterdir())}


def _release_provenance(db, action):
    return db.execute(
        "SELECT id, detail FROM provenance WHERE asset = %s AND partition_key = %s AND action = %s "
        "ORDER BY id DESC LIMIT 1",
        [STAGE, DEVIL, action],
    ).fetchone()


def _release_input(db) -> str:
    """The input of the devil's release: what occurrences holds and, under the default policy, the content
    of the flags it applies."""
    occurrences_key = db.execute(
        "SELECT job_key FROM target_state WHERE target = 'occurrences' AND partition_key = %s", [DEVIL]
    ).fetchone()[0]
    quality = db.execute(
        "SELECT rows, digest FROM target_state WHERE target = 'occurrence_quality' AND partition_key = %s",
        [DEVIL],
    ).fetchone()
    return sha256_hex(
        canonical_json(
            {"occurrences": occurrences_key, "occurrence_quality": content_version(*quality)}
        ).encode()
    )


def _assert_the_key_is_named_and_the_seed_kept_nowhere(folder, manifest, detail, shown, release_input):
    """The key's id in the manifest, provenance and metadata; never the seed (with it, anyone could move the
    points back) nor the key."""
    key_id = TEST_SEED_KEY.id
    assert (
        detail["masking_key_id"] == shown["masking_key_id"] == manifest["masking"]["masking_key_id"] == key_id
    )
    logical = logical_run_id(DEVIL, release_input)
    assert detail["logical_run_id"] == manifest["masking"]["logical_run_id"] == logical
    seed = str(TEST_SEED_KEY.seed(logical, STAGE)).encode()
    published = [path.read_bytes() for path in sorted(folder.iterdir())]
    recorded = [json.dumps(detail).encode(), json.dumps({k: str(v) for k, v in shown.items()}).encode()]
    assert not [text for text in published + recorded if seed in text or TEST_MASKING_KEY.encode() in text]


def test_masked_release_skips_an_equal_key_names_its_key_not_its_seed_and_replays_byte_for_byte(
    db, database_url, postgres_instance, data_dir, tmp_path, monkeypatch
):
    first = metadata(materialize(postgres_instance, database_url, data_dir, assets=RELEASE), STAGE)
    folder = data_dir / "masked_release" / DEVIL
    assert first["action"] == "loaded"
    assert sorted(p.name for p in folder.iterdir()) == sorted([f"{DEVIL}.csv", f"{DEVIL}.parquet", MANIFEST])
    before = _folder_hashes(folder)
    inode = (folder / f"{DEVIL}.csv").stat().st_ino
    manifest = json.loads((folder / MANIFEST).read_bytes())
    provenance_id, detail = _release_provenance(db, "loaded")
    release_input = _release_input(db)
    assert manifest["job_key_parts"]["input"] == release_input
    _assert_the_key_is_named_and_the_seed_kept_nowhere(folder, manifest, detail, first, release_input)
    key_id = TEST_SEED_KEY.id
    assert detail["manifest_sha256"] == first["manifest_sha256"] == sha256_file(folder / MANIFEST)
    # No crs: the donut is geodesic (MASKING_VERSION 2), so no projection shapes the rows; the key's id does.
    assert manifest["job_key_parts"]["config"] == {
        "min_m": 100.0,
        "max_m": 1000.0,
        "policy": "drop_any_flagged",
        "masking_key_id": key_id,
    }
    assert manifest["masking"]["displacement"] == DISPLACEMENT

    # A staging folder a killed run left: deleted at the next start, even by a run that skips.
    stale = folder.with_name(f"{DEVIL}.staging")
    stale.mkdir()
    (stale / f"{DEVIL}.csv").write_text("id\n1\n")
    second = metadata(materialize(postgres_instance, database_url, data_dir, assets=RELEASE), STAGE)
    assert (second["action"], second["reason"]) == ("skipped", "nothing changed")
    assert not stale.exists()
    assert _folder_hashes(folder) == before
    assert (folder / f"{DEVIL}.csv").stat().st_ino == inode, "an equal key rewrites no file"

    # Replay from the provenance row (the skipped row names the same release), by the key's holder only.
    replay = replay_masked_release(db, provenance_id, tmp_path / "scratch", TEST_SEED_KEY)
    assert replay.equal and replay.masking_key_id == key_id
    assert _folder_hashes(tmp_path / "scratch") == before
    with pytest.raises(NotReplayable, match=f"masked under the key with id {key_id}"):
        replay_masked_release(db, provenance_id, tmp_path / "other", SeedKey("another key"))
    skipped_id, _ = _release_provenance(db, "skipped")
    monkeypatch.setenv("SURVEILLANCE_DATABASE_URL", database_url)
    monkeypatch.delenv("RELEASE_MASKING_KEY", raising=False)
    assert replay_main(["--provenance-id", str(skipped_id), "--into", str(tmp_path / "keyless")]) == 2
    monkeypatch.setenv("RELEASE_MASKING_KEY", TEST_MASKING_KEY)
    assert replay_main(["--provenance-id", str(skipped_id), "--into", str(tmp_path / "cli")]) == 0

    defs = assemble(resources(database_url, data_dir))
    job = defs.resolve_job_def("replay_masked_release")
    run_config = {"ops": {"replay_masked_release_op": {"config": {"provenance_id": provenance_id}}}}
    result = job.execute_in_process(run_config=run_config, instance=postgres_instance)
    assert result.success
    assert result.output_for_node("replay_masked_release_op") == detail["manifest_sha256"]

    # A recorded sha256 the release does not reproduce fails the command and the job.
    db.execute(
        "UPDATE provenance SET detail = jsonb_set(detail, '{manifest_sha256}', '\"0\"') WHERE id = %s",
        [provenance_id],
    )
    assert replay_main(["--provenance-id", str(provenance_id), "--into", str(tmp_path / "bad")]) == 1
    failed = job.execute_in_process(run_config=run_config, instance=postgres_instance, raise_on_error=False)
    assert not failed.success
    assert replay_main(["--provenance-id", "999999"]) == 2


def _moved_back(
    lon: np.ndarray, lat: np.ndarray, radius: np.ndarray, azimuth: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Each masked point moved back by its draw: the point whose move by (azimuth, radius) lands on it."""
    back_lon, back_lat, _ = WGS84.fwd(lon, lat, azimuth + 180.0, radius)
    for _ in range(4):
        landed_lon, landed_lat, _ = WGS84.fwd(back_lon, back_lat, azimuth, radius)
        back_lon, back_lat = back_lon + (lon - landed_lon), back_lat + (lat - landed_lat)
    return back_lon, back_lat


def test_a_release_is_undone_by_its_keyed_seed_and_not_by_what_it_publishes(
    db, database_url, postgres_instance, data_dir
):
    """The released rows are in id order and the draws follow it: whoever has the seed moves every point
    back to its true place. So the seed is keyed: from what a release publishes (its rows, and its
    manifest's logical run, from which masking version 2 derived the seed with sha256, and printed it) none
    comes back."""
    materialize(postgres_instance, database_url, data_dir, assets=RELEASE)
    folder = data_dir / "masked_release" / DEVIL
    logical = json.loads((folder / MANIFEST).read_bytes())["masking"]["logical_run_id"]
    with (folder / f"{DEVIL}.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    true = {
        row[0]: row[1:]
        for row in db.execute(
            "SELECT id, longitude, latitude FROM occurrences WHERE species_id = %s",
            [species_by_slug(DEVIL).species_id],
        ).fetchall()
    }
    placed = [i for i, row in enumerate(rows) if row["longitude"]]
    lon, lat = (np.array([float(rows[i][name]) for i in placed]) for name in ("longitude", "latitude"))
    true_lon, true_lat = (np.array([true[int(rows[i]["id"])][k] for i in placed]) for k in (0, 1))

    def missed_by(seed: int) -> np.ndarray:
        radius, azimuth = DonutDraws(len(rows), MaskingRules(), seed).next(len(rows))
        back_lon, back_lat = _moved_back(lon, lat, radius[placed], azimuth[placed])
        return np.asarray(WGS84.inv(back_lon, back_lat, true_lon, true_lat)[2])

    assert len(placed) > 100
    assert missed_by(TEST_SEED_KEY.seed(logical, STAGE)).max() < ROUNDING_M, (
        "the key's holder moves them back"
    )
    published = int.from_bytes(hashlib.sha256(f"{logical}|{STAGE}".encode()).digest()[:8], "big")
    missed = missed_by(published)
    assert missed.min() > 1.0 and np.median(missed) > MaskingRules().min_m


def test_a_config_change_reloads_the_release_with_other_points(db, database_url, postgres_instance, data_dir):
    materialize(postgres_instance, database_url, data_dir, assets=RELEASE)
    folder = data_dir / "masked_release" / DEVIL
    before = (folder / f"{DEVIL}.csv").read_text()
    result = dg.materialize(
        RELEASE,
        instance=postgres_instance,
        partition_key=DEVIL,
        resources=resources(database_url, data_dir),
        run_config={"ops": {STAGE: {"config": {"min_m": 2000.0, "max_m": 5000.0}}}},
    )
    changed = metadata(result, STAGE)
    assert (changed["action"], changed["reason"]) == ("loaded", "config changed")
    after = (folder / f"{DEVIL}.csv").read_text()
    assert after != before
    # Same seed (same input), other donut: the ids and row count stay.
    assert [line.split(",")[0] for line in after.splitlines()] == [
        line.split(",")[0] for line in before.splitlines()
    ]


def test_a_skip_trusts_a_release_file_only_while_its_stamp_is_unchanged(
    db, database_url, postgres_instance, data_dir
):
    """A skip reads no release file whose stamp (inode, size, mtime, ctime) is the one kept at its write;
    a hand edit of the same size, its mtime set back as ``touch -r`` would, still rebuilds the release."""
    materialize(postgres_instance, database_url, data_dir, assets=RELEASE)
    folder = data_dir / "masked_release" / DEVIL
    memo = data_dir / "memos" / "masked_release" / f"{DEVIL}.json"
    manifest = json.loads((folder / MANIFEST).read_bytes())
    kept = json.loads(memo.read_bytes())["files"]
    assert {name: stamp[-1] for name, stamp in kept.items()} == {
        name: entry["sha256"] for name, entry in manifest["files"].items()
    }
    before = _folder_hashes(folder)

    skipped = metadata(materialize(postgres_instance, database_url, data_dir, assets=RELEASE), STAGE)
    assert skipped["action"] == "skipped"

    csv = folder / f"{DEVIL}.csv"
    original = csv.stat()
    text = csv.read_bytes()
    # Same size: one digit of a coordinate changed, then the modification time put back.
    digit = next(
        i for i in range(len(text) - 1, 0, -1) if text[i : i + 1].isdigit() and text[i : i + 1] != b"7"
    )
    csv.write_bytes(text[:digit] + b"7" + text[digit + 1 :])
    os.utime(csv, ns=(original.st_atime_ns, original.st_mtime_ns))
    assert csv.stat().st_size == original.st_size and csv.stat().st_mtime_ns == original.st_mtime_ns
    assert csv.stat().st_ctime_ns != original.st_ctime_ns
    rebuilt = metadata(materialize(postgres_instance, database_url, data_dir, assets=RELEASE), STAGE)
    assert rebuilt["action"] == "loaded"
    assert _folder_hashes(folder) == before


def test_a_current_release_is_kept_without_waiting_for_a_load_of_occurrences_in_flight(
    db, database_url, postgres_instance, data_dir
):
    """Kept for the key occurrences held when the step began (held_release_inputs), a current release
    takes no share lock: only a build reads occurrences' rows. Without the held keys, the same call waits
    for the load's lock (here, up to lock_timeout)."""
    materialize(postgres_instance, database_url, data_dir, assets=RELEASE)
    folder = data_dir / "masked_release" / DEVIL
    stamps = data_dir / "memos" / "masked_release" / f"{DEVIL}.json"
    rules = MaskingRules(min_m=100.0, max_m=1000.0)
    held = held_release_inputs(db)
    with psycopg.connect(database_url, autocommit=True) as loading, loading.transaction():
        loading.execute("SELECT 1 FROM target_state WHERE target = 'occurrences' FOR UPDATE")
        db.execute("SET lock_timeout = '1s'")
        kept = build_masked_release(db, DEVIL, rules, folder, key=TEST_SEED_KEY, stamps=stamps, held=held)
        assert not kept.written and kept.parts.config["masking_key_id"] == TEST_SEED_KEY.id
        with pytest.raises(psycopg.errors.LockNotAvailable):
            build_masked_release(db, DEVIL, rules, folder, key=TEST_SEED_KEY, stamps=stamps)
    db.execute("RESET lock_timeout")
    assert build_masked_release(db, DEVIL, rules, folder, key=TEST_SEED_KEY, stamps=stamps) == kept


def test_a_build_brings_the_flags_statistics_up_to_date_and_a_kept_release_does_not_ask(
    db, database_url, postgres_instance, data_dir
):
    """A page planned with occurrence_quality's statistics from before its last load once scanned the
    flags for every record: a build asks for them current first (StatisticsBeforeUse, once per step),
    a release kept as it is reads no page and asks nothing."""
    materialize(postgres_instance, database_url, data_dir, assets=RELEASE)
    folder = data_dir / "masked_release" / DEVIL
    rules = MaskingRules(min_m=100.0, max_m=1000.0)

    class Asked(StatisticsBeforeUse):
        times = 0

        def ensure(self) -> None:
            self.times += 1
            super().ensure()

    def connect() -> psycopg.Connection:
        return psycopg.connect(database_url, autocommit=True)

    statistics = Asked(connect, "occurrence_quality")
    held = held_release_inputs(db)
    kept = build_masked_release(db, DEVIL, rules, folder, key=TEST_SEED_KEY, held=held, statistics=statistics)
    assert not kept.written and statistics.times == 0
    rebuilt = build_masked_release(
        db, DEVIL, rules, folder, key=TEST_SEED_KEY, rebuild=True, statistics=statistics
    )
    assert rebuilt.written and statistics.times == 1
    assert rebuilt.manifest_sha256 == kept.manifest_sha256


def test_make_repair_hashes_release_files_whatever_their_stamps_say(
    db, database_url, postgres_instance, data_dir
):
    """An edit the stamps could not see (planted here: the memo rewritten to vouch for the edited file) is
    trusted by a plain skip, and found by a run that verifies every skip, as ``make repair`` does."""
    materialize(postgres_instance, database_url, data_dir, assets=RELEASE)
    folder = data_dir / "masked_release" / DEVIL
    memo = data_dir / "memos" / "masked_release" / f"{DEVIL}.json"
    before = _folder_hashes(folder)
    csv = folder / f"{DEVIL}.csv"
    csv.write_bytes(csv.read_bytes().replace(b"\n", b"\r\n", 1))
    kept = json.loads(memo.read_bytes())
    kept["files"][csv.name][:5] = list(file_stamp(csv))
    memo.write_text(json.dumps(kept))

    trusted = metadata(materialize(postgres_instance, database_url, data_dir, assets=RELEASE), STAGE)
    assert trusted["action"] == "skipped" and _folder_hashes(folder) != before

    verifying = {
        **resources(database_url, data_dir),
        "warehouse": Warehouse(database_url=database_url, verify_targets=True),
    }
    result = dg.materialize(RELEASE, instance=postgres_instance, partition_key=DEVIL, resources=verifying)
    repaired = metadata(result, STAGE)
    assert repaired["action"] == "loaded"
    assert _folder_hashes(folder) == before
