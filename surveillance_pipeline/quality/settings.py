"""Where the quality tests' settings come from: a run's config over the user's quality file over defaults.

The quality file is YAML named by ``SURVEILLANCE_QUALITY_FILE`` (a file the user owns, like the species
registry), holding any of the keys of ``occurrence_quality``'s config, for example::

    enabled_tests: [gbif_issues, basis, uncertainty, sea, duplicates]
    uncertainty_limit_m: 5000

A key the run's config sets (in the launchpad, or a job's run config) wins over the file's. Dagster-free.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from surveillance_pipeline.core.errors import InputError
from surveillance_pipeline.core.settings import QUALITY_FILE_VARIABLE
from surveillance_pipeline.quality.rules import TESTS, QualityConfigError, QualityRules

ENABLED_TESTS = "enabled_tests"
# Each flat setting (a config key, a file key) -> the test and parameter it sets.
SETTINGS = {
    "gbif_issues": ("gbif_issues", "issues"),
    "basis_of_record": ("basis", "basis_of_record"),
    "uncertainty_limit_m": ("uncertainty", "limit_m"),
    "uncertainty_placeholders_m": ("uncertainty", "placeholders_m"),
    "precision_limit_degrees": ("precision", "limit_degrees"),
    "old_before_year": ("old", "before_year"),
    "zero_radius_degrees": ("zero", "radius_degrees"),
    "capitals_radius_m": ("capitals", "radius_m"),
    "centroids_radius_m": ("centroids", "radius_m"),
    "gbif_hq_radius_m": ("gbif_hq", "radius_m"),
    "sea_buffer_m": ("sea", "buffer_m"),
    "country_buffer_m": ("country", "buffer_m"),
    "outliers_multiplier": ("outliers", "multiplier"),
    "outliers_min_records": ("outliers", "min_records"),
    "outliers_exact_up_to_points": ("outliers", "exact_up_to_points"),
    "outliers_cell_degrees": ("outliers", "cell_degrees"),
}


def quality_file() -> Path | None:
    named = os.environ.get(QUALITY_FILE_VARIABLE, "").strip()
    return Path(named).expanduser().resolve() if named else None


def read_quality_file(path: Path) -> dict[str, Any]:
    """The settings a quality file holds; InputError naming the file and key for anything unusable."""
    import yaml

    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(
            path, "file", None, f"quality file not found (named by {QUALITY_FILE_VARIABLE})"
        ) from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "file"
        raise InputError(path, where, None, f"not YAML: {getattr(error, 'problem', error)}") from None
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise InputError(path, "file", None, "expected a mapping of settings")
    unknown = sorted(set(document) - {ENABLED_TESTS, *SETTINGS})
    if unknown:
        raise InputError(
            path, "file", unknown[0], f"unknown setting (known: {ENABLED_TESTS}, {', '.join(SETTINGS)})"
        )
    return dict(document)


def configured_rules(config: Mapping[str, Any], file: Path | None = None) -> QualityRules:
    """The rules of a run: ``config``'s set (non-null) values over the quality file's over the defaults."""
    path = file if file is not None else quality_file()
    settings = read_quality_file(path) if path is not None else {}
    settings.update({name: value for name, value in config.items() if value is not None})
    return rules_of(settings, path)


def rules_of(settings: Mapping[str, Any], path: Path | None = None) -> QualityRules:
    enabled = settings.get(ENABLED_TESTS)
    parameters: dict[str, dict[str, Any]] = {}
    for name, value in settings.items():
        if name in SETTINGS:
            test, parameter = SETTINGS[name]
            parameters.setdefault(test, {})[parameter] = value
    try:
        if enabled is not None and not isinstance(enabled, list):
            raise QualityConfigError(f"{ENABLED_TESTS} must be a list of test names, got {enabled!r}")
        disabled = None if enabled is None else [test.name for test in TESTS if test.name not in enabled]
        unknown = sorted(set(enabled or []) - {test.name for test in TESTS})
        if unknown:
            raise QualityConfigError(
                f"{ENABLED_TESTS}: unknown test {unknown} (known: {[t.name for t in TESTS]})"
            )
        return QualityRules.from_settings(disabled, parameters)
    except QualityConfigError as error:
        if path is not None:
            raise InputError(path, "file", None, str(error)) from None
        raise
