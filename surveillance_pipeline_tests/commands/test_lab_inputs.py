"""make run writes the lab's inputs the registry in use can have, and runs with what it wrote."""

import os
import subprocess
import sys

import dagster as dg
import pytest

from surveillance_pipeline.commands.run import prepare_lab_inputs
from surveillance_pipeline.gbif.registry import packaged_registry_path
from surveillance_pipeline_tests.support.commands import make_run_command
from surveillance_pipeline_tests.support.dagster_dev import PROJECT_ROOT


def test_a_registry_without_the_devil_gets_the_lab_batches_but_no_devil_delivery(tmp_path, monkeypatch):
    registry = tmp_path / "species.csv"
    registry.write_text(
        "species_id,slug,scientific_name,vernacular_name,taxon_key,kingdom,country,state_province,"
        "lab_records,habitat\n1,delphinium-fissum,Delphinium fissum,,7276601,Plantae,ES,,0,\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("SURVEILLANCE_SPECIES_FILE", str(registry))
    prepare_lab_inputs(tmp_path / "data")
    assert not (tmp_path / "data" / "deliveries").exists()
    assert sorted((tmp_path / "data" / "batches").glob("*.csv")), "the lab's batches are written all the same"


@pytest.mark.db
@pytest.mark.dagster
def test_make_run_with_a_registry_without_the_devil_succeeds_and_the_plan_says_what_it_did(
    db, database_url, data_dir, dagster_storage_url, postgres_instance, tmp_path
):
    """No delivery of the devil's: devil_snapshot loads nothing and is not materialized, its export is
    skipped by Dagster, the run succeeds, and make plan says both skip (before: make run FAILED at
    devil_snapshot, 'no delivery yet', while make plan said it would skip)."""
    lines = packaged_registry_path().read_text(encoding="utf-8").splitlines()
    registry = tmp_path / "species.csv"
    registry.write_text("\n".join([lines[0], *(line for line in lines[2:4])]) + "\n", encoding="utf-8")
    env = {"SURVEILLANCE_SPECIES_FILE": str(registry), "GBIF_SOURCE": "lab"}
    finished = make_run_command(tmp_path, dagster_storage_url, database_url, data_dir, env)
    output = finished.stdout + finished.stderr
    assert finished.returncode == 0, output
    assert "Traceback" not in output and "make run: " not in finished.stderr, output
    assert "no delivery yet, so nothing to load" in finished.stderr, output
    table = {line.split()[0]: line.split()[1:3] for line in finished.stdout.splitlines()[2:] if line.strip()}
    assert table["occurrences"] == ["2", "0"] and "devil_snapshot" not in table, output
    for asset in ("devil_snapshot", "devil_snapshot_export"):
        assert postgres_instance.get_latest_materialization_event(dg.AssetKey(asset)) is None, asset
    assert not (data_dir / "exports" / "devil_snapshot").exists()
    plan = subprocess.run(  # noqa: S603  # fixed argv, no shell
        [sys.executable, "-m", "surveillance_pipeline.commands.plan"],
        cwd=PROJECT_ROOT,
        env={
            **os.environ,
            **env,
            "SURVEILLANCE_DATABASE_URL": database_url,
            "SURVEILLANCE_DATA_DIR": str(data_dir),
        },
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert plan.returncode == 0, plan.stdout + plan.stderr
    planned = {
        line.split()[0]: line.split()[1:4] for line in plan.stdout.splitlines() if line.startswith("  ")
    }
    assert planned["devil_snapshot"] == ["0", "0", "1"] and planned["devil_snapshot_export"] == [
        "0",
        "0",
        "1",
    ], plan.stdout
