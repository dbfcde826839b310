"""The CI assertion for every asset: materialized twice, and again from scratch on shuffled input, same bytes.

The assets come from the assembled Definitions, not from a list kept here, so a new asset cannot escape.
Each asset declares the tables and data folders it writes (``orchestration.outputs``); an asset
without the declaration fails this test, and so does a table or file that no declaration covers.

Compared: every declared table by an md5 of its rows in primary-key order (a table without a key: in the
order of its rows' text), every file under data/ by sha256, and the data version Dagster recorded for every
asset partition. No output is a float that depends on summation order (masked coordinates are computed
point by point, rounded to 6 decimals; sums are integer counts), so every comparison is exact.

Left out of the row md5: ``timestamptz`` columns and columns named ``run_id``. They record when, and in
which Dagster run, a row was written (``applied_at``, ``sample_drift.recorded_at`` and ``.run_id``): a
log of the runs, which a fresh database cannot repeat, not the rows' content.

Species: the first SPECIES_COUNT partitions in registry order, not all 71, to keep the suite's time
modest (test_lab_run already runs all 71 twice through make run's code path).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
import psycopg
import pytest

from surveillance_pipeline.commands.run import batch_days_present
from surveillance_pipeline.definitions import assemble
from surveillance_pipeline.gbif.registry import partition_keys
from surveillance_pipeline.orchestration.outputs import declared_outputs
from surveillance_pipeline.orchestration.reporting import recorded_data_version
from surveillance_pipeline.releases.assets import PUBLISHING_GROUP
from surveillance_pipeline_tests.conftest import scratch_database
from surveillance_pipeline_tests.support.file_digests import file_hashes
from surveillance_pipeline_tests.support.pipeline import (
    SPECIES_COUNT,
    resources,
    rows_md5,
    run_everything,
)

pytestmark = [pytest.mark.db, pytest.mark.dagster]

# Groups left out, each with its reason. Publishing acts on GBIF with an account's credentials (it mints
# DOIs): an external asset that no job of make run's plan can include (test_publishing), reported by the
# register_derived_dataset job, which test_registration covers against a fake GBIF.
EXCLUDED_GROUPS = {PUBLISHING_GROUP: "needs GBIF credentials and posts to GBIF; see test_registration"}
# Folders of data/ that hold inputs the lab writes before the runs (deliveries, batches), not outputs.
INPUT_FOLDERS = ("deliveries", "batches")
# The refresh machinery's own tables: run ids and times by design; what they hold is checked elsewhere.
# Made by the migrations of the project's own tables on first connect, whichever assets run.
STATE_TABLES = {
    "target_state",
    "provenance",
    "target_schema",
    "state_migrations",
    "batch_ledger",
    "external_calls",
    "geocode_calls",
    "geocode_ledger_version",
    "target_edits",
    "spatial_ref_sys",
}


def covered_assets(defs: dg.Definitions) -> tuple[dict[dg.AssetKey, Any], list[str], list[str]]:
    """Every materializable asset outside the excluded groups, with its declared outputs.

    Returns (covered assets -> declared outputs, excluded asset names, observed-only asset names).
    """
    graph = defs.resolve_asset_graph()
    covered: dict[dg.AssetKey, Any] = {}
    excluded: list[str] = []
    observed: list[str] = []
    for key in sorted(graph.get_all_asset_keys()):
        node = graph.get(key)
        if node.group_name in EXCLUDED_GROUPS:
            excluded.append(key.to_user_string())
            continue
        if not node.is_materializable:
            # An observable source (devil_delivery) is read, never written: it has no output to compare.
            assert node.is_observable, f"{key.to_user_string()} is neither materializable nor observable"
            observed.append(key.to_user_string())
            continue
        outputs = declared_outputs(dict(node.metadata))
        assert outputs is not None, (
            f"{key.to_user_string()} declares no outputs: add outputs_metadata(tables=..., folders=...)"
        )
        covered[key] = outputs
    return covered, excluded, observed


def data_versions(defs: dg.Definitions, instance: dg.DagsterInstance, keys, root: Path) -> dict[str, Any]:
    """Dagster's latest data version of every partition of every covered asset."""
    versions: dict[str, Any] = {}
    species = set(partition_keys()[:SPECIES_COUNT])
    days = set(batch_days_present(root))
    for key in keys:
        partitions_def = defs.resolve_assets_def(key).partitions_def
        if partitions_def is None:
            partitions: list[str | None] = [None]
        else:
            every = partitions_def.get_partition_keys(dynamic_partitions_store=instance)
            partitions = [p for p in every if p in species or p in days]
            assert partitions, key
        for partition in partitions:
            versions[f"{key.to_user_string()}[{partition}]"] = recorded_data_version(instance, key, partition)
    return versions


def snapshot(defs, instance, database_url: str, root: Path, covered) -> dict[str, Any]:
    with psycopg.connect(database_url, autocommit=True) as conn:
        tables = {table: rows_md5(conn, table) for outputs in covered.values() for table in outputs.tables}
    return {
        "tables": tables,
        "files": file_hashes(root),
        "data_versions": data_versions(defs, instance, covered, root),
    }


def assert_every_output_is_declared(database_url: str, root: Path, covered) -> None:
    """No table and no file appears that no covered asset declares: a new writer must declare itself."""
    declared_tables = {table for outputs in covered.values() for table in outputs.tables}
    declared_folders = {folder for outputs in covered.values() for folder in outputs.folders}
    with psycopg.connect(database_url, autocommit=True) as conn:
        # A partition (occurrences_<species_id>) belongs to its declared parent, whose md5 covers its rows.
        present = {
            row[0]
            for row in conn.execute(
                "SELECT c.relname FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace"
                " WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition"
            ).fetchall()
        }
    assert present - STATE_TABLES <= declared_tables, present - STATE_TABLES - declared_tables
    for relative in file_hashes(root):
        inside = [f for f in (*declared_folders, *INPUT_FOLDERS) if relative.startswith(f + "/")]
        assert inside, f"data/{relative} is in no asset's declared folders"
    for folder in declared_folders:
        assert (root / folder).is_dir(), f"data/{folder} is declared but nothing was written there"
    leftovers = [p.name for p in root.rglob("*") if p.name.endswith((".staging", ".old"))]
    assert not leftovers, leftovers


def test_every_asset_gives_the_same_outputs_twice_and_from_scratch_on_shuffled_input(
    db, database_url, server_url, postgres_instance, tmp_path
):
    root = tmp_path / "data"
    defs = assemble(resources(database_url, root))
    covered, excluded, observed = covered_assets(defs)
    assert excluded == ["derived_dataset_registration"]
    assert observed == ["devil_delivery", "gbif_downloads"]

    assert run_everything(defs, postgres_instance, root) == set(covered)
    assert_every_output_is_declared(database_url, root, covered)
    first = snapshot(defs, postgres_instance, database_url, root, covered)
    assert first["tables"] and first["files"] and None not in first["data_versions"].values()

    assert run_everything(defs, postgres_instance, root) == set(covered)
    assert snapshot(defs, postgres_instance, database_url, root, covered) == first

    fresh_root = tmp_path / "fresh" / "data"
    with scratch_database(server_url, "surveillance_shuffled") as fresh_url:
        fresh_defs = assemble(resources(fresh_url, fresh_root, edit="shuffle"))
        assert run_everything(fresh_defs, postgres_instance, fresh_root) == set(covered)
        shuffled = snapshot(fresh_defs, postgres_instance, fresh_url, fresh_root, covered)
    assert shuffled["tables"] == first["tables"]
    assert shuffled["files"] == first["files"]
    assert shuffled["data_versions"] == first["data_versions"]
    print(f"covered {sorted(k.to_user_string() for k in covered)}; excluded {excluded}; observed {observed}")
