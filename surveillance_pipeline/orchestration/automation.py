"""Declarative automation: samples, summaries and exports refresh when what they read changes.

"Changes" means a new data version, not a new materialization. Dagster's ``eager()`` reacts to any
materialization of a dependency (``newly_updated``), and every skip here is a materialization (with the
unchanged data version, so backfills end successful, dagster#34219): after a no-change backfill of 71
species, eager launched a 71-partition run of occurrence_sample that skipped every partition, then the
summary's and the export's. ``REFRESH_WHEN_INPUTS_CHANGE`` is eager with ``data_version_changed`` in place
of ``newly_updated``: a skip (same data version) triggers nothing; a load with a new version triggers
exactly the partitions that read it, once, on the next tick. As in eager, a dependency updated by a run
that also targeted this asset does not trigger it again, and nothing starts while a dependency is
missing or in progress.

The sensor that evaluates the conditions starts RUNNING (Dagster's default sensor would start stopped).
Each refreshed asset still decides by its own job key, so an automated run that changes nothing skips.
"""

import dagster as dg

_DEPENDENCY_DATA_CHANGED = dg.AutomationCondition.any_deps_match(
    (
        dg.AutomationCondition.data_version_changed() & ~dg.AutomationCondition.executed_with_root_target()
    ).with_label("data_version_changed_without_root")
).with_label("any_deps_data_version_changed")

REFRESH_WHEN_INPUTS_CHANGE = (
    dg.AutomationCondition.in_latest_time_window()
    & (dg.AutomationCondition.newly_missing() | _DEPENDENCY_DATA_CHANGED).since_last_handled()
    & ~dg.AutomationCondition.any_deps_missing()
    & ~dg.AutomationCondition.any_deps_in_progress()
    & ~dg.AutomationCondition.in_progress()
).with_label("eager, on data versions")

automation_sensor = dg.AutomationConditionSensorDefinition(
    "automation_sensor",
    target=dg.AssetSelection.all(),
    default_status=dg.DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=15,
    description="Evaluates each asset's automation condition: refresh when a dependency's data version "
    "changes (a skip, which keeps its version, triggers nothing).",
)
