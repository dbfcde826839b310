"""Moved to support/dagster_dev.py. This name stays only for faults/, which is being changed elsewhere and
moves later; then this file goes. New code imports surveillance_pipeline_tests.support.dagster_dev."""

from surveillance_pipeline_tests.support.dagster_dev import (  # noqa: F401
    DAGSTER,
    PROJECT_ROOT,
    DagsterDev,
    project_dagster_home,
)
