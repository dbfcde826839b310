"""The checked-in row-shaping run config (run_config.yaml), filtered to the ops a job or request runs."""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from importlib import resources
from typing import Any

import yaml


@cache
def checked_in_run_config() -> dict[str, Any]:
    text = resources.files(__package__).joinpath("run_config.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


def run_config_for(asset_names: Iterable[str]) -> dict[str, Any]:
    """The run config for these assets (only their ops: Dagster refuses config for ops not in the run)."""
    names = set(asset_names)
    ops = {name: config for name, config in checked_in_run_config()["ops"].items() if name in names}
    return {"ops": ops} if ops else {}


def op_config(asset_name: str) -> dict[str, Any]:
    """One asset's configured config (defaults apply for what the file leaves out)."""
    return dict(checked_in_run_config()["ops"].get(asset_name, {}).get("config", {}))


# A run whose console shows warnings and errors only (the tests' own runs). make run's runs keep the
# default, so their compute logs hold every event; its terminal is filtered instead
# (compute_logs.terminal_at_level).
QUIET_CONSOLE: dict[str, Any] = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
