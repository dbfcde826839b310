"""A month-later input flagged record by record: the flags end as a full reload of that input leaves them."""

from __future__ import annotations

import dataclasses
import json

import dagster as dg
import psycopg
import pytest
from psycopg import sql

from surveillance_pipeline.core.keys import sha256_file
from surveillance_pipeline.core.line_digests import read_kept_lines
from surveillance_pipeline.core.sql_files import load_sql
from surveillance_pipeline.gbif.raw_snapshots import RECORDS_SUFFIX, read_raw_snapshot
from surveillance_pipeline.gbif.records import INTEGER_TERMS, RECORD_COLUMNS, RecordsWriter, escape
from surveillance_pipeline.gbif.registry import species_by_slug
from surveillance_pipeline.quality import flags
from surveillance_pipeline.quality.assets import occurrence_quality
from surveillance_pipeline.quality.references import ReferenceLayers
from surveillance_pipeline.quality.settings import configured_rules
from surveillance_pipeline_tests.support.pipeline import (
    DEVIL,
    SPINE,
    data_version,
    metadata,
    resources,
    rows_md5,
    state_row,
)

pytestmark = [pytest.mark.db, pytest.mark.dagster]
QUALITY_CHAIN = [*SPINE, occurrence_quality]
TARGETS = ("occurrences", "occurrence_quality")


def _materialize(instance, database_url, data_dir, edit):
    result = dg.materialize(
        QUALITY_CHAIN,
        instance=instance,
        partition_key=DEVIL,
        resources=resources(database_url, data_dir, edit),
    )
    return {asset: metadata(result, asset) for asset in TARGETS}


def _held(db, instance):
    """What a fresh load of the same input must equal: rows, state rows (key, parts, rows, fingerprint),
    and the data versions Dagster keeps."""
    return {
        target: (
            rows_md5(db, target),
            state_row(db, target),
            db.execute(
                "SELECT digest FROM target_state WHERE target = %s AND partition_key = %s", [target, DEVIL]
            ).fetchone(),
            data_version(instance, target),
        )
        for target in TARGETS
    }


def _flag_counts(db):
    return db.execute(
        "SELECT count(*) FILTER (WHERE flag_basis), count(*) FILTER (WHERE flag_capitals),"
        " count(*) FILTER (WHERE flag_old), count(*) FILTER (WHERE flag_sea),"
        " count(*) FILTER (WHERE flag_uncertainty), count(*) FILTER (WHERE flag_duplicates)"
        " FROM occurrence_quality"
    ).fetchone()


def test_a_month_later_download_is_flagged_by_its_changes_and_ends_as_a_fresh_load(
    db, database_url, data_dir, monkeypatch
):
    with dg.instance_for_test() as instance:
        _materialize(instance, database_url, data_dir, "none")
        before = _flag_counts(db)
        first = _held(db, instance)

        later = _materialize(instance, database_url, data_dir, "month_later")
        assert {target: later[target]["reason"] for target in TARGETS} == dict.fromkeys(
            TARGETS, "input changed"
        )
        # occurrences keeps no basisOfRecord or uncertainty: only the two moved records changed for it.
        assert later["occurrences"]["records_changed"] == "3 added, 2 changed, 2 removed of 2,001"
        assert later["occurrence_quality"]["records_changed"] == "3 added, 4 changed, 2 removed of 2,001"
        # Each edit reached its test: a fossil, Canberra, 1850, the sea, 20 km; two duplicates (the copy, and
        # the 1850 record, also at the point and dataset of the record it came from).
        after = _flag_counts(db)
        assert [a - b for a, b in zip(after, before, strict=True)] == [1, 1, 1, 1, 1, 2]
        by_delta = _held(db, instance)

        # The delta's outlier sums started from those the first load kept; the fresh load below takes
        # every pair, with no kept sums to start from.
        kept_sums = data_dir / "memos" / "occurrence_quality" / f"{DEVIL}.sites.bin"
        assert kept_sums.is_file()
        kept_sums.unlink()
        db.execute(
            "DELETE FROM target_state WHERE partition_key = %s AND target = ANY(%s)", [DEVIL, list(TARGETS)]
        )
        reloaded = _materialize(instance, database_url, data_dir, "month_later")
        assert all("records_changed" not in reloaded[target] for target in TARGETS)
        assert _held(db, instance) == by_delta

        back = _materialize(instance, database_url, data_dir, "none")
        assert back["occurrence_quality"]["records_changed"] == "2 added, 4 changed, 3 removed of 2,000"
        assert _held(db, instance) == first
    _flags_made_under_another_habitat_are_no_base_for_a_delta(db, data_dir, monkeypatch)


def _flags_made_under_another_habitat_are_no_base_for_a_delta(db, data_dir, monkeypatch):
    """The sea test reads the habitat: a species now said to live at sea reloads its flags whole, and
    a delta after that reuses the flags made under the new habitat. (A step of the test above: it needs a
    loaded warehouse, and the reference layers take 7 s to load into a fresh one.)"""
    at_sea_before = db.execute("SELECT count(*) FROM occurrence_quality WHERE flag_sea").fetchone()[0]
    assert at_sea_before > 0
    devil = species_by_slug(DEVIL)
    marine = dataclasses.replace(devil, habitat="marine")
    rules, layers, raw = configured_rules({}), ReferenceLayers(), data_dir / "raw" / f"{DEVIL}.json"
    at_sea = flags.refresh_occurrence_quality(
        db, species=marine, raw_path=raw, rules=rules, layers=layers, run_id="r1"
    )
    assert (at_sea.action, at_sea.reason, at_sea.changes) == ("loaded", "input changed", None)
    assert db.execute("SELECT count(*) FROM occurrence_quality WHERE flag_sea").fetchone() == (0,)
    # The raw snapshot moves on (its retrieval time): a delta now, over flags made for a marine species.
    snapshot = json.loads(raw.read_text(encoding="utf-8"))
    snapshot["retrieved"] = "2027-01-01T00:00:00Z"
    raw.write_text(json.dumps(snapshot, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    later = flags.refresh_occurrence_quality(
        db, species=marine, raw_path=raw, rules=rules, layers=layers, run_id="r2"
    )
    assert later.changes is not None and later.changes.applied and later.changes.total == 0
    # Past its share limit the delta gives way to a full reload in the same transaction, to the same rows:
    # given up once it counted the records whose rows it would make, before making them.
    rows = rows_md5(db, "occurrence_quality")
    snapshot["retrieved"] = "2027-02-01T00:00:00Z"
    raw.write_text(json.dumps(snapshot, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    monkeypatch.setattr(flags, "DELTA_SHARE_LIMIT", -1.0)
    whole = flags.refresh_occurrence_quality(
        db, species=marine, raw_path=raw, rules=rules, layers=layers, run_id="r3"
    )
    assert whole.changes is not None and not whole.changes.applied
    assert (whole.action, whole.changes.describe()) == (
        "loaded",
        f"reloaded: delta too large (0 of {whole.rows:,} records may differ)",
    )
    assert rows_md5(db, "occurrence_quality") == rows


def _rows_by_id(db):
    return {
        row[0]: row[1:]
        for row in db.execute(
            "SELECT id, flag_duplicates, flag_outliers, decimal_longitude, decimal_latitude, dataset_key"
            " FROM occurrence_quality"
        ).fetchall()
    }


def test_a_delta_remakes_the_rows_of_unchanged_records_its_changes_reach(db, database_url, data_dir):
    """A record's duplicates and outliers flags depend on other records: when those change, the delta
    makes its row again although its own terms did not change, and ends as a full reload does."""
    with dg.instance_for_test() as instance:
        _materialize(instance, database_url, data_dir, "none")
        before = _rows_by_id(db)
        later = _materialize(instance, database_url, data_dir, "neighbours_changed")
        changed = later["occurrence_quality"]["records_changed"]
        assert changed.startswith("500 added,") and changed.endswith(" 1 removed of 2,499"), changed
        after = _rows_by_id(db)
        unchanged = [
            record for record in before if record in after and before[record][2:] == after[record][2:]
        ]
        # The next record of the group whose first went is no longer a duplicate, and some unchanged
        # records' outliers verdict turned.
        assert any(before[r][0] and not after[r][0] for r in unchanged)
        assert any(before[r][1] != after[r][1] for r in unchanged)
        by_delta = _held(db, instance)

        db.execute(
            "DELETE FROM target_state WHERE partition_key = %s AND target = ANY(%s)", [DEVIL, list(TARGETS)]
        )
        reloaded = _materialize(instance, database_url, data_dir, "neighbours_changed")
        assert all("records_changed" not in reloaded[target] for target in TARGETS)
        assert _held(db, instance) == by_delta


def _records_file_snapshot(raw, records):
    """The devil's raw snapshot as a download gives it: a header and a records file of ``records``."""

    def field(name, record):
        value = record.get(name)
        if value is None:
            return ""
        if name == "issues":
            return ";".join(escape(issue) for issue in value)
        if name == "key" or name in INTEGER_TERMS:
            return str(int(value))
        return repr(float(value)) if isinstance(value, float) else escape(str(value))

    snapshot = read_raw_snapshot(raw)
    name = f"{DEVIL}{RECORDS_SUFFIX}"
    with RecordsWriter(raw.with_name(name)) as writer:
        writer.write_lines(
            "\t".join(field(column, record) for column in RECORD_COLUMNS) + "\n"
            for record in sorted(records, key=lambda record: record["key"])
        )
        sha256 = writer.commit()
    header = dataclasses.replace(
        snapshot, records=[], records_file=name, records_sha256=sha256, count=len(records)
    )
    raw.write_bytes(header.to_bytes())


def test_a_delta_of_a_records_file_copies_in_only_its_changed_lines_and_ends_as_a_full_reload(
    db, database_url, data_dir
):
    """A download's records file: each load keeps its lines' digests, and the next delta copies in only
    the lines that changed, takes every other record's terms from its held row, and ends as a full reload
    of the same file does (rows, fingerprint). Without the kept lines (make repair trusts none), the
    same rows."""
    with dg.instance_for_test() as instance:
        _materialize(instance, database_url, data_dir, "none")
    raw = data_dir / "raw" / f"{DEVIL}.json"
    records = read_raw_snapshot(raw).records
    devil, rules, layers = species_by_slug(DEVIL), configured_rules({}), ReferenceLayers()
    memos = flags.QualityMemos(
        site_sums=data_dir / "memos" / "quality" / "sites.bin",
        term_lines=data_dir / "memos" / "quality" / "lines.bin",
    )

    def refresh(run_id, trusted=True):
        return flags.refresh_occurrence_quality(
            db,
            species=devil,
            raw_path=raw,
            rules=rules,
            layers=layers,
            run_id=run_id,
            memos=dataclasses.replace(memos, trusted=trusted),
        )

    # From the search answer to a records file of the same records: a delta with no kept lines of it.
    _records_file_snapshot(raw, records)
    first = refresh("r1")
    assert first.changes is not None and first.changes.applied and first.changes.total == 0
    kept = read_kept_lines(memos.term_lines, source_sha256=sha256_file(raw), kind="records_file")
    assert kept is not None and len(kept.ids) == len(records)

    # A month later: a record now a fossil, one moved to Canberra (near the capital), one gone from the
    # file (occurrences, not loaded again here, still keeps it: the flags follow the file).
    edited = [dict(record) for record in records]
    edited[10]["basisOfRecord"] = "FOSSIL_SPECIMEN"
    edited[20]["decimalLongitude"], edited[20]["decimalLatitude"] = 149.13, -35.28
    gone = edited.pop(30)["key"]
    _records_file_snapshot(raw, edited)
    with db.transaction(force_rollback=True):
        columns = sql.SQL(", ").join(
            sql.SQL("{} text").format(sql.Identifier(n)) for n in flags.INCOMING_COLUMNS
        )
        db.execute(load_sql(flags.PACKAGE, "create_incoming_quality_terms").format(columns=columns))
        db.execute(load_sql(flags.PACKAGE, "create_incoming_gone_records"))
        snapshot = read_raw_snapshot(raw)
        lines = flags.copy_terms(db, snapshot, raw, sha256_file(raw), kept)
        assert len(lines.ids) == len(edited)
        copied = {row[0] for row in db.execute("SELECT key::bigint FROM incoming_quality_terms").fetchall()}
        assert copied == {edited[10]["key"], edited[20]["key"]}
        assert db.execute("SELECT id FROM incoming_gone_records").fetchall() == [(gone,)]
    later = refresh("r2")
    assert later.changes is not None and later.changes.applied
    assert (later.changes.changed, later.changes.removed) == (2, 1)
    assert db.execute(
        "SELECT flag_basis, flag_capitals FROM occurrence_quality WHERE id = ANY(%s) ORDER BY id",
        [[edited[10]["key"], edited[20]["key"]]],
    ).fetchall() == [(True, False), (False, True)]
    by_delta = _quality_held(db)

    # The same file loaded whole, from nothing kept: the same rows, key and fingerprint.
    db.execute("DELETE FROM target_state WHERE target = 'occurrence_quality' AND partition_key = %s", [DEVIL])
    whole = refresh("r3", trusted=False)
    assert (whole.action, whole.changes) == ("loaded", None)
    assert _quality_held(db) == by_delta

    # A gbifID on two lines (its line unchanged, so the kept digests know it): not applied by the changed
    # lines alone; the full reload refuses it at the primary key, and the partition keeps its rows.
    _records_file_snapshot(raw, [*edited, edited[40]])
    with pytest.raises(psycopg.errors.UniqueViolation):
        refresh("r4")
    db.rollback()
    assert _quality_held(db) == by_delta


def _quality_held(db):
    digest = db.execute(
        "SELECT digest FROM target_state WHERE target = 'occurrence_quality' AND partition_key = %s", [DEVIL]
    ).fetchone()
    return rows_md5(db, "occurrence_quality"), state_row(db, "occurrence_quality"), digest


def _outlier_sites(db, devil, raw, rules, *, from_occurrences):
    """quality_points and incoming_outliers as copy_outliers makes them from every line of ``raw``, the
    points read from occurrences or from the terms; rolled back."""
    with db.transaction(force_rollback=True):
        columns = sql.SQL(", ").join(
            sql.SQL("{} text").format(sql.Identifier(n)) for n in flags.INCOMING_COLUMNS
        )
        db.execute(load_sql(flags.PACKAGE, "create_incoming_quality_terms").format(columns=columns))
        db.execute(load_sql(flags.PACKAGE, "create_incoming_gone_records"))
        flags.copy_terms(db, read_raw_snapshot(raw), raw, sha256_file(raw))
        flags.copy_outliers(db, devil, rules, points_from_occurrences=from_occurrences)
        return (
            db.execute("SELECT lon, lat, records FROM quality_points ORDER BY 1, 2, 3").fetchall(),
            db.execute("SELECT lon, lat, outlier FROM incoming_outliers ORDER BY 1, 2, 3").fetchall(),
        )


def test_the_outliers_sites_read_from_occurrences_are_those_of_the_terms_while_it_holds_their_derive(
    db, database_url, data_dir
):
    """occurrences holds each record's terms' point where it gave it one, while its rows are the derive
    of the raw snapshot the terms come from: the sites read from it (and from the terms for the records
    it holds without a point, those published at 0,0) are the terms' own. A raw snapshot occurrences was
    not loaded from is told apart, and its sites come from its terms."""
    with dg.instance_for_test() as instance:
        _materialize(instance, database_url, data_dir, "published_at_zero")
    raw = data_dir / "raw" / f"{DEVIL}.json"
    devil, rules = species_by_slug(DEVIL), configured_rules({})
    assert flags.occurrences_made_from(db, devil, sha256_file(raw))
    without_point = db.execute(
        "SELECT count(*) FROM occurrence_quality AS q JOIN occurrences AS o USING (species_id, id)"
        " WHERE o.longitude IS NULL AND q.decimal_longitude IS NOT NULL"
    ).fetchone()[0]
    assert without_point == 2  # published at 0,0 (support/pipeline.py): read from their terms
    from_terms = _outlier_sites(db, devil, raw, rules, from_occurrences=False)
    assert _outlier_sites(db, devil, raw, rules, from_occurrences=True) == from_terms
    assert len(from_terms[0]) > 100 and any(outlier for _, _, outlier in from_terms[1])

    # A record moved in the raw snapshot alone (occurrences not loaded again): no longer occurrences' derive.
    records = [dict(record) for record in read_raw_snapshot(raw).records]
    records[20]["decimalLongitude"], records[20]["decimalLatitude"] = 149.13, -35.28
    _records_file_snapshot(raw, records)
    assert not flags.occurrences_made_from(db, devil, sha256_file(raw))
