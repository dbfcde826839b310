"""A sensor's check evaluations, reported when what they say changes, and again after a newer
materialization of their asset.

Dagster shows a check's latest evaluation only while no materialization of its asset is newer; after it,
the check reads "not evaluated". Our runs write a materialization for every skip, so a finding that still
stands would vanish from the asset's node with the next skip of any partition. A sensor that keeps a
finding on show reports it again then: its cursor keeps, per check, what it last reported and the asset's
latest materialization at that moment.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import dagster as dg

# Per check: its asset, and the findings standing (rows of text; none: the check passes).
Findings = Mapping[tuple[str, str], Sequence[Sequence[str]]]


def changed_check_reports(
    context: dg.SensorEvaluationContext,
    findings: Findings,
    evaluation: Callable[[str, str, Sequence[Sequence[str]]], dg.AssetCheckEvaluation],
) -> dg.SensorResult:
    """The evaluations to report for ``findings`` (``evaluation(asset, check, rows)`` makes one): a check
    whose findings changed, or that has findings and a newer materialization of its asset since its last
    report, or whose findings are gone (reported passed once)."""
    reported: dict[str, list[Any]] = json.loads(context.cursor) if context.cursor else {}
    events = []
    for (asset, check), rows in findings.items():
        latest = context.instance.get_latest_materialization_event(dg.AssetKey(asset))
        state = [[list(row) for row in rows], latest.timestamp if latest is not None else None]
        name = f"{asset}/{check}"
        before = reported.get(name)
        if (rows and before != state) or (not rows and before is not None and before[0]):
            events.append(evaluation(asset, check, rows))
        reported[name] = state
    return dg.SensorResult(asset_events=events, cursor=json.dumps(reported, sort_keys=True))
