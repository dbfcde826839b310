"""Provisioning never replaces what the user said, never touches a server it did not create, and waits for
a busy package manager: a setting that does not work stops it with one line saying what is wrong."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from surveillance_pipeline.commands.probe_warehouse import (
    UnusableSetting,
    check_data_dir,
    probe,
    url_with_database,
)
from surveillance_pipeline_tests.support.paths import PROJECT_ROOT

SCRIPTS = PROJECT_ROOT / "scripts"


def _with(url: str, **changes: str) -> str:
    parts = {k: str(v) for k, v in conninfo_to_dict(url).items() if v is not None}
    return make_conninfo(**{**parts, **changes})


def _unusable(url: str) -> str:
    with pytest.raises(UnusableSetting) as refused:
        probe(url)
    message = str(refused.value)
    password = conninfo_to_dict(url).get("password")
    assert not password or str(password) not in message, "a password is never printed"
    return message


@pytest.mark.db
def test_each_kind_of_wrong_url_is_named_in_one_line(database_url):
    user = conninfo_to_dict(database_url)["user"]
    assert f"authentication failed for user '{user}'" in _unusable(_with(database_url, password="wrong"))
    assert "nothing listens on 127.0.0.1:1:" in _unusable(_with(database_url, host="127.0.0.1", port="1"))
    missing = _unusable(url_with_database(database_url, "no_such_database_here"))
    assert "database 'no_such_database_here' does not exist" in missing
    # A schema the role may not create tables in (pg_catalog, first on its search_path).
    locked = _unusable(_with(database_url, options="-csearch_path=pg_catalog"))
    assert f"role '{user}' may not create tables in schema 'pg_catalog'" in locked
    assert "GRANT CREATE ON SCHEMA pg_catalog" in locked


@pytest.mark.db
def test_a_database_without_postgis_is_named_with_the_statement_to_run(server_url):
    name = f"no_postgis_{os.getpid()}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")  # noqa: S608  # a fixed test name
        conn.execute(f"CREATE DATABASE {name} TEMPLATE template0")  # noqa: S608
    try:
        message = _unusable(url_with_database(server_url, name))
        assert f"PostGIS is not installed in database '{name}': run `CREATE EXTENSION postgis`" in message
    finally:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name}")  # noqa: S608


def test_a_data_folder_that_cannot_be_written_is_named():
    with pytest.raises(UnusableSetting, match="the data folder '/dev/null/data' is not writable"):
        check_data_dir("/dev/null/data")


def _provision(clone: Path, left_out: tuple[str, ...], **given: str) -> subprocess.CompletedProcess[str]:
    """scripts/provision_postgis.sh run from a copy of the scripts in ``clone`` (a fresh clone: no
    .local/), from an environment without the variables ``left_out`` names, with ``given``."""
    shutil.copytree(SCRIPTS, clone / "scripts")
    environment = {
        **{k: v for k, v in os.environ.items() if not k.startswith(left_out)},
        **given,
        "PYTHON": sys.executable,
    }
    return subprocess.run(  # noqa: S603  # fixed argv, no shell
        ["bash", str(clone / "scripts" / "provision_postgis.sh")],
        env=environment,
        capture_output=True,
        text=True,
    )


def _clusters() -> list[tuple[str, ...]]:
    """Every PostgreSQL cluster on the machine: version, name, port, status, and its server's start time."""
    listed = subprocess.run(["pg_lsclusters", "-h"], capture_output=True, text=True, check=True).stdout  # noqa: S607
    clusters = []
    for line in listed.splitlines():
        version, name, port, status = line.split()[:4]
        started = ""
        pid_file = Path(f"/var/lib/postgresql/{version}/{name}/postmaster.pid")
        if status == "online" and pid_file.exists():
            started = pid_file.read_text(encoding="utf-8").splitlines()[2]  # the postmaster's start time
        clusters.append((version, name, port, status, started))
    return clusters


@pytest.mark.db
def test_a_wrong_explicit_url_stops_provisioning_and_starts_or_writes_nothing(database_url, tmp_path):
    clone = tmp_path / "clone"
    before = _clusters()
    done = _provision(
        clone,
        ("DAGSTER_PG_", "GEOCODER_"),
        SURVEILLANCE_DATABASE_URL=_with(database_url, password="wrong"),
    )
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"provision: SURVEILLANCE_DATABASE_URL: authentication failed for user "
        f"'{conninfo_to_dict(database_url)['user']}' on {conninfo_to_dict(database_url)['host']}:"
        f"{conninfo_to_dict(database_url)['port']}: check the password in the URL"
    ]
    assert not (clone / ".local").exists(), "nothing written"
    assert _clusters() == before, "no cluster started, created or restarted"


def test_a_busy_package_manager_is_waited_for_and_a_failed_install_names_the_command(tmp_path):
    """A fake apt-get on the PATH: the lock is held twice, then the install goes through; another
    package fails outright."""
    fake = tmp_path / "bin" / "apt-get"
    fake.parent.mkdir()
    counter = tmp_path / "calls"
    fake.write_text(
        "#!/bin/bash\n"
        f'echo "$*" >> {counter}\n'
        'if [[ "$*" == *broken-package* ]]; then\n'
        '  echo "E: Unable to locate package broken-package" >&2; exit 100\n'
        "fi\n"
        f'if [ "$(grep -c install {counter})" -le 2 ] && [[ "$*" == *install* ]]; then\n'
        '  echo "E: Could not get lock /var/lib/dpkg/lock-frontend." \\\n'
        '    "It is held by process 4242 (apt-get)" >&2\n'
        "  exit 100\n"
        "fi\n"
        "exit 0\n",
        encoding="utf-8",
    )
    fake.chmod(0o755)
    script = (
        'say() { printf "provision: %s\\n" "$*" >&2; }; '
        f'. "{SCRIPTS / "apt_install.sh"}"; apt_install postgresql && echo installed; '
        "apt_install broken-package || echo refused"
    )
    done = subprocess.run(  # noqa: S603
        ["bash", "-c", script],
        env={**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}", "APT_LOCK_POLL_S": "0.1"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.split() == ["installed", "refused"]
    said = done.stderr
    assert said.count("waiting for another package installation to finish") == 1
    assert "held by process 4242 (apt-get)" in said
    assert "could not install broken-package: run `apt-get update && apt-get install broken-package`" in said
    assert "DPkg::Lock::Timeout=60" in counter.read_text(encoding="utf-8")


def _template1_extensions(port: str) -> list[str]:
    listed = subprocess.run(  # noqa: S603
        [
            "runuser",
            "-u",
            "postgres",
            "--",
            "psql",
            "-At",
            "-p",
            port,
            "-d",
            "template1",
            "-c",
            "SELECT extname FROM pg_extension ORDER BY 1",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd="/",
    )
    return listed.stdout.split()


@pytest.mark.db
def test_a_fresh_clone_uses_a_cluster_of_its_own_and_leaves_the_others_as_they_were(tmp_path):
    if os.environ.get("SURVEILLANCE_WAREHOUSE_ORIGIN") == "given":
        pytest.skip("this warehouse is the user's own server: provisioning manages no cluster here")
    clone = tmp_path / "clone"
    others = [c for c in _clusters() if c[1] != "surveillance"]
    extensions = {c[2]: _template1_extensions(c[2]) for c in others if c[3] == "online"}
    done = _provision(clone, ("DAGSTER_PG_", "SURVEILLANCE_"))
    assert done.returncode == 0, done.stderr
    kept = (clone / ".local" / "env.sh").read_text(encoding="utf-8")
    assert "SURVEILLANCE_WAREHOUSE_ORIGIN=" in kept and "/surveillance\n" in kept, done.stderr
    # The user's two secrets, generated once (or taken from the environment), for the Makefile's targets.
    assert "export GEOCODER_LEDGER_SALT=" in kept and "export RELEASE_MASKING_KEY=" in kept
    assert [c for c in _clusters() if c[1] != "surveillance"] == others, "another cluster was touched"
    assert {port: _template1_extensions(port) for port in extensions} == extensions
