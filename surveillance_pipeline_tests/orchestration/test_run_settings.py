"""One truth for the settings that change what a run writes: the run records them, a worker that resolves
one otherwise refuses the step, naming the setting and both values (run_settings.py, resources.py)."""

from __future__ import annotations

import dagster as dg
import pytest

from surveillance_pipeline.orchestration import run_settings
from surveillance_pipeline.orchestration.distributed import STEP_WORKER_VARIABLE
from surveillance_pipeline.orchestration.resources import DataPaths, Warehouse


@pytest.mark.parametrize(
    ("run", "here", "expected"),
    [
        ({"GBIF_SOURCE": "lab"}, {"GBIF_SOURCE": "lab"}, []),
        (
            {"GBIF_SOURCE": "download"},
            {"GBIF_SOURCE": "lab"},
            ["GBIF_SOURCE: the run has 'download', this worker 'lab'"],
        ),
        ({"GEOCODER": "http"}, {}, ["GEOCODER: the run has 'http', this worker '(unset)'"]),
        (
            {"GEOCODER": "lab", "SURVEILLANCE_DATA_DIR": "/a"},
            {"GEOCODER": "lab", "SURVEILLANCE_DATA_DIR": "/b"},
            ["SURVEILLANCE_DATA_DIR: the run has '/a', this worker '/b'"],
        ),
    ],
)
def test_differences_name_each_setting_and_both_values(run, here, expected):
    assert run_settings.differences(run, here) == expected


def test_every_data_shaping_setting_is_resolved_and_secrets_are_not_recorded(monkeypatch):
    monkeypatch.setenv("GEOCODER_LEDGER_SALT", "a-secret-salt")
    monkeypatch.setenv("RELEASE_MASKING_KEY", "a-secret-masking-key")
    monkeypatch.setenv(
        "SURVEILLANCE_DATABASE_URL", "postgresql://someone:a-password@db.example:5433/warehouse"
    )
    monkeypatch.setenv("GBIF_SOURCE", "download")
    resolved = run_settings.resolve()
    assert set(resolved) == {
        "GBIF_SOURCE",
        "GBIF_BASE_URL",
        "GBIF_FALLBACK_SOURCE",
        "GBIF_USER",
        "SURVEILLANCE_SPECIES_FILE",
        "SURVEILLANCE_QUALITY_FILE",
        "SURVEILLANCE_DATA_DIR",
        "SURVEILLANCE_DATABASE_URL",
        "GEOCODER",
        "GEOCODER_URL",
        "GEOCODER_LEDGER_SALT",
        "RELEASE_MASKING_KEY",
        "SURVEILLANCE_VERIFY_TARGETS",
    }
    assert resolved["GBIF_SOURCE"] == "download"
    assert resolved["SURVEILLANCE_DATABASE_URL"] == "someone@db.example:5433/warehouse"
    tag = run_settings.as_tags(resolved)[run_settings.SETTINGS_TAG]
    assert "a-secret-salt" not in tag and "a-password" not in tag and "a-secret-masking-key" not in tag
    assert run_settings.from_tags({run_settings.SETTINGS_TAG: tag}) == resolved


def test_the_quality_file_is_checked_by_content_not_by_path(monkeypatch, tmp_path):
    monkeypatch.delenv("SURVEILLANCE_QUALITY_FILE", raising=False)
    assert run_settings.resolve()["SURVEILLANCE_QUALITY_FILE"] == run_settings.UNSET
    here, there = tmp_path / "here.yaml", tmp_path / "elsewhere" / "there.yaml"
    there.parent.mkdir()
    here.write_text("uncertainty_limit_m: 5000\n")
    there.write_text("uncertainty_limit_m: 5000\n")
    monkeypatch.setenv("SURVEILLANCE_QUALITY_FILE", str(here))
    first = run_settings.resolve()["SURVEILLANCE_QUALITY_FILE"]
    monkeypatch.setenv("SURVEILLANCE_QUALITY_FILE", str(there))
    assert run_settings.resolve()["SURVEILLANCE_QUALITY_FILE"] == first
    there.write_text("uncertainty_limit_m: 2000\n")
    assert run_settings.resolve()["SURVEILLANCE_QUALITY_FILE"] != first


def _probe_run(tags: dict[str, str], tmp_path) -> dg.ExecuteInProcessResult:
    """One step using the warehouse and one using only the data folder, as a worker executes them."""

    @dg.asset
    def writes_rows(warehouse: Warehouse) -> None:
        pass

    @dg.asset
    def writes_files(paths: DataPaths) -> None:
        pass

    return dg.materialize(
        [writes_rows, writes_files],
        resources={
            "warehouse": Warehouse(database_url="postgresql://unused"),
            "paths": DataPaths(root=str(tmp_path)),
        },
        tags=tags,
        raise_on_error=False,
    )


def _resource_failure(result: dg.ExecuteInProcessResult) -> str:
    """The error of the resources' set-up: here the run's (one process), on a worker the step's alone."""
    (event,) = [e for e in result.all_events if e.event_type_value == "RESOURCE_INIT_FAILURE"]
    return event.event_specific_data.error.message  # type: ignore[union-attr]


def test_a_worker_refuses_a_step_of_a_run_resolved_otherwise(monkeypatch, tmp_path):
    monkeypatch.setenv(STEP_WORKER_VARIABLE, "1")
    monkeypatch.delenv("GBIF_SOURCE", raising=False)
    run = {**run_settings.resolve(), "GBIF_SOURCE": "download"}
    result = _probe_run(run_settings.as_tags(run), tmp_path)
    assert not result.success
    message = _resource_failure(result)
    assert "GBIF_SOURCE: the run has 'download', this worker 'lab'" in message, message


def test_a_worker_runs_a_step_of_a_run_resolved_alike_and_refuses_a_run_without_settings(
    monkeypatch, tmp_path
):
    monkeypatch.setenv(STEP_WORKER_VARIABLE, "1")
    assert _probe_run(run_settings.as_tags(run_settings.resolve()), tmp_path).success
    refused = _probe_run({}, tmp_path)
    assert not refused.success
    assert f"carries no {run_settings.SETTINGS_TAG} tag" in _resource_failure(refused)


def test_outside_a_worker_nothing_is_compared(monkeypatch, tmp_path):
    monkeypatch.delenv(STEP_WORKER_VARIABLE, raising=False)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    assert _probe_run({}, tmp_path).success
