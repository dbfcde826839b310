"""`make run` when a step fails: the user sees the step's own error last, not a crash of the summary."""

import os
import subprocess
import sys

import pytest

from surveillance_pipeline.lab_run import summarize
from surveillance_pipeline_tests.dagster_dev import PROJECT_ROOT, project_dagster_home

pytestmark = [pytest.mark.db, pytest.mark.dagster]


def test_a_failed_first_step_on_an_empty_warehouse_ends_with_its_own_error(
    db, database_url, data_dir, dagster_storage_url, postgres_instance, tmp_path
):
    # What a user gets by dropping something that is not a zip into data/downloads/.
    (data_dir / "downloads").mkdir()
    (data_dir / "downloads" / "bad.zip").write_text("this is not a zip\n")
    assert db.execute("SELECT to_regclass('provenance')").fetchone() == (None,)
    env = {
        **os.environ,
        **project_dagster_home(tmp_path / "dagster_home", dagster_storage_url),
        "SURVEILLANCE_DATABASE_URL": database_url,
        "SURVEILLANCE_DATA_DIR": str(data_dir),
        "GBIF_SOURCE": "download",
    }
    # As `make run` runs it, on the instance the fixture just wiped.
    finished = subprocess.run(  # noqa: S603  # fixed argv, no shell
        [sys.executable, "-m", "surveillance_pipeline.lab_run"],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = finished.stdout + finished.stderr
    assert finished.returncode != 0, output
    assert "UndefinedTable" not in output and "Traceback" not in output, output
    last = [line for line in finished.stderr.splitlines() if line.strip()][-1]
    # The reader's wording may change; the step and the file it names must not. The first step is the
    # observation of the downloads folder, before any load.
    assert last.startswith("make run: gbif_downloads failed: "), output
    assert "bad.zip" in last, output
    assert "FAILED" in finished.stdout, output


def test_the_summary_of_an_empty_warehouse_is_its_header(db, database_url):
    assert summarize(database_url, ["no-such-run"]) == [
        f"{'asset':<5} {'loaded':>6} {'skipped':>7} {'rows':>8} {'seconds':>7}  reason"
    ]
