"""A private Redis for a test: Debian's redis-server on a free loopback port, in a temporary folder, gone
afterwards. Not persisted: it lives as long as the test."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

from surveillance_pipeline_tests.support.dagster_dev import free_port


class PrivateRedis:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> PrivateRedis:
        self.start()
        return self

    def start(self) -> None:
        """Start the server on its port (again, after ``stop``: empty, as nothing is persisted)."""
        server = shutil.which("redis-server")
        if server is None:
            raise RuntimeError(
                "redis-server is not installed: `make test` installs it (scripts/provision_redis.sh)"
            )
        self.folder.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(  # noqa: S603  # fixed argv, no shell
            [
                server,
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--dir",
                str(self.folder),
                "--save",
                "",
                "--appendonly",
                "no",
                "--logfile",
                str(self.folder / "redis.log"),
            ],
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as connection:
                    connection.sendall(b"PING\r\n")
                    if connection.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.1)
        raise TimeoutError(f"redis-server did not answer on port {self.port}")

    def stop(self) -> None:
        """Stop the server (SIGTERM; with nothing persisted, what it held is gone)."""
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=30)
            self.process = None

    def __exit__(self, *_: object) -> None:
        self.stop()
