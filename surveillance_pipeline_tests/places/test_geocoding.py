"""geocoded_localities and its call ledger, against a local Nominatim-style geocoder that counts calls."""

from __future__ import annotations

import json

import dagster as dg
import psycopg
import pytest

from surveillance_pipeline.core.fingerprints import EDITED_OUTSIDE
from surveillance_pipeline.core.refresh import ensure_state_tables
from surveillance_pipeline.gbif.registry import species_by_slug
from surveillance_pipeline.geocoding.service import (
    USER_AGENT,
    GeocodeAnswer,
    HttpGeocoder,
    ledger_key,
    normalize_locality,
)
from surveillance_pipeline.lab.gbif_client import lab_records
from surveillance_pipeline.lab.geocoder import LabGeocoder
from surveillance_pipeline.occurrences.assets import gbif_raw
from surveillance_pipeline.orchestration.reporting import partition_range_tags
from surveillance_pipeline.orchestration.resources import GeocoderSource, Warehouse
from surveillance_pipeline.places import geocoded
from surveillance_pipeline.places.assets import geocoded_localities
from surveillance_pipeline.places.geocoded import refresh_geocoded_localities
from surveillance_pipeline.places.ledger import answers_stamp, ledger_version
from surveillance_pipeline_tests.support.fake_geocoder import FakeGeocoder
from surveillance_pipeline_tests.support.pipeline import DEVIL, TEST_LEDGER_SALT, metadata, resources

pytestmark = [pytest.mark.db, pytest.mark.dagster]


def devil_localities() -> list[str]:
    """The distinct normalized localities of the devil's lab records without coordinates, computed here."""
    texts = {
        normalize_locality(r["locality"])
        for r in lab_records(DEVIL)
        if "decimalLatitude" not in r and r.get("locality")
    }
    return sorted(texts)


def _run(instance, database_url, data_dir, fake: FakeGeocoder, *, raise_on_error=True):
    bound = resources(database_url, data_dir)
    bound["geocoder"] = GeocoderSource(
        kind="http", base_url=fake.base_url, requests_per_second=1000.0, ledger_salt=TEST_LEDGER_SALT
    )
    return dg.materialize(
        [gbif_raw, geocoded_localities],
        instance=instance,
        partition_key=DEVIL,
        resources=bound,
        raise_on_error=raise_on_error,
    )


def _table_md5(conn) -> str:
    return conn.execute(
        "SELECT md5(coalesce(string_agg(concat_ws('|', id, species_id, status, longitude, latitude,"
        " ST_AsEWKT(geom)), E'\\n' ORDER BY id), '')) FROM geocoded_localities"
    ).fetchone()[0]


def test_first_run_asks_each_locality_once_and_a_rerun_asks_nothing(db, database_url, data_dir):
    localities = devil_localities()
    assert 8 <= len(localities) <= 20, "the lab gives the devil a dozen or so distinct localities"
    with FakeGeocoder() as fake, dg.instance_for_test() as instance:
        first = _run(instance, database_url, data_dir, fake)
        assert sorted(fake.answered) == localities  # N calls, each locality once
        assert {r["path"] for r in fake.requests} == {"/search"}
        assert all(r["query"]["format"] == "jsonv2" and r["query"]["limit"] == "1" for r in fake.requests)
        assert all(r["ua"] == USER_AGENT for r in fake.requests)
        meta = metadata(first, "geocoded_localities")
        assert (meta["action"], meta["calls_made"], meta["answers_reused"]) == ("loaded", len(localities), 0)
        records = sum(1 for r in lab_records(DEVIL) if "decimalLatitude" not in r and r.get("locality"))
        assert meta["rows"] == meta["localities"] == records
        assert 0 < meta["found"] < records  # the unknown texts are recorded as not found
        before = _table_md5(db)

        second = _run(instance, database_url, data_dir, fake)
        assert len(fake.requests) == len(localities)  # re-run: 0 calls
        meta = metadata(second, "geocoded_localities")
        assert (meta["action"], meta["reason"], meta["calls_made"]) == ("skipped", "nothing changed", 0)
        assert _table_md5(db) == before


def test_a_geocoder_failing_half_way_then_a_rerun_makes_exactly_the_missing_calls(db, database_url, data_dir):
    localities = devil_localities()
    half = len(localities) // 2
    with FakeGeocoder() as fake, dg.instance_for_test() as instance:
        fake.fail_after = half
        failed = _run(instance, database_url, data_dir, fake, raise_on_error=False)
        assert not failed.success
        assert len(fake.answered) == half
        statuses = dict(db.execute("SELECT status, count(*) FROM geocode_calls GROUP BY status").fetchall())
        # Every answer received was committed; the failed call is pending (asked, never answered).
        assert statuses.pop("pending") == 1 and sum(statuses.values()) == half
        # Nothing was loaded: the table was never even built (its first load never committed).
        assert db.execute("SELECT to_regclass('geocoded_localities')").fetchone() == (None,)

        fake.fail_after = None
        resumed = _run(instance, database_url, data_dir, fake)
        meta = metadata(resumed, "geocoded_localities")
        assert (meta["calls_made"], meta["answers_reused"]) == (len(localities) - half, half)
        # A paid call is never repeated: every locality was answered exactly once over both runs.
        assert sorted(fake.answered) == localities
        assert db.execute("SELECT max(attempts) FROM geocode_calls").fetchone() == (2,)
        assert db.execute("SELECT count(*) FROM geocode_calls WHERE status = 'pending'").fetchone() == (0,)


class CountingGeocoder:
    """The lab gazetteer, counting its answers; raises after ``die_after`` of them (the process dies)."""

    service = LabGeocoder.service

    def __init__(self, die_after: int | None = None) -> None:
        self.inner = LabGeocoder()
        self.asked: list[str] = []
        self.die_after = die_after

    def geocode(self, normalized: str) -> GeocodeAnswer:
        if self.die_after is not None and len(self.asked) >= self.die_after:
            raise KeyboardInterrupt("the process died mid-run")
        self.asked.append(normalized)
        return self.inner.geocode(normalized)


def test_a_process_dying_half_way_resumes_with_the_remaining_calls(db, database_url, data_dir):
    with dg.instance_for_test() as instance:
        dg.materialize(
            [gbif_raw], instance=instance, partition_key=DEVIL, resources=resources(database_url, data_dir)
        )
    species = species_by_slug(DEVIL)
    localities = devil_localities()
    dying = CountingGeocoder(die_after=len(localities) // 2)
    with pytest.raises(KeyboardInterrupt):
        refresh_geocoded_localities(
            db,
            species=species,
            raw_path=data_dir / "raw" / f"{DEVIL}.json",
            geocoder=dying,
            salt=TEST_LEDGER_SALT,
            run_id="dies",
        )
    resuming = CountingGeocoder()
    result = refresh_geocoded_localities(
        db,
        species=species,
        raw_path=data_dir / "raw" / f"{DEVIL}.json",
        geocoder=resuming,
        salt=TEST_LEDGER_SALT,
        run_id="resumes",
    )
    assert sorted(dying.asked + resuming.asked) == localities
    assert (result.run.calls, result.run.reused) == (len(localities) - len(dying.asked), len(dying.asked))
    assert result.refresh.action == "loaded"


def test_a_changed_ledger_entry_reloads_and_an_unchanged_one_skips(db, database_url, data_dir):
    with FakeGeocoder() as fake, dg.instance_for_test() as instance:
        _run(instance, database_url, data_dir, fake)
        hobart = ledger_key(TEST_LEDGER_SALT, "hobart")
        assert "hobart" in devil_localities()
        # The cache changed (a corrected answer): the job key follows the ledger's checksum.
        db.execute("UPDATE geocode_calls SET longitude = 147.33 WHERE idempotency_key = %s", [hobart])
        changed = metadata(_run(instance, database_url, data_dir, fake), "geocoded_localities")
        assert (changed["action"], changed["reason"], changed["calls_made"]) == ("loaded", "input changed", 0)
        longitudes = db.execute(
            "SELECT DISTINCT ST_X(geom) FROM geocoded_localities WHERE longitude = 147.33"
        ).fetchall()
        assert longitudes == [(147.33,)]
        again = metadata(_run(instance, database_url, data_dir, fake), "geocoded_localities")
        assert (again["action"], again["reason"]) == ("skipped", "nothing changed")


def test_neither_the_salt_nor_any_address_text_is_stored(db, database_url, data_dir):
    with FakeGeocoder() as fake, dg.instance_for_test() as instance:
        _run(instance, database_url, data_dir, fake)
    texts = set(devil_localities()) | {r["locality"].strip() for r in lab_records(DEVIL) if r.get("locality")}
    stored = "\n".join(
        row[0]
        for table in ("geocode_calls", "geocoded_localities", "target_state", "provenance")
        for row in db.execute(f"SELECT t::text FROM {table} AS t").fetchall()  # noqa: S608 (fixed names)
    ).casefold()
    assert stored, "the tables hold rows"
    assert TEST_LEDGER_SALT.casefold() not in stored
    assert [text for text in texts if text.casefold() in stored] == []


def test_keys_are_hmacs_of_the_normalized_text():
    assert normalize_locality("  CRADLE   Mountain ") == normalize_locality("cradle mountain")
    key = ledger_key("salt-a", "hobart")
    assert len(key) == 64 and key != ledger_key("salt-b", "hobart")
    assert key == ledger_key("salt-a", normalize_locality(" Hobart"))
    with pytest.raises(ValueError, match="GEOCODER_LEDGER_SALT"):
        ledger_key("", "hobart")


def test_the_http_geocoder_keeps_to_its_rate_limit():
    now = [100.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    with FakeGeocoder() as fake:
        geocoder = HttpGeocoder(fake.base_url, requests_per_second=1.0, clock=lambda: now[0], sleep=sleep)
        answers = [geocoder.geocode(q) for q in ("hobart", "nowhere at all", "launceston")]
    assert slept == [1.0, 1.0]
    assert [a.status for a in answers] == ["found", "not_found", "found"]
    assert (answers[0].longitude, answers[0].latitude) == (147.3272, -42.8821)


def test_an_unchanged_snapshot_skips_from_the_memo_and_a_wrong_memo_is_not_trusted(
    db, database_url, data_dir, monkeypatch
):
    with FakeGeocoder() as fake, dg.instance_for_test() as instance:
        first = metadata(_run(instance, database_url, data_dir, fake), "geocoded_localities")
        before = _table_md5(db)
        memo = data_dir / "memos" / "geocoded_localities" / f"{DEVIL}.json"
        assert memo.exists()
        assert TEST_LEDGER_SALT not in memo.read_text(encoding="utf-8")

        def no_parse(*_args, **_kwargs):
            raise AssertionError("the skip parsed the raw snapshot")

        def no_read(*_args, **_kwargs):
            raise AssertionError("the skip read the ledger's entries")

        # An unchanged snapshot: the skip is decided from the memo and the ledger's stamp, the records and
        # the entries unread.
        with monkeypatch.context() as patched:
            patched.setattr(geocoded, "localities_to_geocode", no_parse)
            patched.setattr(geocoded, "answers_for", no_read)
            again = metadata(_run(instance, database_url, data_dir, fake), "geocoded_localities")
        assert (again["action"], again["reason"]) == ("skipped", "nothing changed")
        assert (again["localities"], again["found"]) == (first["localities"], first["found"])
        assert again["job_key"] == first["job_key"]

        # A hand edit of the table: the repair reads the entries (and the records) and writes the same rows.
        db.execute("DELETE FROM geocoded_localities WHERE id = (SELECT min(id) FROM geocoded_localities)")
        db.commit()
        repaired = metadata(_run(instance, database_url, data_dir, fake), "geocoded_localities")
        assert repaired["action"] == "loaded" and repaired["reason"].startswith(EDITED_OUTSIDE)
        assert (repaired["job_key"], repaired["found"]) == (first["job_key"], first["found"])
        assert _table_md5(db) == before

        # A memo that no longer tells the truth costs a parse, never a wrong row or a wrong skip.
        wrong = json.loads(memo.read_text(encoding="utf-8"))
        wrong["records_sha256"] = "0" * 64
        memo.write_text(json.dumps(wrong), encoding="utf-8")
        checked = metadata(_run(instance, database_url, data_dir, fake), "geocoded_localities")
        assert (checked["action"], checked["reason"]) == ("skipped", "nothing changed")
        assert json.loads(memo.read_text(encoding="utf-8"))["records_sha256"] != "0" * 64
        assert _table_md5(db) == before

        # The keys beside the memo are read only once the ledger changed; keys that are not the ones the
        # memo names (the same keys, other record counts) cost a parse too, and are written again.
        keys = memo.with_name(f"{DEVIL}.keys.json")
        kept_keys = keys.read_bytes()
        keys.write_text(json.dumps({k: n * 2 for k, n in json.loads(kept_keys).items()}), encoding="utf-8")
        db.execute("UPDATE geocode_calls SET attempts = attempts WHERE false")  # a write: a new version
        db.commit()
        with monkeypatch.context() as patched:
            patched.setattr(geocoded, "localities_to_geocode", no_parse)
            failed = _run(instance, database_url, data_dir, fake, raise_on_error=False)
        [failure] = failed.get_step_failure_events()
        assert "parsed the raw snapshot" in failure.event_specific_data.error.to_string()
        checked = metadata(_run(instance, database_url, data_dir, fake), "geocoded_localities")
        assert (checked["action"], checked["reason"]) == ("skipped", "nothing changed")
        assert keys.read_bytes() == kept_keys
        assert _table_md5(db) == before


def test_every_write_to_the_ledger_renews_its_version_and_a_rollback_keeps_it(db):
    ensure_state_tables(db)
    versions = [ledger_version(db).token]
    writes = [
        "INSERT INTO geocode_calls (service, idempotency_key, status) VALUES ('s', 'k1', 'pending')",
        "UPDATE geocode_calls SET status = 'not_found' WHERE idempotency_key = 'k1'",
        "UPDATE geocode_calls SET attempts = attempts WHERE idempotency_key = 'no such key'",
        "DELETE FROM geocode_calls WHERE idempotency_key = 'k1'",
        "TRUNCATE geocode_calls",
    ]
    for statement in writes:
        db.execute(statement)
        versions.append(ledger_version(db).token)
    assert len(set(versions)) == len(versions), "a statement that wrote (or could have) kept the version"
    with pytest.raises(psycopg.errors.CheckViolation), db.transaction():
        db.execute("INSERT INTO geocode_calls (service, idempotency_key, status) VALUES ('s', 'k2', 'found')")
    assert ledger_version(db).token == versions[-1], "a rolled-back write renewed the version"
    assert ledger_version(db).verifying is False


# Two species in registry order, the second with localities the first lacks: its calls write the ledger
# after the first's memo was written.
FIRST_OF_TWO, SECOND_OF_TWO = "thylacinus-cynocephalus", "ornithorhynchus-anatinus"


def test_a_skip_reads_the_ledgers_version_and_asks_for_the_stamp_only_after_a_write(
    db, database_url, data_dir, monkeypatch
):
    """The first run names the ledger's version in each memo after its calls (the first species' memo
    too, written before the second's calls); a skip that finds it unchanged asks for nothing else. Any
    write to the ledger (here one that changes no value) renews the version: the next skip asks for the
    entries' stamp, finds it unchanged, and names the new version. make repair trusts no version."""
    stamps_asked: list[object] = []

    def counted_stamp(conn, service, keys):
        stamps_asked.append(service)
        return answers_stamp(conn, service, keys)

    def actions(result) -> dict[str | None, str]:
        return {
            event.partition: event.materialization.metadata["action"].value
            for event in result.get_asset_materialization_events()
            if event.asset_key == dg.AssetKey("geocoded_localities")
        }

    memos = [
        data_dir / "memos" / "geocoded_localities" / f"{slug}.json" for slug in (FIRST_OF_TWO, SECOND_OF_TWO)
    ]
    # One partition at a time, so that the second species' calls follow the first's memo.
    monkeypatch.setattr("surveillance_pipeline.places.assets.partitions_side_by_side", lambda: 1)
    with FakeGeocoder() as fake, dg.instance_for_test() as instance:
        bound = resources(database_url, data_dir)
        bound["geocoder"] = GeocoderSource(
            kind="http", base_url=fake.base_url, requests_per_second=1000.0, ledger_salt=TEST_LEDGER_SALT
        )

        def run_both(**overrides):
            return dg.materialize(
                [gbif_raw, geocoded_localities],
                instance=instance,
                resources={**bound, **overrides},
                tags=partition_range_tags(FIRST_OF_TWO, SECOND_OF_TWO),
            )

        first = run_both()
        assert actions(first) == {FIRST_OF_TWO: "loaded", SECOND_OF_TWO: "loaded"}
        # The first species has 11 localities, the second 4 more: each asked once.
        assert len(fake.answered) == len(set(fake.answered)) == 15, "the second species made calls"
        version = ledger_version(db).token
        assert [json.loads(m.read_text(encoding="utf-8"))["ledger"]["version"] for m in memos] == [
            version
        ] * 2
        monkeypatch.setattr(geocoded, "answers_stamp", counted_stamp)

        skipped = run_both()
        assert actions(skipped) == {FIRST_OF_TWO: "skipped", SECOND_OF_TWO: "skipped"} and stamps_asked == []

        db.execute("UPDATE geocode_calls SET attempts = attempts")
        renewed = ledger_version(db).token
        after_write = run_both()
        assert actions(after_write) == {FIRST_OF_TWO: "skipped", SECOND_OF_TWO: "skipped"}
        assert len(stamps_asked) == 2, "a skip after a write to the ledger trusted the old version"
        assert [json.loads(m.read_text(encoding="utf-8"))["ledger"]["version"] for m in memos] == [
            renewed
        ] * 2

        stamps_asked.clear()
        run_both()
        assert stamps_asked == []

        repair = run_both(warehouse=Warehouse(database_url=database_url, verify_targets=True))
        assert actions(repair) == {FIRST_OF_TWO: "skipped", SECOND_OF_TWO: "skipped"}
        assert len(stamps_asked) >= 2, "make repair's skip trusted the ledger's version"
