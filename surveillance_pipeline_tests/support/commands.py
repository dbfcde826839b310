"""The project's commands as a user runs them, in a process of their own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from surveillance_pipeline_tests.support.dagster_dev import PROJECT_ROOT, project_dagster_home


def verify_command(warehouse: str) -> subprocess.CompletedProcess[str]:
    """``make verify``'s command against ``warehouse``: exit 0 when every partition holds its snapshot."""
    return subprocess.run(  # noqa: S603  # fixed argv, no shell
        [sys.executable, "-m", "surveillance_pipeline.commands.verify"],
        cwd=PROJECT_ROOT,
        env={**os.environ, "SURVEILLANCE_DATABASE_URL": warehouse},
        capture_output=True,
        text=True,
        timeout=300,
    )


def make_run_command(
    tmp_path: Path, dagster_storage_url: str, database_url: str, data_dir: Path, extra_env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """`make run`'s own command in a process of its own, on the test's instance, warehouse and folder."""
    return run_make_run(
        {
            **os.environ,
            **project_dagster_home(tmp_path / "dagster_home", dagster_storage_url),
            "SURVEILLANCE_DATABASE_URL": database_url,
            "SURVEILLANCE_DATA_DIR": str(data_dir),
            **extra_env,
        }
    )


def run_make_run(env: dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """`make run`'s own command (surveillance_pipeline.commands.make_run) in ``env``."""
    return subprocess.run(  # noqa: S603  # fixed argv, no shell
        [sys.executable, "-m", "surveillance_pipeline.commands.make_run"],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
