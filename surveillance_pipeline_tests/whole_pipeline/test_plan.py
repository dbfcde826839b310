"""make plan says what the next make run loads, and why, and writes nothing.

A warehouse loaded with make run's plan over the first species (test_target_verification's fixture), then
changed as users change things: a table edited in psql, an export file edited, a new delivery of the
devil's records, a new day's batch. The plan must name exactly the partitions the next run loads, each
with the reason the run then gives, and nothing it will not load; and it must not write a row.
"""

from __future__ import annotations

import dagster as dg
import pytest

from surveillance_pipeline.gbif.registry import load_registry as species_registry
from surveillance_pipeline.gbif.registry import species_by_slug
from surveillance_pipeline.lab.deliveries import delivery_a
from surveillance_pipeline.planning.job import PLAN_JOB
from surveillance_pipeline.planning.plan import MAY_LOAD, make_plan
from surveillance_pipeline.snapshots.devil import DEVIL_SLUG
from surveillance_pipeline_tests.support.pipeline import TEST_LEDGER_SALT, TEST_SEED_KEY, execute_as_launched
from surveillance_pipeline_tests.whole_pipeline.test_target_verification import (
    SPECIES,
    LoadedWarehouse,
    warehouse,
)

pytestmark = [pytest.mark.db, pytest.mark.dagster]

__all__ = ["warehouse"]  # the fixture, shared with test_target_verification


def plan_of(loaded: LoadedWarehouse):
    resources = loaded.defs.resources
    geocoder = resources["geocoder"].model_copy(update={"ledger_salt": TEST_LEDGER_SALT})
    versions = loaded.row_versions()
    planned = make_plan(
        loaded.conn,
        resources["paths"],
        geocoder,
        [species_by_slug(s) for s in SPECIES],
        masking_key_id=TEST_SEED_KEY.id,
    )
    assert loaded.row_versions() == versions, "the plan wrote rows"
    return planned


def test_the_plan_names_what_the_next_run_loads_and_why(warehouse: LoadedWarehouse) -> None:
    assert plan_of(warehouse).loads() == {}

    edited = warehouse.species_id(SPECIES[1])
    warehouse.edit(f"UPDATE occurrence_sample SET pick = pick WHERE species_id = {edited}")
    with (warehouse.root / "exports" / "sample" / "sample.csv").open("a", encoding="utf-8") as export:
        export.write("an edit by hand\n")
    lines = delivery_a().decode("utf-8").splitlines()
    later = [lines[0]] + [
        ",".join([i, str(int(y) + 1) if y else y, lic])
        for i, y, lic in (line.split(",") for line in lines[1:])
    ]
    (warehouse.root / "deliveries" / DEVIL_SLUG / "2026-11-30.csv").write_text("\n".join(later) + "\n")
    batch = warehouse.root / "batches" / "2026-12-01.csv"
    batch.write_text(
        f"id,species,year,longitude,latitude,license\n999000001,{SPECIES[0]},2020,147.1,-42.9,CC0 1.0\n"
    )
    planned = plan_of(warehouse)
    assert planned.loads(MAY_LOAD) == {}
    assert planned.loads() == {
        ("occurrence_sample", SPECIES[1]): "target edited outside the pipeline (UPDATE)",
        ("sample_export", "all"): "output was missing or edited",
        ("devil_snapshot", "all"): "input changed",
        ("devil_snapshot_export", "all"): "input changed",
        ("occurrence_batches", "2026-12-01"): "new batch",
    }
    # The job plans every species of the registry; those the test never loaded are first loads.
    output = plan_job_output(warehouse)
    for (asset, partition), reason in planned.loads().items():
        if partition in SPECIES:  # the whole targets follow every species there, loaded or not
            assert f"{asset} {partition}: {reason}" in output["plan"].value
    others = len(species_registry()) - len(SPECIES)
    assert output["partitions that will load"].value > len(planned.loads()) + others

    assert warehouse.run() == planned.loads()
    assert plan_of(warehouse).loads() == {}


def plan_job_output(loaded: LoadedWarehouse) -> dict:
    """The plan as a user sees it in the UI: the plan_next_run job's output metadata."""
    run = execute_as_launched(loaded.instance, loaded.defs.resolve_job_def(PLAN_JOB))
    assert run.status == dg.DagsterRunStatus.SUCCESS
    [record] = loaded.instance.get_records_for_run(
        run.run_id, of_type=dg.DagsterEventType.STEP_OUTPUT
    ).records
    event = record.event_log_entry.dagster_event
    assert event is not None
    return dict(event.event_specific_data.metadata)
