"""End to end, the way a user works: a real `dagster dev` (webserver + daemon) over the Postgres-backed
instance of the project's dagster.yaml, driven through GraphQL, and the UI read in headless Chromium."""

import hashlib
import shutil
import subprocess
import time
from pathlib import Path

import dagster as dg
import psycopg
import pytest

from surveillance_pipeline.gbif.registry import partition_keys
from surveillance_pipeline.instance_storage import storage_config
from surveillance_pipeline.reporting import partition_range_tags, recorded_data_version
from surveillance_pipeline.snapshots.devil import DEVIL_SLUG
from surveillance_pipeline.snapshots.lab_deliveries import write_lab_delivery
from surveillance_pipeline_tests.conftest import scratch_database
from surveillance_pipeline_tests.dagster_dev import PROJECT_ROOT, DagsterDev

pytestmark = [pytest.mark.db, pytest.mark.e2e]
OUTPUT = PROJECT_ROOT / "test-output" / "e2e"
DONE = {"SUCCESS", "FAILURE", "CANCELED"}

LAUNCH_RUN = """
mutation Launch($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
    ... on RunConfigValidationInvalid { errors { message } }
  }
}"""
RUN_STATUS = "query Run($id: ID!) { runOrError(runId: $id) { __typename ... on Run { status } } }"
RUNS_TAGGED = """
query Tagged($tags: [ExecutionTag!]) {
  runsOrError(filter: {tags: $tags}) { ... on Runs { results { runId status } } }
}"""
LAUNCH_BACKFILL = """
mutation Backfill($params: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $params) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message }
  }
}"""
BACKFILL_STATUS = """
query Backfill($id: String!) {
  partitionBackfillOrError(backfillId: $id) { ... on PartitionBackfill { status } }
}"""


@pytest.fixture(scope="module")
def stack(server_url, tmp_path_factory):
    """dagster dev with its own warehouse and Dagster storage databases, stopped (whole group) at the end."""
    with (
        scratch_database(server_url, "surveillance_e2e") as warehouse,
        scratch_database(server_url, "dagster_e2e") as storage,
    ):
        root = tmp_path_factory.mktemp("e2e")
        data_dir = root / "data"
        server = DagsterDev(root / "dagster_home", warehouse, storage, data_dir)
        server.start()
        location = server.graphql(
            "{ repositoriesOrError { ... on RepositoryConnection { nodes { location { name } } } } }"
        )
        server.location = location["repositoriesOrError"]["nodes"][0]["location"]["name"]
        storage_url = storage.replace("postgresql://", "postgresql+psycopg2://", 1)
        with dg.instance_for_test(overrides={"storage": storage_config(storage_url)}) as instance:
            try:
                yield server, instance, warehouse, data_dir
            finally:
                assert server.stop(), "a process of dagster dev's group was left behind"


def _launch(server, assets, partition=None, run_config=None, tags=None):
    run_tags = {**({"dagster/partition": partition} if partition else {}), **(tags or {})}
    params = {
        "selector": {
            "repositoryLocationName": server.location,
            "repositoryName": "__repository__",
            "jobName": "__ASSET_JOB",
            "assetSelection": [{"path": [name]} for name in assets],
        },
        "executionMetadata": {"tags": [{"key": k, "value": v} for k, v in run_tags.items()]},
        "runConfigData": run_config or {},
    }
    answer = server.graphql(LAUNCH_RUN, {"params": params})["launchRun"]
    assert answer["__typename"] == "LaunchRunSuccess", answer
    return answer["run"]["runId"]


def _wait_run(server, run_id, timeout=180):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = server.graphql(RUN_STATUS, {"id": run_id})["runOrError"]["status"]
        if status in DONE:
            return status
        time.sleep(1)
    raise TimeoutError(f"run {run_id} did not finish in {timeout} s")


def _wait_tagged_run(server, key, value, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = server.graphql(RUNS_TAGGED, {"tags": [{"key": key, "value": value}]})["runsOrError"]["results"]
        if runs and runs[0]["status"] in DONE:
            return runs[0]
        time.sleep(1)
    raise TimeoutError(f"no finished run tagged {key}={value} in {timeout} s")


def _metadata(instance, run_id, asset):
    records = instance.fetch_materializations(dg.AssetKey(asset), limit=1000).records
    mine = [r for r in records if r.run_id == run_id]
    assert mine, f"no materialization of {asset} in run {run_id}"
    event = mine[0].asset_materialization
    return {k: v.value for k, v in event.metadata.items()}, event.tags.get("dagster/data_version")


def _holds(warehouse, job="devil_snapshot"):
    with psycopg.connect(warehouse) as conn:
        row = conn.execute("SELECT job_key, parts FROM job_state WHERE job = %s", [job]).fetchone()
    return row


def _backfill(server, assets):
    """Launch a backfill of ``assets`` over every species; wait for it and its runs to finish."""
    started = time.monotonic()
    params = {"assetSelection": [{"path": [a]} for a in assets], "partitionNames": partition_keys()}
    answer = server.graphql(LAUNCH_BACKFILL, {"params": params})["launchPartitionBackfill"]
    assert answer["__typename"] == "LaunchBackfillSuccess", answer
    backfill_id = answer["backfillId"]
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        status = server.graphql(BACKFILL_STATUS, {"id": backfill_id})["partitionBackfillOrError"]["status"]
        if status not in ("REQUESTED", "CANCELING", "FAILING"):
            break
        time.sleep(2)
    runs = server.graphql(RUNS_TAGGED, {"tags": [{"key": "dagster/backfill", "value": backfill_id}]})
    runs = runs["runsOrError"]["results"]
    for run in runs:
        _wait_run(server, run["runId"])
    elapsed = time.monotonic() - started
    with psycopg.connect(server.env["SURVEILLANCE_DATABASE_URL"]) as conn:
        actions = conn.execute(
            "SELECT action, count(*) FROM provenance WHERE run_id = ANY(%s) AND asset = ANY(%s) GROUP BY 1",
            [[r["runId"] for r in runs], assets],
        ).fetchall()
    return status, dict(actions), elapsed, runs


def _chromium(url, *, screenshot=None):
    browser = shutil.which("chromium")
    assert browser, "Debian's chromium is missing: make test installs it (scripts/provision_chromium.sh)"
    profile = OUTPUT / "chromium-profile"
    shutil.rmtree(profile, ignore_errors=True)
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={profile}",
        "--virtual-time-budget=20000",
        "--window-size=1600,1000",
    ]
    action = [f"--screenshot={screenshot}"] if screenshot else ["--dump-dom"]
    done = subprocess.run([browser, *flags, *action, url], capture_output=True, timeout=120, check=True)
    return done.stdout.decode("utf-8", "replace")


def test_a_user_session_in_the_ui(stack):
    server, instance, warehouse, data_dir = stack
    OUTPUT.mkdir(parents=True, exist_ok=True)
    step_started = time.monotonic()

    def step(name):
        nonlocal step_started
        print(f"e2e step {name}: {time.monotonic() - step_started:.1f} s")
        step_started = time.monotonic()

    # 1. Launch occurrences (with what it reads) for one partition: loaded; again: skipped, same version.
    first = _launch(server, ["gbif_raw", "gbif_derived", "occurrences"], partition=DEVIL_SLUG)
    assert _wait_run(server, first) == "SUCCESS"
    meta, version = _metadata(instance, first, "occurrences")
    assert (meta["action"], meta["reason"], meta["rows"]) == ("loaded", "first load", 2000)
    again = _launch(server, ["gbif_raw", "gbif_derived", "occurrences"], partition=DEVIL_SLUG)
    assert _wait_run(server, again) == "SUCCESS"
    meta_again, version_again = _metadata(instance, again, "occurrences")
    assert (meta_again["action"], version_again) == ("skipped", version)
    step("1 launch twice")

    # 2. Deliveries drive the sensor: A, B, then A's bytes under a new name -> the snapshot holds A again.
    held = {}
    for kind, day in (("A", "2026-11-02"), ("B", "2026-11-09"), ("A", "2026-11-16")):
        path = write_lab_delivery(data_dir, kind, day)
        run = _wait_tagged_run(server, "surveillance/delivery", path.name)
        assert run["status"] == "SUCCESS"
        job_key, parts = _holds(warehouse)
        assert parts["input"] == hashlib.sha256(path.read_bytes()).hexdigest()
        held[day] = job_key
    assert held["2026-11-16"] == held["2026-11-02"] != held["2026-11-09"]
    step("2 deliveries")

    # 3. Every species loaded in one range run; then a backfill of occurrence_sample over all 71
    #    partitions completes with per-partition data versions, and a second one skips them all.
    keys = partition_keys()
    range_tags = partition_range_tags(keys[0], keys[-1])
    loaded = _launch(server, ["gbif_raw", "gbif_derived", "occurrences"], tags=range_tags)
    assert _wait_run(server, loaded) == "SUCCESS"
    status, actions, elapsed, runs = _backfill(server, ["occurrence_sample"])
    print(f"occurrence_sample backfill: {status} in {elapsed:.1f} s, {len(runs)} run(s), {actions}")
    assert status in ("COMPLETED", "COMPLETED_SUCCESS")
    assert actions.get("loaded", 0) + actions.get("skipped", 0) == 71, actions
    with psycopg.connect(warehouse) as conn:
        held = dict(
            conn.execute("SELECT partition_key, job_key FROM job_state WHERE job = 'occurrence_sample'")
        )
    for key in keys:
        assert recorded_data_version(instance, dg.AssetKey("occurrence_sample"), key) == held[key], key
    status, actions, elapsed, runs = _backfill(server, ["occurrence_sample"])
    print(f"no-change occurrence_sample backfill: {status} in {elapsed:.1f} s, {actions}")
    assert actions == {"skipped": 71}
    step("3 backfills")

    # 4. Two runs of one target at once: the pool makes one wait; nothing is doubled.
    config = {"ops": {"devil_snapshot": {"config": {"cap": 500}}}}
    pair = [_launch(server, ["devil_snapshot"], run_config=config) for _ in range(2)]
    assert [_wait_run(server, run_id) for run_id in pair] == ["SUCCESS", "SUCCESS"]
    windows = []
    for run_id in pair:
        events = {
            e.dagster_event.event_type_value: e.timestamp
            for e in instance.all_logs(run_id)
            if e.dagster_event and e.step_key == "devil_snapshot"
        }
        windows.append((events["STEP_START"], events["STEP_SUCCESS"]))
    windows.sort()
    assert windows[0][1] <= windows[1][0], f"the two steps overlapped: {windows}"
    with psycopg.connect(warehouse) as conn:
        assert conn.execute("SELECT count(*), count(DISTINCT id) FROM devil_snapshot").fetchone() == (
            500,
            500,
        )
        outcomes = sorted(
            r[0]
            for r in conn.execute(
                "SELECT action FROM provenance WHERE asset = 'devil_snapshot' AND run_id = ANY(%s)", [pair]
            )
        )
    assert outcomes == ["loaded", "skipped"]
    step("4 overlap")

    # 5. The UI in headless Chromium: the asset catalog and the devil snapshot's page.
    catalog = _chromium(f"{server.url}/assets")
    for name in (
        "gbif_raw",
        "gbif_derived",
        "occurrences",
        "occurrence_sample",
        "devil_snapshot",
        "occurrence_batches",
        "sample_export",
    ):
        assert name in catalog, name
    _chromium(
        f"{server.url}/locations/{server.location}/asset-groups/occurrences",
        screenshot=OUTPUT / "asset-graph.png",
    )
    page = _chromium(f"{server.url}/assets/devil_snapshot")
    latest = instance.fetch_materializations(dg.AssetKey("devil_snapshot"), limit=1).records[0]
    latest_action = latest.asset_materialization.metadata["action"].value
    assert "devil_snapshot" in page and f">{latest_action}<" in page, "the page shows the latest action"
    _chromium(f"{server.url}/assets/devil_snapshot", screenshot=OUTPUT / "devil-snapshot.png")
    assert (OUTPUT / "asset-graph.png").stat().st_size > 10_000
    Path(OUTPUT / "catalog.html").write_text(catalog)
    step("5 chromium")
