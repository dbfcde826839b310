"""A target as the tables state it, (label, relation, limit), and whether a measured ratio meets it."""

from __future__ import annotations

from typing import Any

Target = tuple[str, str, float]


def verdict(target: Target, value: float) -> str:
    _, relation, limit = target
    met = {"<=": value <= limit, "<": value < limit, ">=": value >= limit}[relation]
    return "met" if met else "MISSED"


def verdicts(targets: dict[str, Target], ratios: dict[str, Any]) -> dict[str, str]:
    return {key: verdict(targets[key], value) for key, value in ratios.items() if key in targets}


def ratio_rows(targets: dict[str, Target], ratios: dict[str, Any], extras: dict[str, str]) -> list[str]:
    """The rows of a ratio table: each target measured, then the ratios quoted without a target."""
    rows = [
        f"| {label} | {ratios[key]:.2f} | {relation} {limit:g} | {verdict(targets[key], ratios[key])} |"
        for key, (label, relation, limit) in targets.items()
        if key in ratios
    ]
    rows += [f"| {label} | {ratios[key]:.2f} | | |" for key, label in extras.items() if key in ratios]
    return rows


RATIO_HEADER = ["| ratio | measured | target | |", "| --- | ---: | ---: | --- |"]
