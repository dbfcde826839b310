"""masked_release: donut geomasking keyed per record, skipped on an equal key, replayed byte for byte by the
key's holder and by no one else; a record keeps its masked point from release to release."""

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
from surveillance_pipeline.core.seeds import SeedKey, logical_run_id
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
    MaskingRules,
    RecordDraws,
    build_masked_release,
    donut_mask,
    draw_scope,
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


@pytest.mark.parametrize("ids", [[5001], [-(2**63), 0, 2**63 - 1], [1080046753, 7, 7]])
def test_a_records_draws_are_blake2b_of_its_id_under_the_scopes_hmac_of_the_key(ids):
    scope = draw_scope(MaskingRules())
    scope_key = hmac.new(TEST_MASKING_KEY.encode(), f"{scope}|records".encode(), hashlib.sha256).digest()
    first, second = TEST_SEED_KEY.record_draws(scope, np.array(ids, dtype=np.int64))
    for record, a, b in zip(ids, first, second, strict=True):
        digest = hashlib.blake2b(
            record.to_bytes(8, "big", signed=True), key=scope_key, digest_size=16
        ).digest()
        words = [int.from_bytes(digest[half : half + 8], "little") for half in (0, 8)]
        assert [a, b] == [(word >> 11) / 2**53 for word in words]


def test_draws_differ_by_key_and_scope_not_by_neighbours_and_the_id_names_the_key():
    ids = np.arange(1, 1_001, dtype=np.int64) * 7919
    scope = draw_scope(MaskingRules())
    draws = TEST_SEED_KEY.record_draws(scope, ids)
    # A record draws the same alone, shuffled among others, or beside new ones.
    alone = TEST_SEED_KEY.record_draws(scope, ids[500:501])
    assert (alone[0][0], alone[1][0]) == (draws[0][500], draws[1][500])
    order = np.random.Generator(np.random.PCG64(5)).permutation(len(ids))
    assert np.array_equal(TEST_SEED_KEY.record_draws(scope, ids[order])[0], draws[0][order])
    assert draw_scope(MaskingRules(min_m=50.0)) != scope
    assert draw_scope(MaskingRules(policy="keep_all")) == scope, "the policy picks records, it moves none"
    for other in (SeedKey("another key").record_draws(scope, ids), TEST_SEED_KEY.record_draws("other", ids)):
        assert (other[0] != draws[0]).all()
    assert 0.45 < draws[0].mean() < 0.55 and 0.0 <= draws[1].min() and draws[1].max() < 1.0
    digest = hmac.new(TEST_MASKING_KEY.encode(), b"surveillance_pipeline key id", hashlib.sha256).hexdigest()
    assert TEST_SEED_KEY.id == digest[:16]
    assert TEST_MASKING_KEY not in repr(TEST_SEED_KEY)
    with pytest.raises(ValueError, match="RELEASE_MASKING_KEY is empty"):
        SeedKey("", "RELEASE_MASKING_KEY")


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
    ids = np.arange(len(lon), dtype=np.int64)
    masked_lon, masked_lat = donut_mask(ids, lon, lat, MaskingRules(min_m=min_m, max_m=max_m), TEST_SEED_KEY)
    _, _, distances = WGS84.inv(lon, lat, masked_lon, masked_lat)
    distances = np.asarray(distances)
    assert distances.min() >= min_m - ROUNDING_M, (region, distances.min())
    assert distances.max() <= max_m + ROUNDING_M, (region, distances.max())
    assert np.isfinite(masked_lon).all() and (np.abs(masked_lon) <= 180).all()


def test_the_same_key_gives_the_same_points_and_missing_coordinates_stay_missing():
    ids = np.array([11, 12, 13, 14, 15, 16], dtype=np.int64)
    lon = np.array([147.3, -97.1, np.nan, -60.0, 25.0, 146.8])
    lat = np.array([-42.9, 31.2, np.nan, 0.1, 70.0, np.nan])
    rules = MaskingRules()
    masked_lon, masked_lat = donut_mask(ids, lon, lat, rules, TEST_SEED_KEY)
    assert np.isnan(masked_lon[[2, 5]]).all() and np.isnan(masked_lat[[2, 5]]).all()
    assert np.isfinite(masked_lon[[0, 1, 3, 4]]).all()
    again = donut_mask(ids, lon.copy(), lat.copy(), rules, TEST_SEED_KEY)
    assert np.array_equal(again[0], masked_lon, equal_nan=True)
    assert np.array_equal(again[1], masked_lat, equal_nan=True)
    assert np.array_equal(lon, [147.3, -97.1, np.nan, -60.0, 25.0, 146.8], equal_nan=True), "input untouched"
    other = donut_mask(ids, lon, lat, rules, SeedKey("another key"))
    assert not np.array_equal(other[0], masked_lon, equal_nan=True)


def test_no_projection_enters_the_job_key_config():
    # Distances are geodesic, so a CRS would key releases apart that hold the same points.
    assert MaskingRules().as_config() == {"min_m": 100.0, "max_m": 1000.0, "policy": "drop_any_flagged"}


def test_masked_rows_do_not_depend_on_the_order_rows_arrive_in():
    rows = [(i, "s", 2000, 147.0 + i / 1000, -42.0 - i / 1000, "CC0 1.0") for i in range(1, 200)]
    shuffled = rows[:]
    random.Random(3).shuffle(shuffled)
    rules = MaskingRules()
    assert masked_rows(shuffled, rules, TEST_SEED_KEY) == masked_rows(rows, rules, TEST_SEED_KEY)


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


def _assert_the_key_is_named_and_its_draws_kept_nowhere(folder, manifest, detail, shown, release_input):
    """The key's id in the manifest, provenance and metadata; never the key of the draws (with it, anyone
    could move the points back) nor the masking key."""
    key_id = TEST_SEED_KEY.id
    assert (
        detail["masking_key_id"] == shown["masking_key_id"] == manifest["masking"]["masking_key_id"] == key_id
    )
    logical = logical_run_id(DEVIL, release_input)
    assert detail["logical_run_id"] == manifest["masking"]["logical_run_id"] == logical
    draws = TEST_SEED_KEY.scope_key(draw_scope(MaskingRules()))
    secrets = [draws, draws.hex().encode(), TEST_MASKING_KEY.encode()]
    published = [path.read_bytes() for path in sorted(folder.iterdir())]
    recorded = [json.dumps(detail).encode(), json.dumps({k: str(v) for k, v in shown.items()}).encode()]
    assert not [text for text in published + recorded if any(secret in text for secret in secrets)]


def test_masked_release_skips_an_equal_key_names_its_key_not_its_draws_and_replays_byte_for_byte(
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
    _assert_the_key_is_named_and_its_draws_kept_nowhere(folder, manifest, detail, first, release_input)
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


def _released_points(db, folder) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """The devil's release: the ids, longitudes and latitudes of its rows with a point; and the true points
    occurrences holds, by id."""
    with (folder / f"{DEVIL}.csv").open(newline="") as handle:
        rows = [row for row in csv.DictReader(handle) if row["longitude"]]
    true = {
        row[0]: row[1:]
        for row in db.execute(
            "SELECT id, longitude, latitude FROM occurrences WHERE species_id = %s",
            [species_by_slug(DEVIL).species_id],
        ).fetchall()
    }
    ids = np.array([int(row["id"]) for row in rows], dtype=np.int64)
    lon, lat = (np.array([float(row[name]) for row in rows]) for name in ("longitude", "latitude"))
    return ids, lon, lat, true


def test_a_release_is_undone_by_its_key_and_not_by_what_it_publishes(
    db, database_url, postgres_instance, data_dir
):
    """Each record's move is drawn from its id: whoever has the key moves every point back to its true
    place. From what a release publishes (its rows, its manifest's logical run and key id, which a key
    made of them would have to be) none comes back."""
    materialize(postgres_instance, database_url, data_dir, assets=RELEASE)
    folder = data_dir / "masked_release" / DEVIL
    masking = json.loads((folder / MANIFEST).read_bytes())["masking"]
    ids, lon, lat, true = _released_points(db, folder)
    true_lon, true_lat = (np.array([true[int(i)][k] for i in ids]) for k in (0, 1))

    def missed_by(key: SeedKey) -> np.ndarray:
        radius, azimuth = RecordDraws(key, MaskingRules()).of(ids)
        back_lon, back_lat = _moved_back(lon, lat, radius, azimuth)
        return np.asarray(WGS84.inv(back_lon, back_lat, true_lon, true_lat)[2])

    assert len(ids) > 100
    assert missed_by(TEST_SEED_KEY).max() < ROUNDING_M, "the key's holder moves them back"
    for guess in (masking["logical_run_id"], masking["masking_key_id"], STAGE):
        missed = missed_by(SeedKey(guess))
        assert missed.min() > 1.0 and np.median(missed) > MaskingRules().min_m


def test_a_record_keeps_its_masked_point_when_the_release_around_it_changes(
    db, database_url, postgres_instance, data_dir
):
    """Another release of the species (here: another policy, which lets more records out) moves no record
    it shares with the first: a reader keeping both has one masked point per true point, none to average.
    Another donut draws afresh (a record's draw is keyed by the donut too)."""
    materialize(postgres_instance, database_url, data_dir, assets=RELEASE)
    folder = data_dir / "masked_release" / DEVIL
    ids, lon, lat, _ = _released_points(db, folder)

    def release(config: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        dg.materialize(
            RELEASE,
            instance=postgres_instance,
            partition_key=DEVIL,
            resources=resources(database_url, data_dir),
            run_config={"ops": {STAGE: {"config": config}}},
        )
        return _released_points(db, folder)[:3]

    every_id, every_lon, every_lat = release({"policy": "keep_all"})
    assert len(every_id) > len(ids) and np.isin(ids, every_id).all()
    shared = np.isin(every_id, ids)
    assert np.array_equal(every_lon[shared], lon) and np.array_equal(every_lat[shared], lat)
    wider_id, wider_lon, _ = release({"policy": "keep_all", "min_m": 2000.0, "max_m": 5000.0})
    assert np.array_equal(wider_id, every_id) and (wider_lon != every_lon).all()


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
    # Other donut, other draws: the ids and row count stay.
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
