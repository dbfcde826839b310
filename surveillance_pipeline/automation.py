"""Declarative automation: samples, summaries and exports refresh when what they read changes.

The sensor that evaluates the conditions starts RUNNING (Dagster's default sensor would start stopped).
Each refreshed asset still decides by its own job key, so an automated run that changes nothing skips.
"""

import dagster as dg

REFRESH_WHEN_INPUTS_CHANGE = dg.AutomationCondition.eager()

automation_sensor = dg.AutomationConditionSensorDefinition(
    "automation_sensor",
    target=dg.AssetSelection.all(),
    default_status=dg.DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=15,
    description="Evaluates each asset's automation condition (eager: refresh when a dependency updates).",
)
