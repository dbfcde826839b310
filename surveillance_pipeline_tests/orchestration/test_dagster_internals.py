"""Pins what the project takes from Dagster's private API
(surveillance_pipeline/orchestration/dagster_internals.py).

Each test states the behaviour relied on; an upgrade that changes it fails here. The frame names the
SIGTERM watcher relies on are pinned in test_run_health.py, the batch path in test_reporting.py.
"""

import ast
import pkgutil
import tomllib
from pathlib import Path

import dagster as dg
import pytest

from surveillance_pipeline.commands.run import WORKSPACE_FILE
from surveillance_pipeline.definitions import EXECUTOR
from surveillance_pipeline.orchestration import dagster_internals as internals
from surveillance_pipeline.orchestration.reporting import (
    STEP_OUTPUT_METADATA,
    PartitionReport,
    report_asset,
    report_partitions,
)
from surveillance_pipeline_tests.support.paths import PROJECT_ROOT as PROJECT
from surveillance_pipeline_tests.support.pipeline import execute_as_launched, observe

pytestmark = [pytest.mark.dagster]
FENCE = PROJECT / "surveillance_pipeline" / "orchestration" / "dagster_internals.py"
PARTS = dg.StaticPartitionsDefinition(["a", "b"])


@dg.multi_observable_source_asset(specs=[dg.AssetSpec("source")])
def source() -> dg.ObserveResult:
    return dg.ObserveResult(data_version=dg.DataVersion("source-v1"))


@dg.asset(partitions_def=PARTS, code_version="1", deps=[source])
def upstream(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    return dg.MaterializeResult(data_version=dg.DataVersion(f"up-{context.partition_key}"))


@dg.asset(partitions_def=PARTS, code_version="1", deps=[upstream, source])
def written_by_dagster(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    return dg.MaterializeResult(data_version=dg.DataVersion("mine"))


@dg.asset(partitions_def=PARTS, code_version="1", deps=[upstream, source])
def written_by_us(context: dg.AssetExecutionContext):
    yield from report_partitions(context, lambda key: PartitionReport("mine", {"action": "loaded"}))


@dg.asset(code_version="1", deps=[upstream])
def whole_by_dagster() -> dg.MaterializeResult:
    return dg.MaterializeResult(data_version=dg.DataVersion("mine"))


@dg.asset(code_version="1", deps=[upstream])
def whole_by_us(context: dg.AssetExecutionContext):
    yield from report_asset(context, PartitionReport("mine", {"action": "skipped", "reason": "same"}))


def _tags(instance: dg.DagsterInstance, asset: dg.AssetsDefinition, partition: str | None) -> dict[str, str]:
    record = instance.get_latest_data_version_record(asset.key, partition_key=partition)
    assert record is not None and record.asset_materialization is not None
    return dict(record.asset_materialization.tags or {})


def _without_own(tags: dict[str, str], own: dg.AssetsDefinition) -> dict[str, str]:
    return {k: v for k, v in tags.items() if own.key.to_user_string() not in k}


def test_our_events_carry_the_tags_dagster_writes_itself():
    """Same data version, code version, and per-upstream version and event pointer as Dagster's own event
    for the same inputs: Dagster's staleness reads ours as it reads its own."""
    with dg.instance_for_test() as instance:
        observe([source], instance=instance)
        for key in PARTS.get_partition_keys():
            dg.materialize([source, upstream], instance=instance, partition_key=key, selection=[upstream])
        for key in PARTS.get_partition_keys():
            for asset in (written_by_dagster, written_by_us):
                assets = [source, upstream, asset]
                assert dg.materialize(assets, instance=instance, partition_key=key, selection=[asset]).success
            ours = _tags(instance, written_by_us, key)
            assert ours == _tags(instance, written_by_dagster, key), key
            assert ours[internals.DATA_VERSION_TAG] == "mine"
            assert internals.get_input_data_version_tag(upstream.key) in ours
            assert ours[internals.get_input_data_version_tag(source.key)] == "source-v1"
        for asset in (whole_by_dagster, whole_by_us):
            assert dg.materialize([source, upstream, asset], instance=instance, selection=[asset]).success
        assert _tags(instance, whole_by_us, None) == _tags(instance, whole_by_dagster, None)


@dg.asset
def hands_on_without_an_event():
    # The metadata the project's steps end with (the key's value is text: Dagster reads the key alone).
    yield dg.MaterializeResult(metadata=STEP_OUTPUT_METADATA)


@dg.asset(deps=[hands_on_without_an_event])
def after_it() -> dg.MaterializeResult:
    return dg.MaterializeResult()


def test_the_own_events_key_writes_no_event_but_hands_the_output_on():
    with dg.instance_for_test() as instance:
        result = dg.materialize([hands_on_without_an_event, after_it], instance=instance)
        assert result.success
        assert instance.get_latest_materialization_event(hands_on_without_an_event.key) is None
        assert instance.get_latest_materialization_event(after_it.key) is not None


def test_a_run_executed_here_belongs_to_the_workspace_location_and_its_job():
    """As the webserver lists a job's runs: by job name and the repository label of the location."""
    with dg.instance_for_test() as instance:
        job = dg.Definitions(
            assets=[hands_on_without_an_event], executor=EXECUTOR
        ).resolve_implicit_global_asset_job_def()
        run = execute_as_launched(instance, job)
        assert run.status == dg.DagsterRunStatus.SUCCESS
        origins = internals.location_origins_from_yaml_paths([str(WORKSPACE_FILE)])
        label = f"{internals.REPOSITORY_NAME}@{origins[0].location_name}"
        listed = instance.get_runs(
            dg.RunsFilter(job_name=job.name, tags={internals.REPOSITORY_LABEL_TAG: label})
        )
        assert [r.run_id for r in listed] == [run.run_id]
        assert run.job_code_origin is not None and run.remote_job_origin is not None


def test_the_lint_ban_covers_every_private_module_of_the_installed_dagster():
    private = {
        f"dagster.{module.name}"
        for module in pkgutil.iter_modules(dg.__path__)
        if module.name.startswith("_") and not module.name.startswith("__")
    }
    lint = tomllib.loads((PROJECT / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]
    banned = set(lint["flake8-tidy-imports"]["banned-api"])
    assert "dagster._core" in private and private <= banned, sorted(private - banned)


def test_only_the_fence_imports_dagster_private_modules():
    offenders = []
    for folder in ("surveillance_pipeline", "surveillance_pipeline_tests", "bench"):
        for path in sorted((PROJECT / folder).rglob("*.py")):
            if path in (FENCE, Path(__file__).resolve()):
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = (
                    [node.module or ""]
                    if isinstance(node, ast.ImportFrom)
                    else [alias.name for alias in node.names]
                    if isinstance(node, ast.Import)
                    else []
                )
                if isinstance(node, ast.ImportFrom) and node.module == "dagster":
                    names += [f"dagster.{alias.name}" for alias in node.names]
                offenders += [f"{path.relative_to(PROJECT)}: {n}" for n in names if n.startswith("dagster._")]
    assert offenders == []


# Attributes of Dagster's objects that 1.13 does not mark @public, which the product reads through the
# fence's functions (job_asset_keys, job_asset_graph, job_op_names, op_pools). An import ban cannot see an
# attribute, so this test does: a Dagster upgrade that renames one fails in the fence alone.
PRIVATE_ATTRIBUTES = {
    "asset_layer",
    "node_dict",
    "all_node_defs",
    "node_def",
    "step_context",
    "_step_execution_context",
}


def test_private_dagster_attributes_are_read_only_in_the_fence():
    offenders = []
    for path in sorted((PROJECT / "surveillance_pipeline").rglob("*.py")):
        if path == FENCE:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            name = node.attr if isinstance(node, ast.Attribute) else None
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", "") == "getattr"
                and len(node.args) > 1
            ):
                argument = node.args[1]
                name = argument.value if isinstance(argument, ast.Constant) else None
            if name in PRIVATE_ATTRIBUTES:
                offenders.append(f"{path.relative_to(PROJECT)}:{node.lineno}: {name}")
    assert offenders == []


def test_dagster_celerys_run_loop_pauses_on_the_tick_the_distributed_executor_sets():
    """distributed.py shortens the pause between the run loop's looks at its steps by setting the module
    global dagster-celery reads at each pause: an upgrade that renames it would undo that silently."""
    import inspect

    from dagster_celery import core_execution_loop

    assert "time.sleep(TICK_SECONDS)" in inspect.getsource(core_execution_loop)
    before = core_execution_loop.TICK_SECONDS
    try:
        internals.set_celery_step_poll_seconds(0.2)
        assert core_execution_loop.TICK_SECONDS == 0.2
    finally:
        core_execution_loop.TICK_SECONDS = before


def test_dagster_celerys_executor_is_its_run_loop_with_its_task_submission():
    """celery_execution_loop stands in for CeleryExecutor.execute, with each step's result watched: an
    upgrade whose execute does more (or submits otherwise) fails here."""
    import inspect

    from dagster_celery.core_execution_loop import core_celery_execution_loop
    from dagster_celery.executor import CeleryExecutor, _submit_task

    body = " ".join(inspect.getsource(CeleryExecutor.execute).split())
    assert body.endswith(
        "return core_celery_execution_loop( plan_context, execution_plan, step_execution_fn=_submit_task )"
    ), body
    assert list(inspect.signature(_submit_task).parameters) == [
        "app",
        "plan_context",
        "step",
        "queue",
        "priority",
        "known_state",
    ]
    assert "step_execution_fn" in inspect.signature(core_celery_execution_loop).parameters


# sha256 of dagster_celery.tasks.create_task's source in dagster-celery 0.29.27, which create_step_task
# copies but for its instance.
UPSTREAM_STEP_TASK_SHA256 = "e3b5bcffe2de99010a7e48df2e260e2a3e81095a4f80eb39274f0739ff5df23d"


def test_the_workers_step_task_is_dagster_celerys_as_copied():
    """An upgrade that changes dagster-celery's step task fails here: create_step_task must be copied
    again from it (its arguments, its events, its engine event), not drift from it."""
    import hashlib
    import inspect

    from dagster_celery import tasks
    from dagster_celery.config import TASK_EXECUTE_PLAN_NAME

    source = inspect.getsource(tasks.create_task)
    assert hashlib.sha256(source.encode()).hexdigest() == UPSTREAM_STEP_TASK_SHA256
    assert "DagsterInstance.from_ref(execute_step_args.instance_ref)" in source
    from surveillance_pipeline.orchestration.celery_worker_app import app

    # The worker's task under upstream's name is the fence's copy.
    assert app.tasks[TASK_EXECUTE_PLAN_NAME].run.__qualname__.startswith(internals.create_step_task.__name__)


def test_a_worker_keeps_one_instance_per_instance_ref():
    with dg.instance_for_test() as instance, dg.instance_for_test() as other:
        try:
            first = internals._step_instance(instance.get_ref())
            assert internals._step_instance(instance.get_ref()) is first
            assert internals._step_instance(other.get_ref()) is not first
            assert first.get_ref() == instance.get_ref()
        finally:
            for kept in internals._STEP_INSTANCES.values():
                kept.dispose()
            internals._STEP_INSTANCES.clear()


def test_our_bookkeeping_tags_are_ones_the_ui_hides_and_a_users_are_not():
    from surveillance_pipeline.orchestration.run_health import PROCESS_TAG
    from surveillance_pipeline.orchestration.run_settings import SETTINGS_TAG

    assert internals.is_hidden_tag(PROCESS_TAG) and internals.is_hidden_tag(SETTINGS_TAG)
    assert not internals.is_hidden_tag("surveillance/species") and not internals.is_hidden_tag("team")
