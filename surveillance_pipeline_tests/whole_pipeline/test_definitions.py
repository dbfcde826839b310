"""The code location loads, and its contract (asset names, partitions, pools, versions) holds."""

import dagster as dg

from surveillance_pipeline.definitions import defs
from surveillance_pipeline.gbif.registry import partition_keys
from surveillance_pipeline.occurrences.load import OCCURRENCES
from surveillance_pipeline.orchestration.run_config import run_config_for


def test_definitions_load_with_every_asset_the_issues_name():
    graph = defs.resolve_asset_graph()
    keys = {key.to_user_string() for key in graph.get_all_asset_keys()}
    assert keys == {
        "gbif_downloads",
        "gbif_raw",
        "gbif_derived",
        "occurrences",
        "occurrence_quality",
        "quality_report",
        "occurrence_sample",
        "occurrence_sample_summary",
        "devil_delivery",
        "devil_snapshot",
        "occurrence_batches",
        "sample_export",
        "devil_snapshot_export",
        "masked_release",
        "derived_dataset_registration",
        "geocoded_localities",
        "region_assignment",
    }
    assert graph.get(dg.AssetKey("occurrences")).parent_keys == {dg.AssetKey("gbif_derived")}
    assert graph.get(dg.AssetKey("gbif_derived")).parent_keys == {dg.AssetKey("gbif_raw")}
    assert graph.get(dg.AssetKey("gbif_raw")).parent_keys == {dg.AssetKey("gbif_downloads")}
    assert graph.get(dg.AssetKey("masked_release")).parent_keys == {
        dg.AssetKey("occurrences"),
        dg.AssetKey("occurrence_quality"),
    }
    assert graph.get(dg.AssetKey("occurrence_quality")).parent_keys == {
        dg.AssetKey("occurrences"),
        dg.AssetKey("gbif_derived"),
    }
    assert graph.get(dg.AssetKey("quality_report")).parent_keys == {dg.AssetKey("occurrence_quality")}
    assert graph.get(dg.AssetKey("geocoded_localities")).parent_keys == {dg.AssetKey("gbif_raw")}
    assert graph.get(dg.AssetKey("region_assignment")).parent_keys == {
        dg.AssetKey("occurrences"),
        dg.AssetKey("geocoded_localities"),
    }


def test_each_table_is_verified_and_each_planned_asset_says_what_is_out_of_sync_outside_the_asset_jobs():
    graph = defs.resolve_asset_graph()
    checks = {(key.asset_key.to_user_string(), key.name) for key in graph.asset_check_keys}
    # Each table-writing asset verifies its tables (verification.py); region_assignment and
    # occurrence_quality write two each.
    holds = {
        (asset, "holds_its_snapshot")
        for asset in (
            "occurrences",
            "occurrence_quality",
            "occurrence_sample",
            "geocoded_localities",
            "region_assignment",
            "devil_snapshot",
            "occurrence_batches",
        )
    }
    # Each species-partitioned asset the plan decides says which partitions the next run would load.
    in_sync = {
        (asset, "partitions_in_sync")
        for asset in (
            "gbif_derived",
            "occurrences",
            "occurrence_quality",
            "occurrence_sample",
            "masked_release",
            "geocoded_localities",
            "region_assignment",
        )
    }
    assert checks == {
        ("occurrence_sample_summary", "sample_engines_agree"),
        ("devil_snapshot", "devil_snapshot_holds"),
        ("region_assignment", "regions_table_holds_its_snapshot"),
        ("occurrence_quality", "quality_references_table_holds_its_snapshot"),
        *holds,
        *in_sync,
    }
    # They scan whole tables: the asset jobs leave them to verify_targets and its schedule.
    verify = defs.resolve_job_def("verify_targets")
    assert {
        (k.asset_key.to_user_string(), k.name) for k in verify.asset_layer.asset_graph.asset_check_keys
    } == (
        checks
        - {("occurrence_sample_summary", "sample_engines_agree"), ("devil_snapshot", "devil_snapshot_holds")}
        - in_sync
    )
    for job in ("species_assets", "whole_target_assets", "batch_days"):
        in_job = {k.name for k in defs.resolve_job_def(job).asset_layer.asset_graph.asset_check_keys}
        assert "holds_its_snapshot" not in in_job and "regions_table_holds_its_snapshot" not in in_job
        assert "partitions_in_sync" not in in_job, "the plan's checks run from their sensor, not each run"
    assert defs.get_schedule_def("daily_verify_targets").job_name == "verify_targets"


def test_masked_release_runs_with_the_species_job_and_its_replay_job_is_defined():
    species_job = defs.resolve_job_def("species_assets")
    assert dg.AssetKey("masked_release") in species_job.asset_layer.executable_asset_keys
    assert run_config_for(["masked_release"])["ops"]["masked_release"]["config"] == {
        "min_m": 100.0,
        "max_m": 1000.0,
    }
    assert defs.resolve_job_def("replay_masked_release").name == "replay_masked_release"


def test_spine_assets_are_partitioned_by_species_and_pooled_per_target():
    for name in ("gbif_raw", "gbif_derived", "occurrences", "geocoded_localities", "region_assignment"):
        assets_def = defs.resolve_assets_def(name)
        assert assets_def.partitions_def.get_partition_keys() == partition_keys()
        assert assets_def.op.pool == name
    code_version = defs.resolve_assets_def("occurrences").code_versions_by_key[dg.AssetKey("occurrences")]
    assert code_version == f"transform-v{OCCURRENCES.transform_version}.schema-v{OCCURRENCES.schema_version}"


def test_warehouse_url_is_read_from_the_environment_at_run_time():
    warehouse = defs.resources["warehouse"]
    # An EnvVar, not a value: nothing secret is resolved into the definitions.
    assert isinstance(warehouse.database_url, dg.EnvVar)


def test_the_geocoder_ledger_salt_is_read_from_the_environment_at_run_time():
    geocoder = defs.resources["geocoder"]
    assert isinstance(geocoder.ledger_salt, dg.EnvVar)
    assert geocoder.ledger_salt.env_var_name == "GEOCODER_LEDGER_SALT"


def test_the_release_masking_key_is_read_from_the_environment_at_run_time():
    masking = defs.resources["masking"]
    assert isinstance(masking.key, dg.EnvVar)
    assert masking.key.env_var_name == "RELEASE_MASKING_KEY"


def test_the_species_job_runs_the_places_assets():
    selected = {
        key.to_user_string() for key in defs.resolve_job_def("species_assets").asset_layer.selected_asset_keys
    }
    assert {"geocoded_localities", "region_assignment"} <= selected
