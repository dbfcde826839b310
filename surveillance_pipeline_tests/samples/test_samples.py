"""md5-capped samples: the rule, PostGIS against Python, per-species refresh, and membership drift."""

import csv
import random

import dagster as dg
import pytest

from surveillance_pipeline.gbif.registry import species_by_slug
from surveillance_pipeline.samples.assets import (
    occurrence_sample,
    occurrence_sample_summary,
    sample_engines_agree,
)
from surveillance_pipeline.samples.load import held_sample_inputs, sample_job_parts
from surveillance_pipeline.samples.rules import md5_text, pick_sample, summarize_ids
from surveillance_pipeline_tests.support.pipeline import (
    DEVIL,
    SAMPLED,
    SUMMARIZED,
    data_version,
    materialize,
    metadata,
    resources,
    state_row,
)

DEVIL_ID = species_by_slug(DEVIL).species_id
PLATYPUS = "ornithorhynchus-anatinus"


@pytest.mark.parametrize(
    ("ids", "cap", "expected"),
    [
        ([], 3, []),
        ([10, 11, 12, 13], 5, [(11, 1), (12, 2), (13, 3), (10, 4)]),  # md5 order, not id order
        ([13, 12, 11, 10], 2, [(11, 1), (12, 2)]),  # input order does not matter
        ([10, 11, 12, 13], 1, [(11, 1)]),
    ],
)
def test_pick_sample_orders_by_md5_of_the_id_text_then_id(ids, cap, expected):
    assert md5_text(11) < md5_text(12) < md5_text(13) < md5_text(10)
    assert pick_sample(ids, cap) == expected


def test_pick_sample_is_the_sort_by_md5_text_then_id_on_many_ids():
    # The pick compares raw digests; the rule is written over their hex text. Seeded ids of every length.
    rng = random.Random(23)
    ids = [rng.randrange(1, 10 ** rng.randrange(1, 19)) for _ in range(20_000)]
    expected = sorted(set(ids), key=lambda i: (md5_text(i), i))[:500]
    assert [i for i, _ in pick_sample(sorted(set(ids)), 500)] == expected


def test_summary_matches_postgres_string_agg_format():
    summary = summarize_ids({1: [12, 3], 2: [7], 3: []})
    assert (summary.records, summary.species) == (3, 2)
    assert summary.ids_md5 == md5_text("3,7,12")


@pytest.fixture()
def instance():
    with dg.instance_for_test() as instance:
        yield instance


def _sample(db, species_id=DEVIL_ID):
    return db.execute(
        "SELECT id, pick FROM occurrence_sample WHERE species_id = %s ORDER BY pick", [species_id]
    ).fetchall()


def _derived_ids(data_dir, slug=DEVIL):
    with (data_dir / "derived" / f"{slug}.csv").open() as handle:
        return [int(row["id"]) for row in csv.DictReader(handle)]


@pytest.mark.db
def test_postgis_sample_equals_the_python_rule_and_reruns_skip(db, database_url, data_dir, instance):
    result = materialize(instance, database_url, data_dir, assets=SAMPLED)
    meta = metadata(result, "occurrence_sample")
    assert (meta["action"], meta["reason"], meta["rows"]) == ("loaded", "first load", 100)
    assert _sample(db) == pick_sample(_derived_ids(data_dir), 100)
    assert data_version(instance, "occurrence_sample") == state_row(db, "occurrence_sample")[0]
    assert state_row(db, "occurrence_sample")[1]["input"] == state_row(db)[0], "input = upstream job key"

    again = materialize(instance, database_url, data_dir, assets=SAMPLED)
    assert metadata(again, "occurrence_sample")["action"] == "skipped"
    # The step's guess of the key, from occurrences' keys read once without a lock, is the key: the skip
    # was the one statement (refresh_partition's likely_parts).
    held = held_sample_inputs(db).get("occurrences", DEVIL)
    assert held is not None and sample_job_parts(held, 100).key == state_row(db, "occurrence_sample")[0]

    smaller = materialize(
        instance, database_url, data_dir, assets=[occurrence_sample], sample_config={"cap": 10}
    )
    meta = metadata(smaller, "occurrence_sample")
    assert (meta["action"], meta["reason"], meta["rows"]) == ("loaded", "config changed", 10)
    assert _sample(db) == pick_sample(_derived_ids(data_dir), 10)
    assert [entry["pick"] for entry in meta["left"]] == list(range(11, 101))


@pytest.mark.db
def test_a_change_to_one_species_refreshes_only_its_sample(db, database_url, data_dir, instance):
    for slug in (DEVIL, PLATYPUS):
        materialize(instance, database_url, data_dir, slug, assets=SAMPLED)
    platypus_before = _sample(db, species_by_slug(PLATYPUS).species_id)
    changed = materialize(instance, database_url, data_dir, DEVIL, assets=SAMPLED, edit="drop_lowest_id")
    assert metadata(changed, "occurrence_sample")["reason"] == "input changed"
    untouched = materialize(instance, database_url, data_dir, PLATYPUS, assets=SAMPLED)
    assert metadata(untouched, "occurrence_sample")["action"] == "skipped"
    assert _sample(db, species_by_slug(PLATYPUS).species_id) == platypus_before


@pytest.mark.db
def test_records_read_in_reverse_order_change_no_membership(db, database_url, data_dir, instance):
    materialize(instance, database_url, data_dir, assets=SAMPLED)
    before = _sample(db)
    # GBIF serving the same records in reverse: the raw snapshot is the same file, nothing reloads.
    reversed_fetch = materialize(instance, database_url, data_dir, assets=SAMPLED, edit="reverse")
    assert {
        metadata(reversed_fetch, a)["action"] for a in ("gbif_raw", "occurrences", "occurrence_sample")
    } == {"skipped"}
    # The table's rows physically stored in reverse order, and the sample forced to recompute. The same
    # rows, so written as a refresh writes them (the watch would otherwise note an edit, rightly).
    with db.transaction():
        db.execute("SELECT set_config('surveillance.refreshing', 'on', true)")
        db.execute("CREATE TEMPORARY TABLE stash ON COMMIT DROP AS SELECT * FROM occurrences")
        db.execute("DELETE FROM occurrences")
        db.execute("INSERT INTO occurrences SELECT * FROM stash ORDER BY id DESC")
        db.execute("DELETE FROM target_state WHERE target = 'occurrence_sample'")
    recomputed = materialize(instance, database_url, data_dir, assets=[occurrence_sample])
    meta = metadata(recomputed, "occurrence_sample")
    assert meta["action"] == "loaded"
    assert (meta["entered"], meta["left"]) == ([], [])
    assert _sample(db) == before


@pytest.mark.db
def test_a_new_record_before_the_100th_pick_enters_and_the_old_100th_leaves(
    db, database_url, data_dir, instance
):
    materialize(instance, database_url, data_dir, assets=SAMPLED)
    before = _sample(db)
    result = materialize(
        instance, database_url, data_dir, assets=SAMPLED, edit="add_record_before_the_100th_pick"
    )
    meta = metadata(result, "occurrence_sample")
    assert meta["reason"] == "input changed"
    new_id = max(_derived_ids(data_dir))
    new_pick = dict(_sample(db))[new_id]
    assert meta["entered"] == [{"id": new_id, "pick": new_pick}]
    assert meta["left"] == [{"id": before[99][0], "pick": 100}]
    drift = db.execute(
        "SELECT id, change, pick FROM sample_drift WHERE run_id = %s ORDER BY change", [result.run_id]
    ).fetchall()
    assert drift == [(new_id, "entered", new_pick), (before[99][0], "left", 100)]


@pytest.mark.db
def test_engines_agree_and_the_check_fails_when_the_table_is_tampered(db, database_url, data_dir, instance):
    for slug in (DEVIL, PLATYPUS):
        result = materialize(
            instance,
            database_url,
            data_dir,
            slug,
            assets=SUMMARIZED,
            occurrences_config={"licenses": ["CC BY 4.0"]},
        )
    checks = result.get_asset_check_evaluations()
    assert [c.passed for c in checks] == [True]
    lines = {name: value.value for name, value in checks[0].metadata.items()}
    assert lines["postgis"] == lines["duckdb"] == lines["python"]
    assert lines["postgis"].startswith("records=200 species=2")
    assert "inputs" not in lines

    # Nothing changed: the summaries found for these inputs are reported again, not recomputed.
    again = dg.materialize(
        [occurrence_sample_summary, sample_engines_agree],
        instance=instance,
        resources=resources(database_url, data_dir),
    ).get_asset_check_evaluations()[0]
    assert again.passed
    assert again.metadata["inputs"].value.startswith("unchanged since an earlier check")
    assert {name: again.metadata[name].value for name in lines} == lines

    # A hand edit is noted by the sample's watch: no reuse, the engines run and disagree.
    db.execute("DELETE FROM occurrence_sample WHERE pick = 7 AND species_id = %s", [DEVIL_ID])
    tampered = dg.materialize(
        [occurrence_sample_summary, sample_engines_agree],
        instance=instance,
        resources=resources(database_url, data_dir),
    )
    evaluation = tampered.get_asset_check_evaluations()[0]
    assert evaluation.check_name == sample_engines_agree.check_key.name
    assert not evaluation.passed
    assert evaluation.metadata["postgis"].value.startswith("records=199")
