"""The spine against real PostGIS through a real Dagster instance: load, skip, reload, refuse."""

import json
import os
from dataclasses import replace

import dagster as dg
import psycopg
import pytest

from surveillance_pipeline.core.errors import InputError, StaleInputError
from surveillance_pipeline.core.keys import forget_hashed_files
from surveillance_pipeline.core.partition_files import read_file_stamps
from surveillance_pipeline.core.recent import RecentValues
from surveillance_pipeline.core.refresh import ensure_state_tables, ensure_target_schema
from surveillance_pipeline.gbif import raw_snapshots
from surveillance_pipeline.gbif.registry import species_by_slug
from surveillance_pipeline.occurrences import load
from surveillance_pipeline.occurrences.assets import gbif_derived, occurrences
from surveillance_pipeline.occurrences.derive import DERIVED_COLUMNS
from surveillance_pipeline_tests.support.pipeline import (
    DEVIL,
    data_version,
    materialize,
    metadata,
    state_row,
    table_md5,
)

pytestmark = [pytest.mark.db, pytest.mark.dagster]
DEVIL_ID = species_by_slug(DEVIL).species_id


@pytest.fixture()
def instance():
    with dg.instance_for_test() as instance:
        yield instance


def _xmins(db):
    return db.execute("SELECT array_agg(xmin::text ORDER BY id) FROM occurrences").fetchone()[0]


def test_first_load_puts_every_record_in_postgis_with_its_geometry(db, database_url, data_dir, instance):
    result = materialize(instance, database_url, data_dir)
    assert result.success
    meta = metadata(result, "occurrences")
    assert (meta["action"], meta["reason"], meta["rows"]) == ("loaded", "first load", 2000)
    count, with_geom, srid, bad = db.execute(
        "SELECT count(*), count(geom), min(ST_SRID(geom)),"
        " count(*) FILTER (WHERE geom IS NOT NULL AND (ST_X(geom) <> longitude OR ST_Y(geom) <> latitude))"
        " FROM occurrences WHERE species_id = %s",
        [DEVIL_ID],
    ).fetchone()
    assert count == 2000 and 0 < with_geom < 2000 and srid == 4326 and bad == 0
    job_key, parts, rows = state_row(db)
    assert job_key == meta["job_key"] == data_version(instance, "occurrences")
    assert rows == 2000 and set(parts) == {"input", "transform", "config", "schema"}
    assert db.execute("SELECT slug FROM species WHERE species_id = %s", [DEVIL_ID]).fetchone() == (DEVIL,)
    actions = db.execute(
        "SELECT asset, action, reason, rows FROM provenance WHERE run_id = %s ORDER BY id", [result.run_id]
    ).fetchall()
    assert actions == [
        ("gbif_raw", "loaded", "first load", 2000),
        ("gbif_derived", "loaded", "first load", 2000),
        ("occurrences", "loaded", "first load", 2000),
    ]


def test_rerun_skips_and_touches_no_row(db, database_url, data_dir, instance):
    materialize(instance, database_url, data_dir)
    before = (_xmins(db), state_row(db), data_version(instance, "occurrences"))
    raw_before = (data_dir / "raw" / f"{DEVIL}.json").read_bytes()
    result = materialize(instance, database_url, data_dir)
    for asset in ("gbif_raw", "gbif_derived", "occurrences"):
        meta = metadata(result, asset)
        assert (meta["action"], meta["reason"]) == ("skipped", "nothing changed"), asset
    assert (_xmins(db), state_row(db), data_version(instance, "occurrences")) == before
    assert (data_dir / "raw" / f"{DEVIL}.json").read_bytes() == raw_before


def test_changed_input_reloads_and_a_return_to_the_earlier_input_reloads_again(
    db, database_url, data_dir, instance
):
    materialize(instance, database_url, data_dir)
    md5_a, key_a = table_md5(db, DEVIL_ID), state_row(db)[0]

    changed = materialize(instance, database_url, data_dir, edit="drop_lowest_id")
    meta = metadata(changed, "occurrences")
    assert (meta["action"], meta["reason"], meta["rows"]) == ("loaded", "input changed", 1999)
    assert table_md5(db, DEVIL_ID) != md5_a and state_row(db)[0] != key_a

    back = materialize(instance, database_url, data_dir)
    meta = metadata(back, "occurrences")
    # A checksum ledger would skip input A here: it has seen it. The target holds B, so A must reload.
    assert (meta["action"], meta["reason"], meta["rows"]) == ("loaded", "input changed", 2000)
    assert table_md5(db, DEVIL_ID) == md5_a and state_row(db)[0] == key_a
    assert data_version(instance, "occurrences") == key_a


def test_config_change_reloads_with_its_reason(db, database_url, data_dir, instance):
    materialize(instance, database_url, data_dir)
    narrowed = materialize(instance, database_url, data_dir, occurrences_config={"licenses": ["CC0 1.0"]})
    meta = metadata(narrowed, "occurrences")
    assert (meta["action"], meta["reason"]) == ("loaded", "config changed")
    licenses = db.execute("SELECT array_agg(DISTINCT license) FROM occurrences").fetchone()[0]
    assert licenses == ["CC0 1.0"] and meta["rows"] < 2000
    assert metadata(narrowed, "gbif_derived")["action"] == "skipped"
    # Naming the defaults explicitly is the same config as leaving them out.
    restored = materialize(
        instance,
        database_url,
        data_dir,
        occurrences_config={
            "licenses": ["CC0 1.0", "CC BY 4.0", "CC BY-NC 4.0"],
            "require_coordinates": False,
        },
    )
    assert metadata(restored, "occurrences")["reason"] == "config changed"
    again = materialize(instance, database_url, data_dir)
    assert metadata(again, "occurrences")["action"] == "skipped"


def test_connection_settings_are_not_part_of_the_key(db, database_url, data_dir, instance):
    materialize(instance, database_url, data_dir)
    other_spelling = database_url.replace("127.0.0.1", "localhost")
    assert other_spelling != database_url
    result = materialize(instance, other_spelling, data_dir, assets=[occurrences])
    assert metadata(result, "occurrences")["action"] == "skipped"


def test_stale_request_is_refused_and_nothing_changes(db, database_url, data_dir, instance):
    materialize(instance, database_url, data_dir)
    before = (table_md5(db), state_row(db))
    raw = data_dir / "raw" / f"{DEVIL}.json"
    document = json.loads(raw.read_bytes())
    document["request"]["params"]["stateProvince"] = "Victoria"
    raw.write_text(json.dumps(document, sort_keys=True, indent=1))
    with pytest.raises(
        StaleInputError, match="sarcophilus-harrisii.*params.stateProvince: recorded 'Victoria'"
    ):
        materialize(instance, database_url, data_dir, assets=[gbif_derived])
    with pytest.raises(StaleInputError):
        materialize(instance, database_url, data_dir, assets=[occurrences])
    assert (table_md5(db), state_row(db)) == before


def test_a_rerun_decides_its_skips_without_parsing_the_raw_snapshot(
    db, database_url, data_dir, instance, monkeypatch
):
    """gbif_raw compares a fresh answer with its summary memo, gbif_derived and occurrences trust the
    derive recorded for the raw bytes, which names the raw snapshot's records file (none here): parsing
    the snapshot was most of what a lab run's skips cost, once per process."""
    materialize(instance, database_url, data_dir)

    def parse_refused(path, data):
        raise AssertionError(f"{path} was parsed")

    monkeypatch.setattr(
        raw_snapshots, "_recent_snapshots", RecentValues(raw_snapshots.RECENT_SNAPSHOTS_BYTES)
    )
    monkeypatch.setattr(raw_snapshots, "_parse_raw_snapshot", parse_refused)
    result = materialize(instance, database_url, data_dir)
    for asset in ("gbif_raw", "gbif_derived", "occurrences"):
        meta = metadata(result, asset)
        assert (meta["action"], meta["reason"]) == ("skipped", "nothing changed"), asset


def test_tampered_derived_file_is_refused(db, database_url, data_dir, instance):
    materialize(instance, database_url, data_dir)
    before = (table_md5(db), state_row(db))
    derived = data_dir / "derived" / f"{DEVIL}.csv"
    lines = derived.read_text().splitlines(keepends=True)
    lines[5] = lines[5].replace(",CC BY-NC 4.0", ",CC0 1.0").replace(",CC BY 4.0", ",CC0 1.0")
    lines[6] = lines[6].replace(",CC BY-NC 4.0", ",CC0 1.0").replace(",CC BY 4.0", ",CC0 1.0")
    derived.write_text("".join(lines[:3] + lines[4:]))  # also a dropped record
    with pytest.raises(
        StaleInputError, match=r"differs from a fresh derive .* \(first at line 4, field 'id'\)"
    ):
        materialize(instance, database_url, data_dir, assets=[occurrences])
    assert (table_md5(db), state_row(db)) == before


def test_a_derived_file_edited_after_its_stamp_was_kept_is_refused(db, database_url, data_dir, instance):
    materialize(instance, database_url, data_dir)  # gbif_derived's load keeps the file's stamp
    derived = data_dir / "derived" / f"{DEVIL}.csv"
    stamps = data_dir / "memos" / "gbif_derived" / f"{DEVIL}.stamps.json"
    # The lab's snapshots hold their records inline: the derived file is the one file to vouch for.
    assert set(read_file_stamps(stamps)) == {derived.name}
    before = (table_md5(db), state_row(db))
    # The last digit of line 5's latitude, the size and the modification time as they were: only the
    # change time tells, and the stamp holds it.
    lines = derived.read_bytes().split(b"\n")
    fields = lines[4].split(b",")
    latitude = DERIVED_COLUMNS.index("latitude")
    fields[latitude] = fields[latitude][:-1] + (b"1" if fields[latitude][-1:] != b"1" else b"2")
    lines[4] = b",".join(fields)
    kept = derived.stat()
    derived.write_bytes(b"\n".join(lines))
    os.utime(derived, ns=(kept.st_atime_ns, kept.st_mtime_ns))
    forget_hashed_files()  # as a new process would start
    with pytest.raises(
        StaleInputError, match=r"differs from a fresh derive .* \(first at line 5, field 'latitude'\)"
    ):
        materialize(instance, database_url, data_dir, assets=[occurrences])
    assert (table_md5(db), state_row(db)) == before
    forget_hashed_files()
    result = materialize(instance, database_url, data_dir, assets=[gbif_derived])
    assert metadata(result, "gbif_derived")["action"] == "loaded"  # derived again, the edit gone


def _edit_raw(data_dir, edit):
    raw = data_dir / "raw" / f"{DEVIL}.json"
    document = json.loads(raw.read_bytes())
    edit(document)
    raw.write_text(json.dumps(document, sort_keys=True, indent=1))


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda d: d["records"][7].update(decimalLatitude=-95.0), "decimalLatitude"),
        (lambda d: d["records"][7].update(decimalLongitude="147.1E"), "decimalLongitude"),
        (lambda d: d["records"][7].update(year="nineteen"), "year"),
        (lambda d: d["records"][7].update(key=d["records"][3]["key"]), "key"),
        (lambda d: d["records"][7].update(species="Vombatus ursinus"), "species"),
    ],
    ids=["latitude-range", "longitude-text", "year-text", "duplicate-id", "other-taxon"],
)
def test_bad_raw_record_changes_nothing_in_postgis(db, database_url, data_dir, instance, edit, field):
    materialize(instance, database_url, data_dir)
    before = (table_md5(db), state_row(db), _xmins(db))
    _edit_raw(data_dir, edit)
    with pytest.raises(InputError) as error:
        materialize(instance, database_url, data_dir, assets=[gbif_derived, occurrences])
    assert error.value.field == field and "record 7" in error.value.where
    assert f"{DEVIL}.json" in error.value.path
    assert (table_md5(db), state_row(db), _xmins(db)) == before


def test_malformed_raw_json_changes_nothing(db, database_url, data_dir, instance):
    materialize(instance, database_url, data_dir)
    before = (table_md5(db), state_row(db))
    raw = data_dir / "raw" / f"{DEVIL}.json"
    raw.write_bytes(raw.read_bytes()[:5000])
    with pytest.raises(InputError, match=r"sarcophilus-harrisii.json: line \d+ column \d+: malformed JSON"):
        materialize(instance, database_url, data_dir, assets=[gbif_derived, occurrences])
    assert (table_md5(db), state_row(db)) == before


def test_partitions_are_independent(db, database_url, data_dir, instance):
    materialize(instance, database_url, data_dir)
    devil_md5 = table_md5(db, DEVIL_ID)
    result = materialize(instance, database_url, data_dir, partition="thylacinus-cynocephalus")
    assert metadata(result, "occurrences")["reason"] == "first load"
    assert table_md5(db, DEVIL_ID) == devil_md5
    counts = dict(db.execute("SELECT species_id, count(*) FROM occurrences GROUP BY 1").fetchall())
    assert counts == {DEVIL_ID: 2000, species_by_slug("thylacinus-cynocephalus").species_id: 974}


def test_a_transform_bump_reloads_and_a_schema_bump_rebuilds_the_table(
    db, database_url, data_dir, instance, monkeypatch
):
    for slug in (DEVIL, "thylacinus-cynocephalus"):
        materialize(instance, database_url, data_dir, slug)
    monkeypatch.setattr(load, "OCCURRENCES", replace(load.OCCURRENCES, transform_version=2))
    bumped = materialize(instance, database_url, data_dir, assets=[occurrences])
    meta = metadata(bumped, "occurrences")
    assert (meta["action"], meta["reason"], meta["rows"]) == ("loaded", "transform changed", 2000)

    monkeypatch.setattr(
        load, "OCCURRENCES", replace(load.OCCURRENCES, schema_version=load.OCCURRENCES.schema_version + 1)
    )
    rebuilt = materialize(instance, database_url, data_dir, assets=[occurrences])
    assert metadata(rebuilt, "occurrences")["reason"] == "schema changed"
    assert db.execute("SELECT version FROM target_schema WHERE target = 'occurrences'").fetchone() == (
        load.OCCURRENCES.schema_version,
    )
    # The rebuilt table holds only what was loaded into it; the other species has no state row left.
    assert db.execute("SELECT count(DISTINCT species_id) FROM occurrences").fetchone() == (1,)
    assert state_row(db, partition="thylacinus-cynocephalus") is None
    other = materialize(instance, database_url, data_dir, "thylacinus-cynocephalus", assets=[occurrences])
    assert metadata(other, "occurrences")["reason"] == "transform and schema changed"
    again = materialize(instance, database_url, data_dir, assets=[occurrences])
    assert metadata(again, "occurrences")["action"] == "skipped"


SMALL_CSV = b"id,year,longitude,latitude,license\n7,2001,147.25,-42.5,CC0 1.0\n8,,,,\n"


def _partitions(db):
    return db.execute(
        "SELECT child.relname FROM pg_inherits JOIN pg_class AS child ON child.oid = pg_inherits.inhrelid"
        " WHERE pg_inherits.inhparent = 'occurrences'::regclass ORDER BY 1"
    ).fetchall()


def test_a_reload_swaps_in_a_freshly_indexed_partition_and_leaves_nothing_behind(
    db, database_url, data_dir, instance
):
    materialize(instance, database_url, data_dir)
    first = table_md5(db, DEVIL_ID)
    reloaded = materialize(instance, database_url, data_dir, edit="drop_lowest_id")
    assert metadata(reloaded, "occurrences")["rows"] == 1999
    assert _partitions(db) == [(f"occurrences_{DEVIL_ID}",)]
    # Only the partition and its two indexes (key, geometry): no fresh table or index left over.
    relations = db.execute(
        "SELECT relkind, count(*) FROM pg_class WHERE relname LIKE %s GROUP BY 1 ORDER BY 1",
        [f"occurrences\\_{DEVIL_ID}%"],
    ).fetchall()
    assert relations == [("i", 2), ("r", 1)]
    materialize(instance, database_url, data_dir)
    assert table_md5(db, DEVIL_ID) == first


def test_loads_of_two_species_run_side_by_side_and_a_rebuild_waits_for_both(db, database_url):
    """A load in flight holds the schema lock shared: another species loads at once, a rebuild waits."""
    devil, thylacine = species_by_slug(DEVIL), species_by_slug("thylacinus-cynocephalus")
    ensure_state_tables(db)
    load.load_occurrences(db, species=devil, derived=SMALL_CSV, rules=load.OccurrenceRules(), run_id="r0")
    with (
        psycopg.connect(database_url, autocommit=True) as in_flight,
        psycopg.connect(database_url, autocommit=True) as other,
    ):
        other.execute("SET lock_timeout = '3s'")
        with in_flight.transaction():
            assert ensure_target_schema(in_flight, load.OCCURRENCES) is False
            outcome = load.load_occurrences(
                other,
                species=thylacine,
                derived=SMALL_CSV.replace(b"7,", b"9,").replace(b"8,", b"10,"),
                rules=load.OccurrenceRules(),
                run_id="r1",
            )
            assert (outcome.action, outcome.rows) == ("loaded", 2)
            bumped = replace(load.OCCURRENCES, schema_version=load.OCCURRENCES.schema_version + 1)
            with pytest.raises(psycopg.errors.LockNotAvailable), other.transaction():
                ensure_target_schema(other, bumped)
    counts = dict(db.execute("SELECT species_id, count(*) FROM occurrences GROUP BY 1").fetchall())
    assert counts == {devil.species_id: 2, thylacine.species_id: 2}


def test_a_loaded_partition_is_analyzed_once_leaving_autovacuum_nothing_to_analyze(db, database_url):
    """The load's rows counted before its partition is analyzed: a partition analyzed inside the load's
    transaction read, once the commit had counted its rows, as changed since its analyze, and autovacuum
    analyzed it again."""
    devil = species_by_slug(DEVIL)
    ensure_state_tables(db)
    outcome = load.load_occurrences(
        db, species=devil, derived=SMALL_CSV, rules=load.OccurrenceRules(), run_id="r0"
    )
    assert outcome.action == "loaded"
    db.execute("SELECT pg_stat_force_next_flush()")  # whatever the loading backend still holds, counted now
    with psycopg.connect(database_url, autocommit=True) as reader:
        counted = reader.execute(
            "SELECT n_live_tup, n_mod_since_analyze, analyze_count FROM pg_stat_user_tables"
            " WHERE relname = %s",
            [load.partition_table_name(devil.species_id)],
        ).fetchone()
    assert counted == (2, 0, 1)


def test_a_derived_file_by_path_has_the_key_of_its_bytes_and_skips_by_checksum(db, tmp_path):
    devil = species_by_slug(DEVIL)
    path = tmp_path / "devil.csv"
    path.write_bytes(SMALL_CSV)
    ensure_state_tables(db)
    rules = load.OccurrenceRules()
    by_path = load.load_occurrences(db, species=devil, derived=path, rules=rules, run_id="r0")
    assert (by_path.action, by_path.rows) == ("loaded", 2)
    by_bytes = load.load_occurrences(db, species=devil, derived=SMALL_CSV, rules=rules, run_id="r1")
    assert (by_bytes.action, by_bytes.job_key) == ("skipped", by_path.job_key)
    assert (
        load.load_occurrences(db, species=devil, derived=path, rules=rules, run_id="r2").action == "skipped"
    )
