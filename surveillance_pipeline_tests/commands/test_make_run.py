"""make run's first process: what it imports before it forks the process that weighs the species."""

from __future__ import annotations

import json
import subprocess  # noqa: S404  # a fresh interpreter, to see what an import pulls in
import sys

from surveillance_pipeline_tests.support.dagster_dev import PROJECT_ROOT

# What make_run.py imports before the fork must not bring these in: Dagster and the code location cost
# 1.3 s of one core, which the weighing would otherwise wait for.
HEAVY = ("dagster", "dagster_celery", "celery", "surveillance_pipeline.definitions", "pyarrow", "numpy")


def test_make_run_forks_the_weigher_before_it_imports_dagster():
    """Importing make_run (the package, the core, gbif, run_settings: all it needs to weigh) imports
    neither Dagster nor the code location; run.py, which it imports after the fork, does."""
    probe = (
        "import json, sys, surveillance_pipeline.commands.make_run;"
        f"print(json.dumps([name for name in {HEAVY!r} if name in sys.modules]))"
    )
    before = _imported(probe)
    assert before == []
    after = _imported(probe.replace("make_run;", "make_run, surveillance_pipeline.commands.run;"))
    assert "dagster" in after and "surveillance_pipeline.definitions" in after


def _imported(probe: str) -> list[str]:
    completed = subprocess.run(  # noqa: S603  # this interpreter, a fixed probe
        [sys.executable, "-c", probe], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True
    )
    return list(json.loads(completed.stdout.strip().splitlines()[-1]))
