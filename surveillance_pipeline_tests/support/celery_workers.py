"""Celery workers as `make workers` starts them, for the distributed test and the bench."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from surveillance_pipeline.orchestration.workers import worker_command
from surveillance_pipeline_tests.support.dagster_dev import PROJECT_ROOT


class Workers:
    """Celery workers as `make workers` starts them: separate processes sharing only the environment."""

    def __init__(self, env: dict[str, str], folder: Path) -> None:
        self.env = env
        self.folder = folder
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def start(
        self, name: str, extra_env: dict[str, str] | None = None, extra_args: list[str] | None = None
    ) -> None:
        log = (self.folder / f"{name}.log").open("wb")
        self.processes[name] = subprocess.Popen(  # noqa: S603  # fixed argv, no shell
            worker_command(name) + (extra_args or []),
            cwd=PROJECT_ROOT,
            env={**self.env, **(extra_env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 90
        while b" ready." not in (self.folder / f"{name}.log").read_bytes():
            if self.processes[name].poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker {name} did not start: {self.log(name)[-3000:]}")
            time.sleep(0.5)

    def log(self, name: str) -> str:
        return (self.folder / f"{name}.log").read_text(errors="replace")

    def names(self) -> dict[str, str]:
        """Each running worker's host:pid, as provenance records it."""
        host = socket.gethostname()
        return {f"{host}:{process.pid}": name for name, process in self.processes.items()}

    def kill(self, name: str) -> None:
        self.processes.pop(name).send_signal(signal.SIGKILL)

    def stop(self, only: str | None = None) -> None:
        chosen = [self.processes.pop(only)] if only else list(self.processes.values())
        for process in chosen:
            if process.poll() is None:
                process.terminate()
        for process in chosen:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


@contextmanager
def workers_running(env: dict[str, str], folder: Path, names: list[str]) -> Iterator[Workers]:
    """The named workers, started (each waited for until ready) and stopped at the end."""
    workers = Workers(env, folder)
    try:
        for name in names:
            workers.start(name)
        yield workers
    finally:
        workers.stop()
