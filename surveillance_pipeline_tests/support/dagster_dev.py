"""A real `dagster dev` (webserver + daemon) for end-to-end tests, and a small GraphQL client for it.

`dagster dev` started in the background ignores SIGINT and SIGTERM inherited as ignored, so it runs in its
own session with default signal handlers and is stopped by signalling its whole process group.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from surveillance_pipeline_tests.support.paths import PROJECT_ROOT

DONE = {"SUCCESS", "FAILURE", "CANCELED"}
BACKFILL_DONE = {"COMPLETED", "COMPLETED_SUCCESS", "COMPLETED_FAILED", "FAILED", "CANCELED"}
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
DAGSTER = PROJECT_ROOT / ".venv" / "bin" / "dagster"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def project_dagster_home(home: Path, storage_url: str) -> dict[str, str]:
    """A DAGSTER_HOME with the project's dagster.yaml, and the environment it reads, on ``storage_url``."""
    storage = urlsplit(storage_url)
    home.mkdir(parents=True, exist_ok=True)
    shutil.copy(PROJECT_ROOT / "dagster.yaml", home / "dagster.yaml")
    return {
        "DAGSTER_HOME": str(home),
        "DAGSTER_ARTIFACTS_DIR": str(home / "artifacts"),
        "DAGSTER_COMPUTE_LOGS_DIR": str(home / "compute_logs"),
        "DAGSTER_PG_USERNAME": storage.username or "",
        "DAGSTER_PG_PASSWORD": storage.password or "",
        "DAGSTER_PG_HOST": storage.hostname or "127.0.0.1",
        "DAGSTER_PG_PORT": str(storage.port or 5432),
        "DAGSTER_PG_DB": storage.path.lstrip("/"),
    }


class DagsterDev:
    """`dagster dev` over a Postgres-backed instance configured by the project's own dagster.yaml."""

    def __init__(
        self,
        home: Path,
        warehouse_url: str,
        storage_url: str,
        data_dir: Path,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.home = home
        self.storage_url = storage_url
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            **project_dagster_home(home, storage_url),
            "SURVEILLANCE_DATABASE_URL": warehouse_url,
            "SURVEILLANCE_DATA_DIR": str(data_dir),
            **(extra_env or {}),
        }
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = home / "dagster_dev.log"

    def start(self, timeout: float = 90) -> None:
        # As `make ui` does: every pool's limit set before a run can claim it.
        subprocess.run(  # noqa: S603  # fixed argv, no shell
            [sys.executable, "-m", "surveillance_pipeline.commands.pools"],
            cwd=PROJECT_ROOT,
            env=self.env,
            check=True,
            capture_output=True,
        )
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [str(DAGSTER), "dev", "-h", "127.0.0.1", "-p", str(self.port), "-w", "workspace.yaml"],
                cwd=PROJECT_ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"dagster dev exited: {self.log_path.read_text()[-2000:]}")
            try:
                if self.graphql("{ version }")["version"]:
                    return
            except OSError:
                time.sleep(1)
        raise TimeoutError(f"dagster dev did not answer GraphQL in {timeout} s")

    def stop(self, timeout: float = 10) -> bool:
        """Stop the whole process group; True when no process of it is left. An idle `dagster dev` is gone
        3.4 s after SIGTERM (timed alone); a group still there after ``timeout`` is killed."""
        assert self.process is not None
        group = self.process.pid
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(group, sig)
            except ProcessLookupError:
                return True
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                self.process.poll()
                try:
                    os.killpg(group, 0)
                except ProcessLookupError:
                    return True
                time.sleep(0.5)
        return False

    def graphql(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        body = json.dumps({"query": query, "variables": variables or {}}).encode()
        request = urllib.request.Request(
            f"{self.url}/graphql", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 (our own loopback server)
            answer = json.loads(response.read())
        if answer.get("errors"):
            raise RuntimeError(f"GraphQL errors: {answer['errors']}")
        return answer["data"]

    def wait_run(self, run_id: str, timeout: float = 180) -> str:
        """Wait for a run to finish; its status."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.graphql(RUN_STATUS, {"id": run_id})["runOrError"]["status"]
            if status in DONE:
                return status
            time.sleep(1)
        raise TimeoutError(f"run {run_id} did not finish in {timeout} s")

    def launch_backfill(self, assets: list[str], partitions: list[str]) -> str:
        """A backfill of ``partitions`` of ``assets``, as the UI's dialog launches one; its id."""
        params = {"assetSelection": [{"path": [name]} for name in assets], "partitionNames": partitions}
        answer = self.graphql(LAUNCH_BACKFILL, {"params": params})["launchPartitionBackfill"]
        if answer["__typename"] != "LaunchBackfillSuccess":
            raise RuntimeError(f"backfill not launched: {answer}")
        return answer["backfillId"]

    def backfill_runs(self, backfill_id: str) -> list[dict[str, str]]:
        runs = self.graphql(RUNS_TAGGED, {"tags": [{"key": "dagster/backfill", "value": backfill_id}]})
        return runs["runsOrError"]["results"]

    def wait_backfill(self, backfill_id: str, timeout: float = 400) -> tuple[str, list[str]]:
        """Wait for a backfill and its runs to finish; its status and its runs."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.graphql(BACKFILL_STATUS, {"id": backfill_id})["partitionBackfillOrError"]["status"]
            if status in BACKFILL_DONE:
                break
            time.sleep(2)
        else:
            raise TimeoutError(f"backfill {backfill_id} did not finish in {timeout} s")
        run_ids = [run["runId"] for run in self.backfill_runs(backfill_id)]
        for run_id in run_ids:
            self.wait_run(run_id)
        return status, run_ids
