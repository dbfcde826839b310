"""Nothing that publishes can be bulk-launched: read from the assembled code location, as the UI reads it.

"Materialize all" and "Materialize unsynced" offer the materializable assets of AssetSelection.all() (or
of a group, for a group's backfill); the asset jobs, the schedule and the sensors launch what they target;
the automation sensor evaluates the conditions of the assets it targets. Publishing must be in none of
these: only the register_derived_dataset job registers, and only when its launch says publish: true.
"""

import dagster as dg
import pytest

from surveillance_pipeline.definitions import defs
from surveillance_pipeline.releases.assets import PUBLISHING_GROUP, register_derived_dataset

PUBLISHING_JOB = "register_derived_dataset"
REGISTRATION = dg.AssetKey("derived_dataset_registration")


def _publishing(graph) -> set[dg.AssetKey]:
    return {key for key in graph.get_all_asset_keys() if graph.get(key).group_name == PUBLISHING_GROUP}


def test_publishing_is_in_the_graph_but_nothing_can_materialize_or_automate_it():
    graph = defs.resolve_asset_graph()
    publishing = _publishing(graph)
    assert publishing == {REGISTRATION}, "the key users know stays in the graph"
    assert graph.get(REGISTRATION).parent_keys == {dg.AssetKey("sample_export")}
    for key in publishing:
        assert not graph.get(key).is_materializable, key
        assert graph.get(key).automation_condition is None, key
    # "Materialize all" / "Materialize unsynced" and a backfill of the group offer materializable keys only.
    assert not publishing & dg.AssetSelection.all().resolve(graph)
    assert not publishing & dg.AssetSelection.groups(PUBLISHING_GROUP).resolve(graph)
    assert not publishing & graph.materializable_asset_keys


def test_no_asset_job_and_no_automation_includes_publishing():
    graph = defs.resolve_asset_graph()
    publishing = _publishing(graph)
    jobs = {job.name: job for job in defs.resolve_all_job_defs()}
    assert "__ASSET_JOB" in jobs, "the implicit job over every asset is checked too"
    for name, job in jobs.items():
        assert not publishing & set(job.asset_layer.executable_asset_keys), name
    automated = {key for key in graph.get_all_asset_keys() if graph.get(key).automation_condition is not None}
    assert automated and not publishing & automated
    for sensor in defs.sensors or []:
        if isinstance(sensor, dg.AutomationConditionSensorDefinition):
            assert not publishing & sensor.asset_selection.resolve(graph), sensor.name


def test_the_publishing_job_is_launched_by_hand_only_and_must_say_publish():
    launched = [target.job_name for sensor in defs.sensors or [] for target in sensor.targets] + [
        schedule.job_name for schedule in defs.schedules or []
    ]
    assert launched and PUBLISHING_JOB not in launched
    assert defs.resolve_job_def(PUBLISHING_JOB).name == PUBLISHING_JOB
    # `publish` has no default: a launch that does not say it is refused before anything runs.
    config = {"ops": {"register_derived_dataset_op": {"config": {"source_url_base": "https://x.example"}}}}
    with pytest.raises(dg.DagsterInvalidConfigError, match="publish"):
        dg.validate_run_config(register_derived_dataset, config)
