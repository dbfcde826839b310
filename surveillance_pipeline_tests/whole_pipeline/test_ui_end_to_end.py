"""End to end, the way a user works: `make run` twice, then a real `dagster dev` (webserver + daemon) over
the Postgres-backed instance of the project's dagster.yaml, clicked through in headless Chromium (DevTools
protocol) and read back through GraphQL, Dagster's own API for the UI.

GBIF is a local server that answers occurrence searches with the lab's records (GBIF_SOURCE=api), so one
species' records can change in the middle of the session. Screenshots land in test-output/e2e/.
"""

import hashlib
import subprocess
import sys
import time
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import psycopg
import pytest

from surveillance_pipeline.definitions import defs
from surveillance_pipeline.gbif.registry import partition_keys
from surveillance_pipeline.lab.deliveries import write_lab_delivery
from surveillance_pipeline.orchestration.instance_storage import storage_config
from surveillance_pipeline.orchestration.jobs import SPECIES_ASSETS_JOB
from surveillance_pipeline.orchestration.reporting import partition_range_tags, recorded_data_version
from surveillance_pipeline.snapshots.devil import DEVIL_SLUG
from surveillance_pipeline_tests.conftest import scratch_database
from surveillance_pipeline_tests.support.browser import Browser
from surveillance_pipeline_tests.support.dagster_dev import DONE, PROJECT_ROOT, RUNS_TAGGED, DagsterDev
from surveillance_pipeline_tests.support.fake_gbif import FakeGbif

pytestmark = [pytest.mark.db, pytest.mark.e2e]
OUTPUT = PROJECT_ROOT / "test-output" / "e2e"
# The species job's assets, as the code location defines them.
SPECIES_ASSETS = tuple(sorted(defs.resolve_job_def(SPECIES_ASSETS_JOB).graph.node_dict))

LAUNCH_RUN = """
mutation Launch($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
    ... on RunConfigValidationInvalid { errors { message } }
  }
}"""
BACKFILLS = "{ partitionBackfillsOrError(limit: 20) { ... on PartitionBackfills { results { id } } } }"
ASSETS = "{ assetNodes { assetKey { path } isPartitioned isMaterializable partitionKeys } }"
STALENESS = """
query Stale($key: AssetKeyInput!, $partitions: [String!]) {
  assetNodeOrError(assetKey: $key) { ... on AssetNode { staleStatusByPartition(partitions: $partitions) } }
}"""
STALENESS_WHOLE = """
query Stale($key: AssetKeyInput!) { assetNodeOrError(assetKey: $key) { ... on AssetNode { staleStatus } } }
"""
PARTITION_STATUS = """
query Status($key: AssetKeyInput!) {
  assetNodeOrError(assetKey: $key) {
    ... on AssetNode {
      assetPartitionStatuses { ... on DefaultPartitionStatuses { materializedPartitions failedPartitions } }
    }
  }
}"""
REEXECUTE = """
mutation Reexecute($params: ReexecutionParams!) {
  launchPipelineReexecution(reexecutionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
  }
}"""
JOB_RUNS = """
query JobRuns($selector: PipelineSelector!) {
  pipelineOrError(params: $selector) { ... on Pipeline { runs(limit: 100) { runId } } }
}"""


@pytest.fixture(scope="module")
def stack(server_url, tmp_path_factory):
    """dagster dev with its own warehouse and Dagster storage databases, and a GBIF answering with the lab's
    records; stopped (whole process group) at the end."""
    with (
        scratch_database(server_url, "surveillance_e2e") as warehouse,
        scratch_database(server_url, "dagster_e2e") as storage,
        FakeGbif() as gbif,
    ):
        gbif.serve_lab_occurrences()
        root = tmp_path_factory.mktemp("e2e")
        data_dir = root / "data"
        gbif_env = {"GBIF_SOURCE": "api", "GBIF_BASE_URL": gbif.base_url}
        server = DagsterDev(root / "dagster_home", warehouse, storage, data_dir, extra_env=gbif_env)
        server.start()
        location = server.graphql(
            "{ repositoriesOrError { ... on RepositoryConnection { nodes { location { name } } } } }"
        )
        server.location = location["repositoriesOrError"]["nodes"][0]["location"]["name"]
        storage_url = storage.replace("postgresql://", "postgresql+psycopg2://", 1)
        with dg.instance_for_test(overrides={"storage": storage_config(storage_url)}) as instance:
            try:
                yield server, instance, warehouse, data_dir, gbif
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


def _wait_tagged_run(server, key, value, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = server.graphql(RUNS_TAGGED, {"tags": [{"key": key, "value": value}]})["runsOrError"]["results"]
        if runs and runs[0]["status"] in DONE:
            return runs[0]
        time.sleep(1)
    raise TimeoutError(f"no finished run tagged {key}={value} in {timeout} s")


def _holds(warehouse, target="devil_snapshot"):
    with psycopg.connect(warehouse) as conn:
        row = conn.execute("SELECT job_key, parts FROM target_state WHERE target = %s", [target]).fetchone()
    return row


def _actions(warehouse, run_ids, assets=None):
    """(asset, partition) -> the actions the runs recorded in provenance."""
    with psycopg.connect(warehouse) as conn:
        rows = conn.execute(
            "SELECT asset, partition_key, action FROM provenance WHERE run_id = ANY(%s) ORDER BY id",
            [run_ids],
        ).fetchall()
    found: dict[tuple[str, str], list[str]] = {}
    for asset, partition, action in rows:
        if assets is None or asset in assets:
            found.setdefault((asset, partition), []).append(action)
    return found


def _events(instance, run_ids, asset):
    """partition -> the materializations of ``asset`` the runs wrote (each a list, to count them)."""
    kind = dg.DagsterEventType.ASSET_MATERIALIZATION
    found: dict[str | None, list] = {}
    for run_id in run_ids:
        for record in instance.get_records_for_run(run_id, of_type=kind).records:
            event = record.event_log_entry.asset_materialization
            if event is not None and event.asset_key == dg.AssetKey(asset):
                found.setdefault(event.partition, []).append(event)
    return found


def _staleness(server):
    """(asset, partition or None) -> Dagster's stale status, for every materializable asset."""
    statuses = {}
    for node in server.graphql(ASSETS)["assetNodes"]:
        if not node["isMaterializable"]:
            continue
        key = {"path": node["assetKey"]["path"]}
        name = "/".join(node["assetKey"]["path"])
        if node["isPartitioned"]:
            partitions = node["partitionKeys"]
            answer = server.graphql(STALENESS, {"key": key, "partitions": partitions})["assetNodeOrError"]
            statuses.update(
                {
                    (name, p): status
                    for p, status in zip(partitions, answer["staleStatusByPartition"], strict=True)
                }
            )
        else:
            answer = server.graphql(STALENESS_WHOLE, {"key": key})["assetNodeOrError"]
            statuses[(name, None)] = answer["staleStatus"]
    return statuses


def _partition_status(server, asset):
    answer = server.graphql(PARTITION_STATUS, {"key": {"path": [asset]}})["assetNodeOrError"]
    statuses = answer["assetPartitionStatuses"]
    return set(statuses["materializedPartitions"]), set(statuses["failedPartitions"])


def _data_versions(instance, asset):
    return {key: recorded_data_version(instance, dg.AssetKey(asset), key) for key in partition_keys()}


def _make_run(server):
    """`make run`'s own command, on the server's instance, warehouse and GBIF; its summary table."""
    done = subprocess.run(  # noqa: S603  # fixed argv, no shell
        [sys.executable, "-m", "surveillance_pipeline.commands.make_run"],
        cwd=PROJECT_ROOT,
        env=server.env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    return {line.split()[0]: line.split()[1:3] for line in lines[2:] if line.strip()}


def _new_backfill(server, known, timeout: float = 60) -> str | None:
    """The id of the backfill that is not in ``known`` (the one the click just launched); None when none
    came within ``timeout`` seconds."""
    found: list[str] = []

    def launched():
        ids = [b["id"] for b in server.graphql(BACKFILLS)["partitionBackfillsOrError"]["results"]]
        found[:] = [i for i in ids if i not in known]
        return bool(found)

    deadline = time.monotonic() + timeout
    while not launched():
        if time.monotonic() >= deadline:
            return None
        time.sleep(1)
    assert len(found) == 1, found
    return found[0]


def _launch_from_the_dialog(browser: Browser, server, known) -> str:
    """Click the launch dialog's Launch; the id of the backfill it launched.

    In one CI run of twelve (2026-12-07) the click went unheard: the dialog stayed open and no backfill
    came within a minute. A person clicks again, and so does this, once, only while the dialog is still
    open a minute later: a click that was heard launches within seconds, so the second cannot make a
    second backfill (``_new_backfill`` would find two and fail)."""
    for attempt in (1, 2):
        browser.click(r"^Launch")
        backfill_id = _new_backfill(server, known)
        if backfill_id is not None:
            return backfill_id
        still_open = "Launch runs to materialize" in browser.text()
        assert attempt == 1 and still_open, f"no backfill was launched; {browser.describe()}"
        warnings.warn(f"the dialog's Launch went unheard; clicked again: {browser.describe()}", stacklevel=1)
    raise AssertionError("unreachable: the second attempt returns or fails")


def _known_backfills(server):
    return {b["id"] for b in server.graphql(BACKFILLS)["partitionBackfillsOrError"]["results"]}


def _ui_runs(server):
    """Runs launched by a person (no sensor, schedule or automation tag), and backfills."""
    runs = server.graphql(
        "{ runsOrError(limit: 200) { ... on Runs { results { runId tags { key value } } } } }"
    )
    launched = set()
    for run in runs["runsOrError"]["results"]:
        keys = {tag["key"] for tag in run["tags"]}
        if not keys & {"dagster/sensor_name", "dagster/schedule_name", "dagster/automation_condition"}:
            launched.add(run["runId"])
    return launched


def _unsynced_dialog(server, browser, screenshot):
    """Open "Materialize unsynced" on the lineage page; the assets its dialog offers. The dialog is closed
    again: it reads the asset-level status, which Dagster 1.13 computes for unpartitioned assets only."""
    browser.open(f"{server.url}/asset-groups")
    browser.wait_for_text("Materialize all")
    time.sleep(2)
    browser.evaluate(
        "(() => { const b = [...document.querySelectorAll('button')];"
        " const i = b.findIndex(e => /Materialize all/.test(e.innerText)); b[i + 1].click(); })()"
    )
    browser.click(r"^Materialize unsynced")
    browser.wait_for_text(r"Materialize unsynced assets")
    time.sleep(3)
    browser.screenshot(OUTPUT / screenshot)
    offered = browser.evaluate(
        "[...document.querySelectorAll('[role=dialog] a, .bp5-dialog a')].map(e => e.innerText.trim())"
        ".filter(x => x)"
    )
    browser.send(
        "Input.dispatchKeyEvent", type="keyDown", key="Escape", code="Escape", windowsVirtualKeyCode=27
    )
    return set(offered)


def _launch_stale(server, stale):
    """Launch exactly the stale partitions (one run per partition, as the asset page's dialog launches
    one partition) and the stale unpartitioned assets (one run); wait for them. Their run ids."""
    by_partition: dict[str | None, list[str]] = {}
    for asset, partition in sorted(stale, key=str):
        by_partition.setdefault(partition, []).append(asset)
    run_ids = [_launch(server, assets, partition=partition) for partition, assets in by_partition.items()]
    for run_id in run_ids:
        assert server.wait_run(run_id) == "SUCCESS", run_id
    return run_ids


def _drop_lowest_id(records):
    return sorted(records, key=lambda record: int(record["gbifID"]))[1:]


@dataclass
class Session:
    """What every phase of the user's session works with."""

    server: DagsterDev
    instance: dg.DagsterInstance
    warehouse: str
    data_dir: Path
    gbif: FakeGbif
    browser: Browser
    keys: list[str]


class Laps:
    """Prints how long each phase took (the suite's longest session: the numbers show where time goes)."""

    def __init__(self) -> None:
        self.started = time.monotonic()

    def __call__(self, name: str) -> None:
        print(f"e2e step {name}: {time.monotonic() - self.started:.1f} s")
        self.started = time.monotonic()


def _make_run_twice_and_everything_is_fresh(session: Session) -> None:
    """make run twice; then every partition of every asset is fresh in Dagster, and the graph says so."""
    server, browser = session.server, session.browser
    first = _make_run(server)
    assert first["occurrences"] == ["71", "0"], first
    second = _make_run(server)
    assert all(loaded == "0" for loaded, _ in second.values()), second
    statuses = _staleness(server)
    never_run = {("derived_dataset_registration", None)}  # publishing: launched by hand only
    assert {k: v for k, v in statuses.items() if v != "FRESH" and k not in never_run} == {}
    assert len([k for k in statuses if k[1] is not None]) == 71 * len(SPECIES_ASSETS) + 21
    browser.open(f"{server.url}/locations/{server.location}/asset-groups/occurrences")
    browser.wait_for_text("occurrences")
    browser.wait_for_text("gbif_derived")
    time.sleep(3)
    assert "Unsynced" not in browser.text()
    browser.screenshot(OUTPUT / "asset-graph.png")


def _make_runs_runs_are_listed_under_their_job_and_reexecute(session: Session) -> None:
    """make run's runs are runs of the code location's jobs: listed under them, no "Auto-materialize off"."""
    server, instance, warehouse, browser = (
        session.server,
        session.instance,
        session.warehouse,
        session.browser,
    )
    species_runs = instance.get_runs(dg.RunsFilter(job_name="species_assets"))
    selector = {
        "pipelineName": "species_assets",
        "repositoryName": "__repository__",
        "repositoryLocationName": server.location,
    }
    listed = {r["runId"] for r in server.graphql(JOB_RUNS, {"selector": selector})["pipelineOrError"]["runs"]}
    assert {run.run_id for run in species_runs} <= listed and len(species_runs) == 2
    browser.open(f"{server.url}/locations/{server.location}/jobs/species_assets/runs")
    browser.wait_for_text(species_runs[0].run_id[:8])
    browser.screenshot(OUTPUT / "job-runs.png")
    browser.open(f"{server.url}/locations/{server.location}/jobs/species_assets")
    browser.wait_for_text("species_assets")
    time.sleep(2)
    assert "Auto-materialize off" not in browser.text()
    # ... and re-executes like any other run: all 71 species again, every partition skipped.
    answer = server.graphql(
        REEXECUTE, {"params": {"parentRunId": species_runs[0].run_id, "strategy": "ALL_STEPS"}}
    )["launchPipelineReexecution"]
    assert answer["__typename"] == "LaunchRunSuccess", answer
    again = answer["run"]["runId"]
    assert server.wait_run(again) == "SUCCESS"
    actions = _actions(warehouse, [again], set(SPECIES_ASSETS))
    assert Counter(a for acts in actions.values() for a in acts) == {"skipped": 71 * len(SPECIES_ASSETS)}


def _select_every_partition_in_the_launch_dialog(browser: Browser, asset_page: str) -> None:
    """Open the asset page's launch dialog and select all its partitions (it then says 71 partitions).

    The dialog shows no partition selection until the server answers its one request for the asset's
    partition health; Dagster's UI (usePartitionHealthData) makes that request once per opening and
    never again, so a request that fails or is never answered leaves the dialog empty until it is closed.
    In one CI run the dialog stayed so for a minute, and the test could not say why. In another,
    the selection showed its "All" and then, clicked, lost it and said "0 partitions" for a
    minute. A user closes the dialog and opens it again; so does this, up to twice (in 9 CI runs on
    2026-12-06 and 07 the first opening stayed empty in 3, the second too in one, under the full suite's
    load; run alone, the test passed). What the page showed and logged each time is a warning, so a
    failure that passes on a later opening still says what it was.
    """
    for attempt in (1, 2, 3):
        browser.open(asset_page)
        browser.wait_for_text("Latest materialization")
        browser.click_until(r"^Materialize", r"Launch runs to materialize occurrence_sample")
        try:
            browser.click_until(r"^All$", r"71 partitions")
            return
        except TimeoutError as error:
            if attempt == 3:
                raise
            # A warning, not a print: pytest's summary shows warnings of passing tests too.
            warnings.warn(
                f"the launch dialog did not select its 71 partitions; opened again: {error}", stacklevel=1
            )


def _a_backfill_from_the_dialog_skips_every_partition(session: Session) -> None:
    """A backfill of every partition of occurrence_sample, from the asset page's dialog: it succeeds, every
    partition skips, each with one event that says so, and no data version moves."""
    server, instance, warehouse, browser, keys = (
        session.server,
        session.instance,
        session.warehouse,
        session.browser,
        session.keys,
    )
    before = _data_versions(instance, "occurrence_sample")
    known = _known_backfills(server)
    _select_every_partition_in_the_launch_dialog(browser, f"{server.url}/assets/occurrence_sample")
    browser.screenshot(OUTPUT / "backfill-dialog.png")
    backfill_id = _launch_from_the_dialog(browser, server, known)
    status, run_ids = server.wait_backfill(backfill_id)
    assert status in ("COMPLETED", "COMPLETED_SUCCESS"), status
    actions = _actions(warehouse, run_ids, {"occurrence_sample"})
    assert Counter(a for acts in actions.values() for a in acts) == {"skipped": 71}
    events = _events(instance, run_ids, "occurrence_sample")
    assert sorted(events) == sorted(keys) and {len(e) for e in events.values()} == {1}
    assert {e[0].description for e in events.values()} == {"skipped: nothing changed"}
    assert _data_versions(instance, "occurrence_sample") == before
    run = instance.get_run_by_id(run_ids[0])
    assert run.tags["surveillance/occurrence_sample"] == "71 skipped"
    browser.open(f"{server.url}/runs/b/{backfill_id}?tab=runs")
    browser.wait_for_text("Succeeded|Completed")
    browser.screenshot(OUTPUT / "backfill.png")
    browser.open(f"{server.url}/runs/{run_ids[0]}")
    browser.wait_for_text("71 skipped")
    browser.screenshot(OUTPUT / "backfill-run.png")
    browser.open(f"{server.url}/assets/occurrence_sample?view=events")
    browser.wait_for_text("skipped: nothing changed")
    browser.screenshot(OUTPUT / "events.png")


def _deliveries_drive_the_sensor(session: Session) -> None:
    """Deliveries drive the sensor: after make run's A, B, then A's bytes under a new name -> the snapshot
    holds A again."""
    server, warehouse, data_dir = session.server, session.warehouse, session.data_dir
    held = {"2026-11-02": _holds(warehouse)[0]}
    for kind, day in (("B", "2026-11-09"), ("A", "2026-11-16")):
        path = write_lab_delivery(data_dir, kind, day)
        run = _wait_tagged_run(server, "surveillance/delivery", path.name)
        assert run["status"] == "SUCCESS"
        job_key, parts = _holds(warehouse)
        assert parts["input"] == hashlib.sha256(path.read_bytes()).hexdigest()
        held[day] = job_key
    assert held["2026-11-16"] == held["2026-11-02"] != held["2026-11-09"]


def _one_species_changes_and_only_its_partitions_load(session: Session) -> None:
    """GBIF's records of one species change; its gbif_raw partition is materialized. Exactly that species'
    downstream partitions go stale, and "Materialize unsynced" loads those and no other."""
    server, instance, warehouse, gbif, browser = (
        session.server,
        session.instance,
        session.warehouse,
        session.gbif,
        session.browser,
    )
    gbif.edit_species(DEVIL_SLUG, _drop_lowest_id)
    change_time = time.time()
    raw_run = _launch(server, ["gbif_raw"], partition=DEVIL_SLUG)
    assert server.wait_run(raw_run) == "SUCCESS"
    assert _actions(warehouse, [raw_run]) == {("gbif_raw", DEVIL_SLUG): ["loaded"]}
    downstream = {(asset, DEVIL_SLUG) for asset in SPECIES_ASSETS if asset != "gbif_raw"}
    # Dagster marks stale what reads a changed version directly; each level, once loaded, either passes
    # a new version on (its readers go stale) or not (the change stops there). So "Materialize unsynced"
    # is clicked until nothing is unsynced.
    stale = {k for k, v in _staleness(server).items() if v == "STALE"}
    assert ("gbif_derived", DEVIL_SLUG) in stale and all(p in (DEVIL_SLUG, None) for _, p in stale), stale
    offered = _unsynced_dialog(server, browser, "materialize-unsynced.png")
    # Dagster 1.13's dialog offers unpartitioned assets only (it reads the asset-level status); the
    # stale partitions are launched as the asset page's partition dialog launches them.
    assert not offered & set(SPECIES_ASSETS), offered
    for _level in range(8):
        if not stale:
            break
        _launch_stale(server, stale)
        stale = {k for k, v in _staleness(server).items() if v == "STALE"}
        assert all(p in (DEVIL_SLUG, None) for _, p in stale), stale
    assert not stale, stale
    # Every run since the change (these, and what automation launched meanwhile) touched only the devil.
    since = [
        r.dagster_run.run_id
        for r in instance.get_run_records()
        if r.create_timestamp.timestamp() > change_time
    ]
    species_actions = _actions(warehouse, since, set(SPECIES_ASSETS))
    assert {k[1] for k in species_actions} == {DEVIL_SLUG}, species_actions
    loaded = Counter(k for k, acts in species_actions.items() for a in acts if a == "loaded")
    # A level whose rows did not change stops the change (geocoded_localities: the dropped record had
    # coordinates, so nothing to geocode changed); whatever loaded, loaded once.
    assert set(loaded) <= downstream | {("gbif_raw", DEVIL_SLUG)} and set(loaded.values()) == {1}, loaded
    assert {("gbif_derived", DEVIL_SLUG), ("occurrences", DEVIL_SLUG)} <= set(loaded), loaded
    for run_id in since:
        for asset in SPECIES_ASSETS:
            assert {len(e) for e in _events(instance, [run_id], asset).values()} <= {1}, (run_id, asset)


def _one_species_fails_in_a_range_run(session: Session) -> None:
    """One species fails in a range run: it ends failed in Dagster, the others are materialized, and
    nothing is recorded for it."""
    server, instance, data_dir, browser, keys = (
        session.server,
        session.instance,
        session.data_dir,
        session.browser,
        session.keys,
    )
    broken = keys[5]
    raw = data_dir / "raw" / f"{broken}.json"
    saved = raw.read_bytes()
    raw.write_bytes(saved.replace(b'"decimalLatitude": ', b'"decimalLatitude": "north", "was": ', 1))
    try:
        failing = _launch(
            server, ["gbif_derived", "occurrences"], tags=partition_range_tags(keys[0], keys[-1])
        )
        assert server.wait_run(failing, timeout=300) == "FAILURE"
    finally:
        raw.write_bytes(saved)
    for asset in ("gbif_derived", "occurrences"):
        materialized, failed = _partition_status(server, asset)
        assert failed == {broken}, (asset, failed)
        events = _events(instance, [failing], asset)
        assert broken not in events and len(events) == 70 and {len(e) for e in events.values()} == {1}
    browser.open(f"{server.url}/assets/gbif_derived?view=partitions&partition={broken}")
    browser.wait_for_text(r"Failed \(1\)")
    browser.wait_for_text(r"View all historical events \([1-9]")
    browser.screenshot(OUTPUT / "failed-partition.png")
    browser.open(f"{server.url}/runs?q[]=id%3A{failing}")
    browser.wait_for_text("surveillance/gbif_derived: 1 failed, 70 skipped")
    browser.screenshot(OUTPUT / "failed-run.png")


def _the_map_of_a_species(session: Session) -> None:
    """The map of a species' points on its occurrences partition."""
    server, browser = session.server, session.browser
    browser.open(f"{server.url}/assets/occurrences?view=partitions&partition={DEVIL_SLUG}")
    browser.click(r"Show Markdown")
    browser.wait_for(lambda: "data:image/png;base64," in browser.html(), "the map to render")
    time.sleep(1)
    browser.screenshot(OUTPUT / "occurrences-map.png")


def _two_runs_of_one_target_at_once(session: Session) -> None:
    """Two runs of one target at once: the pool makes one wait; nothing is doubled."""
    server, instance, warehouse = session.server, session.instance, session.warehouse
    config = {"ops": {"devil_snapshot": {"config": {"cap": 500}}}}
    pair = [_launch(server, ["devil_snapshot"], run_config=config) for _ in range(2)]
    assert [server.wait_run(run_id) for run_id in pair] == ["SUCCESS", "SUCCESS"]
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
    assert sorted(a for acts in _actions(warehouse, pair).values() for a in acts) == ["loaded", "skipped"]


def test_a_user_session_in_the_ui(stack):
    """One user's session, phase after phase. Not split into tests: each phase works on what the phases
    before left in the warehouse, Dagster's storage and the UI (make run's two runs, the deliveries, the
    changed species), as a user's session does, and starting dagster dev and make run take minutes."""
    server, instance, warehouse, data_dir, gbif = stack
    OUTPUT.mkdir(parents=True, exist_ok=True)
    browser = Browser(OUTPUT / "chromium-profile")
    session = Session(server, instance, warehouse, data_dir, gbif, browser, partition_keys())
    lap = Laps()
    try:
        _make_run_twice_and_everything_is_fresh(session)
        lap("1 make run twice, all fresh")
        _make_runs_runs_are_listed_under_their_job_and_reexecute(session)
        lap("1b make run's runs under their job, re-executed")
        _a_backfill_from_the_dialog_skips_every_partition(session)
        lap("2 backfill from the dialog")
        _deliveries_drive_the_sensor(session)
        lap("3 deliveries")
        _one_species_changes_and_only_its_partitions_load(session)
        lap("4 one species changed, materialize unsynced")
        _one_species_fails_in_a_range_run(session)
        lap("5 a failing partition")
        _the_map_of_a_species(session)
        lap("6 map")
    finally:
        browser.close()
    _two_runs_of_one_target_at_once(session)
    lap("7 overlap")
