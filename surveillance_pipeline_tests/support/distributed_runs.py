"""What the distributed session and the broker's fault row share: the species assets of a run, what each
declares, and the tables and files, provenance and failures to compare runs by."""

from __future__ import annotations

from pathlib import Path

import psycopg

from surveillance_pipeline.definitions import defs
from surveillance_pipeline.orchestration.jobs import SPECIES_ASSETS_JOB
from surveillance_pipeline.orchestration.outputs import DeclaredOutputs, declared_outputs
from surveillance_pipeline_tests.support.commands import run_make_run
from surveillance_pipeline_tests.support.dagster_dev import DagsterDev
from surveillance_pipeline_tests.support.file_digests import file_hashes
from surveillance_pipeline_tests.support.pipeline import rows_md5

SPECIES_ASSETS = sorted(defs.resolve_job_def(SPECIES_ASSETS_JOB).graph.node_dict)
RUN_FAILURE = """
query Failure($id: ID!) {
  runOrError(runId: $id) {
    ... on Run { eventConnection { events { __typename ... on RunFailureEvent { error { message } } } } }
  }
}"""
# Celery's line for a task that ended: "[2026-12-06 13:14:03,522: INFO/MainProcess] Task
# execute_plan[14be…] succeeded in 61.2s: […]" (or "raised").
TASK_ENDED = r"^\[[^]]+\] Task \S+\[[\w-]+\] (succeeded|raised)"


def declared() -> dict[str, DeclaredOutputs]:
    """Each species asset's declared tables and data folders."""
    found = {}
    for name in SPECIES_ASSETS:
        assets_def = defs.resolve_assets_def(name)
        outputs = declared_outputs(assets_def.metadata_by_key[assets_def.key])
        assert outputs is not None, name
        found[name] = outputs
    return found


def table_assets() -> list[str]:
    """The species assets that keep a table under job keys."""
    return [name for name, outputs in declared().items() if outputs.tables]


def outputs_fingerprint(warehouse: str, data: Path) -> dict[str, object]:
    """The species assets' tables (an md5 of each one's rows) and files (each one's sha256)."""
    found = declared().values()
    # The ledger a species asset appends to is compared by what it holds for the partitions, not here.
    tables = sorted({t for outputs in found for t in outputs.tables} - {"geocode_calls"})
    folders = sorted({folder for outputs in found for folder in outputs.folders})
    with psycopg.connect(warehouse, autocommit=True) as conn:
        rows = {table: rows_md5(conn, table) for table in tables}
    files = {folder: file_hashes(data / folder) for folder in folders}
    return {"tables": rows, "files": files}


def species_provenance(warehouse: str, run_ids: list[str]) -> list[tuple[str, str, str, str]]:
    """(asset, partition, action, worker) of the species assets' partitions, in the order written (regions,
    which region_assignment loads in each run, is left out)."""
    with psycopg.connect(warehouse) as conn:
        return conn.execute(
            "SELECT asset, partition_key, action, worker FROM provenance"
            " WHERE run_id = ANY(%s) AND asset = ANY(%s) ORDER BY id",
            [run_ids, SPECIES_ASSETS],
        ).fetchall()


def run_failures(server: DagsterDev, run_id: str) -> list[str]:
    """The messages of the run's failure events (one for a failed run, none for another)."""
    events = server.graphql(RUN_FAILURE, {"id": run_id})["runOrError"]["eventConnection"]["events"]
    return [event["error"]["message"] for event in events if event["__typename"] == "RunFailureEvent"]


def make_run_in_one_process(env: dict[str, str]) -> None:
    """make run's own command, in one process (the local profile, unless ``env`` says otherwise)."""
    completed = run_make_run(env)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
