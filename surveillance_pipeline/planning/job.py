"""``plan_next_run``: the plan (plan.py) as a job a user launches from the UI, its table in the run's
output: which partitions of each asset the next run would load, with counts and reasons, on one page."""

# No "from __future__ import annotations": Dagster reads the op's parameter annotations as types.

import dagster as dg
import psycopg

from surveillance_pipeline.orchestration.resources import (
    DataPaths,
    GbifSource,
    GeocoderSource,
    ReleaseMasking,
    Warehouse,
)
from surveillance_pipeline.planning.plan import LOAD, MAY_LOAD, make_plan

PLAN_JOB = "plan_next_run"


@dg.op(description="What the next make run would load, and why; reads only.")
def plan_op(
    context: dg.OpExecutionContext,
    warehouse: Warehouse,
    paths: DataPaths,
    geocoder: GeocoderSource,
    gbif: GbifSource,
    masking: ReleaseMasking,
) -> dg.Output[None]:
    # A plain connection: no migration, and the plan's transaction is rolled back (plan.make_plan).
    with psycopg.connect(
        warehouse.database_url, autocommit=True, application_name="surveillance_pipeline plan"
    ) as conn:
        plan = make_plan(
            conn,
            paths,
            geocoder,
            reads_downloads=gbif.reads_downloads(),
            masking_key_id=masking.seed_key().id,
        )
    if plan.indexed_here:
        context.log.info(f"indexed {', '.join(plan.indexed_here)} in a temporary folder to read it")
    # Every partition up to a few thousand (a warehouse of 10,000 species summarizes past that).
    table = "\n".join(plan.lines(listed=5000))
    context.log.info("plan:\n" + table)
    return dg.Output(
        None,
        metadata={
            "plan": dg.MetadataValue.md(f"```\n{table}\n```"),
            "partitions that will load": len(plan.loads(LOAD)),
            "partitions that may load": len(plan.loads(MAY_LOAD)),
        },
    )


@dg.job(
    name=PLAN_JOB,
    description="What the next run would load, and why (input, code, config, target edited): the table "
    "`make plan` prints, in this run's output. Reads only.",
)
def plan_next_run() -> None:
    plan_op()
