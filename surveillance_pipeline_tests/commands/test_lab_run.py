"""`make run`'s code path: all 71 species in one run on a Postgres-backed Dagster instance, then again."""

import collections
import os
import signal
import time

import dagster as dg
import pytest

from surveillance_pipeline.commands.run import _ChildRuns, run_all_partitions, step_seconds, summarize
from surveillance_pipeline.definitions import assemble
from surveillance_pipeline.gbif.registry import partition_keys
from surveillance_pipeline_tests.support.pipeline import (
    SPINE,
    check_evaluations,
    data_version,
    materializations_in_run,
    resources,
)

pytestmark = [pytest.mark.db, pytest.mark.dagster]
ASSETS = (
    "gbif_raw",
    "gbif_derived",
    "occurrences",
    "occurrence_quality",
    "occurrence_sample",
    "geocoded_localities",
    "region_assignment",
    "occurrence_batches",
)
# 24,997 records with coordinates and 671 whose locality the lab gazetteer finds: each gets a region.
REGION_ASSIGNMENTS = "25668"
# The records the default release policy leaves out: those occurrence_quality flags (11.2% of the lab's).
FLAGGED = 2968
# Of them, in the md5 sample (over every record, its definition) and in delivery A's 1,000-record snapshot:
# the exports leave them out under their default policy.
SAMPLED_FLAGGED = 540
SNAPSHOT_FLAGGED = 113


def _definitions(database_url, data_dir):
    return assemble(resources(database_url, data_dir))


def _events_per_partition(instance, asset):
    records = instance.fetch_materializations(dg.AssetKey(asset), limit=10_000).records
    return collections.Counter(r.partition_key for r in records)


def test_lab_run_loads_everything_then_skips_everything(db, database_url, data_dir, postgres_instance):
    definitions = _definitions(database_url, data_dir)
    first = run_all_partitions(postgres_instance, definitions, data_dir)
    assert [r.job_name for r in first] == [
        "observe_sources",
        "species_assets",
        "batch_days",
        "whole_target_assets",
    ]
    assert {r.status for r in first} == {dg.DagsterRunStatus.SUCCESS}
    lines = summarize(database_url, [r.run_id for r in first])
    table = {line.split()[0]: line.split()[1:4] for line in lines[1:]}
    assert lines[0].split()[:5] == ["asset", "loaded", "skipped", "rows", "seconds"]
    seconds = step_seconds(postgres_instance, [r.run_id for r in first])
    # The layer tables region_assignment's and occurrence_quality's steps load first: a line of their own,
    # named after the asset, not a step.
    layers = {"region_assignment/regions", "occurrence_quality/quality_references"}
    assert set(table) - layers <= set(seconds)
    assert all(s > 0 for s in seconds.values())
    assert table == {
        "gbif_raw": ["71", "0", "26391"],
        "gbif_derived": ["71", "0", "26391"],
        "occurrences": ["71", "0", "26391"],
        "occurrence_sample": ["71", "0", "4766"],
        "occurrence_quality/quality_references": ["1", "0", "150656"],
        "occurrence_quality": ["71", "0", "26391"],
        "masked_release": ["71", "0", str(26391 - FLAGGED)],
        "geocoded_localities": ["71", "0", "837"],
        "region_assignment/regions": ["1", "0", "10"],
        "region_assignment": ["71", "0", REGION_ASSIGNMENTS],
        "occurrence_batches": ["21", "0", "1257"],
        "occurrence_sample_summary": ["1", "0", "4766"],
        "devil_snapshot": ["1", "0", "1000"],
        "sample_export": ["1", "0", str(4766 - SAMPLED_FLAGGED)],
        "devil_snapshot_export": ["1", "0", str(1000 - SNAPSHOT_FLAGGED)],
        "quality_report": ["1", "0", "1065"],
    }
    assert all("first load" in line or "new batch" in line for line in lines[1:])
    summary = materializations_in_run(postgres_instance, first[3].run_id, "occurrence_sample_summary")
    metadata = summary[None].metadata
    assert (metadata["records"].value, metadata["species"].value) == (4766, 71)
    assert check_evaluations(postgres_instance, first[3].run_id) == {
        "devil_snapshot_holds": True,
        "sample_engines_agree": True,
    }
    exports = sorted(
        p.relative_to(data_dir).as_posix() for p in (data_dir / "exports").rglob("*") if p.is_file()
    )
    export_bytes = {name: (data_dir / name).read_bytes() for name in exports}

    states = dict(
        db.execute("SELECT partition_key, job_key FROM target_state WHERE target = 'occurrences'").fetchall()
    )
    assert sorted(states) == sorted(partition_keys())
    assert len(set(states.values())) == 71
    for asset in ASSETS:
        # Exactly one event per partition, none with a shared version.
        assert set(_events_per_partition(postgres_instance, asset).values()) == {1}, asset
    assert len(_events_per_partition(postgres_instance, "occurrence_batches")) == 21
    for key in partition_keys():
        assert data_version(postgres_instance, "occurrences", key) == states[key]

    xmins = db.execute("SELECT md5(string_agg(xmin::text, ',' ORDER BY id)) FROM occurrences").fetchone()
    second = run_all_partitions(postgres_instance, definitions, data_dir)
    assert {r.status for r in second} == {dg.DagsterRunStatus.SUCCESS}
    for line in summarize(database_url, [r.run_id for r in second])[1:]:
        asset, loaded, skipped = line.split()[:3]
        expected = table[asset][0]
        assert (loaded, skipped) == ("0", expected), line
        why = "batch already applied" if asset == "occurrence_batches" else "nothing changed"
        assert line.endswith(f"{why} ({expected})"), line
    assert {name: (data_dir / name).read_bytes() for name in exports} == export_bytes
    assert (
        db.execute("SELECT md5(string_agg(xmin::text, ',' ORDER BY id)) FROM occurrences").fetchone() == xmins
    )
    for key in partition_keys():
        assert data_version(postgres_instance, "occurrences", key) == states[key]


def test_a_range_run_as_the_ui_launches_it_writes_one_event_per_partition(
    db, database_url, data_dir, postgres_instance
):
    """A single-run backfill launched from the UI (no tag of ours): one event per partition, its own."""
    keys = partition_keys()[:3]
    result = dg.materialize(
        SPINE,
        instance=postgres_instance,
        resources=resources(database_url, data_dir),
        tags={"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]},
    )
    assert result.success
    states = dict(
        db.execute("SELECT partition_key, job_key FROM target_state WHERE target = 'occurrences'").fetchall()
    )
    assert sorted(states) == sorted(keys) and len(set(states.values())) == 3
    for key in keys:
        assert data_version(postgres_instance, "occurrences", key) == states[key]
    for asset in ("gbif_raw", "gbif_derived", "occurrences"):
        assert _events_per_partition(postgres_instance, asset) == {key: 1 for key in keys}, asset


@pytest.mark.parametrize("how", ["spawned", "forked"])
def test_children_started_ahead_that_get_no_run_exit_cleanly(how):
    """Under the distributed profile make run starts its side-by-side children before it knows their runs
    (forked by make run's main, spawned when it is called without them); when a run of the plan fails
    first, or the plan has fewer runs, the idle ones must end, not linger."""
    with _ChildRuns() as children:
        if how == "spawned":
            children.start_ahead(2)
        else:
            children.fork_ahead(2)
        started = list(children._idle)
        assert len(started) == 2
        assert all(child.poll() is None for child in started)  # importing, or waiting for a run
        # What __exit__ does, bounded: the first child must end although the second was started after it
        # (a forked child holding its sibling's pipe kept that sibling waiting forever).
        started[0].stdin.close()
        deadline = time.monotonic() + 60
        while started[0].poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        if started[0].returncode is None:
            for child in started:
                os.kill(child.pid, signal.SIGKILL)  # or __exit__ would wait for it forever
        assert started[0].returncode == 0 and started[1].poll() is None
    assert [child.returncode for child in started] == [0, 0]


def test_a_forked_child_whose_run_cannot_start_ends_make_run_naming_the_job(capfd, monkeypatch, tmp_path):
    """A forked child's failure is the parent's error, as a spawned child's is: it exits non-zero with its
    traceback on stderr, and run_all raises naming the job, instead of waiting for a run id."""
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))  # an instance of its own: the job is what fails
    with _ChildRuns() as children:
        children.fork_ahead(1)
        with pytest.raises(RuntimeError, match="the no_such_job run in process [0-9]+ ended with 1"):
            children.run_all([("no_such_job", {})])
    assert "DagsterInvariantViolationError" in (err := capfd.readouterr().err) and "no_such_job" in err


def test_a_run_launched_ahead_is_waited_for_by_the_next_run_all(capfd, monkeypatch, tmp_path):
    """make run launches the days' run ahead, beside the downloads' index, and the species runs' run_all
    waits for it too: its failure is make run's error, even when the batch itself is empty."""
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))  # an instance of its own: the job is what fails
    with _ChildRuns() as children:
        children.fork_ahead(1)
        children.launch("no_such_days_job", {})
        with pytest.raises(RuntimeError, match="the no_such_days_job run in process [0-9]+ ended with 1"):
            children.run_all([])
    assert "no_such_days_job" in capfd.readouterr().err
