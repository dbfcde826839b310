"""The project's commands as a user runs them, in a process of their own."""

from __future__ import annotations

import os
import subprocess
import sys

from surveillance_pipeline_tests.support.dagster_dev import PROJECT_ROOT


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
