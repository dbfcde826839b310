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


# make run prints its own summary: the runs' console logs show warnings and errors only.
QUIET_CONSOLE: dict[str, Any] = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def quiet_run_config(op_names: Iterable[str]) -> dict[str, Any]:
    """The checked-in config for these ops, with the console quiet (make run's runs)."""
    return {**run_config_for(op_names), **QUIET_CONSOLE}
