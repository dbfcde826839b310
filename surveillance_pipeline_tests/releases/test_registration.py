"""Registering the sample release with GBIF: one POST per manifest, even when the answer is lost."""

import hashlib

import dagster as dg
import pytest

from surveillance_pipeline.lab.resources import LabGbifSource
from surveillance_pipeline.orchestration.resources import GbifAccount
from surveillance_pipeline.releases.assets import (
    derived_dataset_registration,
    register_derived_dataset,
    sample_export,
)
from surveillance_pipeline.samples.assets import occurrence_sample_summary
from surveillance_pipeline_tests.support.fake_gbif import FakeGbif
from surveillance_pipeline_tests.support.pipeline import SAMPLED, keep_all, materialize, resources

pytestmark = pytest.mark.db
PASSWORD = "s3cret-Pw-for-tests"
PUBLISH = {"publish": True, "source_url_base": "https://releases.example.org/sample"}


@pytest.fixture()
def instance():
    with dg.instance_for_test() as instance:
        yield instance


@pytest.fixture()
def gbif():
    with FakeGbif() as fake:
        yield fake


@pytest.fixture()
def released(db, database_url, data_dir, instance):
    for slug in ("sarcophilus-harrisii", "ornithorhynchus-anatinus"):
        materialize(instance, database_url, data_dir, slug, assets=SAMPLED)
    dg.materialize(
        [occurrence_sample_summary, sample_export],
        instance=instance,
        resources=resources(database_url, data_dir),
        run_config=keep_all("sample_export"),
    )
    return (data_dir / "exports" / "sample" / "manifest.json").read_bytes()


def _register(instance, database_url, data_dir, gbif, config, raise_on_error=True):
    return register_derived_dataset.execute_in_process(
        instance=instance,
        resources={
            **resources(database_url, data_dir),
            "gbif": LabGbifSource(source="lab", base_url=gbif.base_url),
            "gbif_account": GbifAccount(user="tester", password=PASSWORD),
        },
        run_config={"ops": {"register_derived_dataset_op": {"config": config}}},
        raise_on_error=raise_on_error,
    )


def _meta(result):
    [materialization] = result.asset_materializations_for_node("register_derived_dataset_op")
    assert materialization.asset_key == derived_dataset_registration.key
    return {k: v.value for k, v in materialization.metadata.items()}


def test_unpublished_release_calls_nothing_and_reports_nothing(
    released, database_url, data_dir, instance, gbif
):
    result = _register(instance, database_url, data_dir, gbif, {"publish": False})
    assert result.success and result.asset_materializations_for_node("register_derived_dataset_op") == []
    assert gbif.requests == []
    assert instance.get_latest_materialization_event(derived_dataset_registration.key) is None


def test_registers_once_and_a_rerun_posts_nothing(released, db, database_url, data_dir, instance, gbif):
    first = _meta(_register(instance, database_url, data_dir, gbif, PUBLISH))
    [post] = gbif.posts()
    manifest_sha = hashlib.sha256(released).hexdigest()
    assert post["body"]["sourceUrl"] == f"https://releases.example.org/sample/{manifest_sha}"
    assert sum(post["body"]["relatedDatasets"].values()) == 200, "every sampled record counted once"
    assert post["authorization"].startswith("Basic ")
    assert (first["action"], first["doi"]) == ("called", "10.15468/dd.fake001")

    again = _meta(_register(instance, database_url, data_dir, gbif, PUBLISH))
    assert (again["action"], again["doi"]) == ("skipped", "10.15468/dd.fake001")
    assert len(gbif.posts()) == 1
    rows = db.execute(
        "SELECT idempotency_key, status, adopted, response::text FROM external_calls"
    ).fetchall()
    assert [(r[0], r[1], r[2]) for r in rows] == [(manifest_sha, "done", False)]
    assert PASSWORD not in repr(rows) and PASSWORD not in repr(first)


def test_an_answer_lost_after_create_is_reconciled_not_posted_again(
    released, db, database_url, data_dir, instance, gbif
):
    # Someone else's derived datasets first, so the reconcile has to page through the listing.
    gbif.derived_datasets.extend(
        {"sourceUrl": f"https://elsewhere.example/{i}", "doi": f"10.1/x{i}"} for i in range(230)
    )
    gbif.create_mode = "drop"
    lost = _register(instance, database_url, data_dir, gbif, PUBLISH, raise_on_error=False)
    assert not lost.success
    assert db.execute("SELECT status FROM external_calls").fetchall() == [("pending",)]
    assert len(gbif.posts()) == 1

    gbif.create_mode = "created"
    adopted = _meta(_register(instance, database_url, data_dir, gbif, PUBLISH))
    assert adopted["action"] == "adopted" and adopted["doi"] == "10.15468/dd.fake231"
    assert len(gbif.posts()) == 1, "GBIF minted one DOI for this release, whatever happened"
    listing_offsets = [
        r["query"]["offset"] for r in gbif.requests if r["path"].startswith("/v1/derivedDataset/user/")
    ]
    assert listing_offsets[-3:] == ["0", "100", "200"]
    assert db.execute("SELECT status, adopted FROM external_calls").fetchall() == [("done", True)]
