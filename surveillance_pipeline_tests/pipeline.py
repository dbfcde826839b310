"""Moved to support/pipeline.py. This name stays only for faults/, which is being changed elsewhere and
moves later; then this file goes. New code imports surveillance_pipeline_tests.support.pipeline."""

from surveillance_pipeline_tests.support.pipeline import resources  # noqa: F401
