"""A private, throwaway PostgreSQL 15 cluster for the restart fault.

Stopping the project's server (Debian's ``15 main``) with ``-m immediate`` would disturb everyone else using
it, so the restart trials run against a cluster of their own: initdb into a temporary folder, listening on
127.0.0.1 and a free port only, with a random password (scram), removed afterwards. PostGIS is installed
for the server version, so any cluster of it can ``CREATE EXTENSION postgis``.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import psycopg

PG_BIN = Path(os.environ.get("SURVEILLANCE_PG_BIN", "/usr/lib/postgresql/15/bin"))
USER = "faults"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PrivateCluster:
    """initdb + pg_ctl as the ``postgres`` OS user when run as root (the server refuses to run as root)."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="surveillance-faults-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = _free_port()
        self.password = secrets.token_urlsafe(24)
        self.url = f"postgresql://{USER}:{self.password}@127.0.0.1:{self.port}/warehouse"

    def _run(self, *command: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*prefix, *command], check=True, capture_output=True, text=True)  # noqa: S603

    def start(self) -> None:
        password_file = self.root / "password"
        password_file.write_text(self.password, encoding="utf-8")
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres")
            shutil.chown(password_file, "postgres")
        self._run(
            str(PG_BIN / "initdb"),
            "-D",
            str(self.data),
            "-U",
            USER,
            "--auth=scram-sha-256",
            f"--pwfile={password_file}",
            "--no-sync",
        )
        password_file.unlink()
        self.restart_server()
        admin = self.url.rsplit("/", 1)[0] + "/postgres"
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute("CREATE DATABASE warehouse")
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS postgis")

    def restart_server(self) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.root}"
        self._run(
            str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "start"
        )

    def stop_immediately(self) -> None:
        """``pg_ctl stop -m immediate``: no checkpoint, every backend killed, crash recovery at next start."""
        self._run(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def destroy(self) -> None:
        try:
            self.stop_immediately()
        except subprocess.CalledProcessError:
            pass  # never started, or already down
        shutil.rmtree(self.root, ignore_errors=True)
