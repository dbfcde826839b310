"""Security: SQL is never assembled from strings (ruff's bandit rules), secrets never leave the environment,
and the UI binds to 127.0.0.1.

The secrets test plants its own secrets, long random values made for the run: the GBIF credentials, the
ledger salt, the release masking key (and looks for the key of the masked release's draws, made from it),
and the warehouse's password (the warehouse is a throwaway cluster of its own, whose role the test
creates with that password). It runs the pipeline through a Postgres-backed Dagster instance,
including a registration with GBIF (so the GBIF credentials are really used) and runs that fail, then
scans every event record, every run record, every row of every table in the warehouse and in Dagster's
storage, the compute logs, the data folder and the exception messages for each secret and for the
Basic-auth token made from the GBIF credentials.
"""

from __future__ import annotations

import base64
import re
import secrets
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import dagster as dg
import psycopg
import pytest
from psycopg import sql

from surveillance_pipeline.core.seeds import SeedKey
from surveillance_pipeline.lab.deliveries import write_lab_delivery
from surveillance_pipeline.lab.districts import lab_layer_path
from surveillance_pipeline.lab.resources import LabGbifSource
from surveillance_pipeline.orchestration.resources import DataPaths, GbifAccount, ReleaseMasking, Warehouse
from surveillance_pipeline.quality.assets import occurrence_quality
from surveillance_pipeline.releases.assets import masked_release, register_derived_dataset, sample_export
from surveillance_pipeline.releases.masking import MaskingRules, draw_scope
from surveillance_pipeline.samples.assets import occurrence_sample_summary
from surveillance_pipeline.snapshots.assets import devil_snapshot
from surveillance_pipeline_tests.support.fake_gbif import FakeGbif
from surveillance_pipeline_tests.support.faults.cluster import PrivateCluster
from surveillance_pipeline_tests.support.paths import PROJECT_ROOT as PROJECT
from surveillance_pipeline_tests.support.pipeline import DEVIL, SAMPLED, keep_all

# Long random values, new each run: a secret found in the scan can be nothing else (a short or common one,
# say a password "acc", would be found in "accepting").
GBIF_USER = f"gbif-user-{secrets.token_hex(8)}"
GBIF_PASSWORD = f"gbif-pw-{secrets.token_urlsafe(24)}"
LEDGER_SALT = f"ledger-salt-{secrets.token_urlsafe(24)}"
MASKING_KEY = f"masking-key-{secrets.token_urlsafe(24)}"
PUBLISH = {"publish": True, "source_url_base": "https://releases.example.org/sample"}


# ---------------------------------------------------------------- (a) no SQL from strings: ruff's S rules


def _ruff() -> str:
    found = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    assert Path(found).exists(), "ruff is a dev dependency: install the lock file"
    return found


def test_lint_config_selects_bandit_rules_for_the_package_and_ignores_none_of_the_sql_ones():
    lint = tomllib.loads((PROJECT / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]
    assert "S" in lint["select"]
    assert all(not rule.startswith("S6") for rule in lint.get("ignore", []))
    for pattern, ignored in lint.get("per-file-ignores", {}).items():
        assert not pattern.startswith("surveillance_pipeline/") or "S" not in ignored, pattern
    makefile = (PROJECT / "Makefile").read_text()
    assert re.search(r"^lint:.*\n(\t.*\n)*\t\$\(BIN\)/ruff check \.", makefile, re.MULTILINE)


def test_ruff_with_the_project_config_refuses_sql_built_from_an_f_string(tmp_path):
    bad = tmp_path / "bad_sql.py"
    bad.write_text(
        "def load(conn, table, year):\n"
        '    conn.execute(f"SELECT * FROM {table} WHERE year = {year}")\n'
        '    conn.execute("DELETE FROM " + table + " WHERE year = %s", [year])\n'
    )
    checked = subprocess.run(  # noqa: S603
        [_ruff(), "check", "--no-cache", "--config", str(PROJECT / "pyproject.toml"), str(bad)],
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 1
    assert checked.stdout.count("S608") == 2, checked.stdout


# ---------------------------------------------------------------- (b) secrets stay secret


def _with_port(url: str, port: int) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{parts.username}:{parts.password}@127.0.0.1:{port}"))


def _rows_as_text(url: str) -> list[str]:
    """Every row of every table in the public schema (PostGIS's reference table aside), as text."""
    texts = []
    with psycopg.connect(url.replace("postgresql+psycopg2://", "postgresql://", 1), autocommit=True) as conn:
        tables = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'spatial_ref_sys'"
            " ORDER BY tablename"
        ).fetchall()
        for (table,) in tables:
            query = sql.SQL("SELECT t::text FROM {} AS t").format(sql.Identifier(table))
            texts += [f"{table}: {row[0]}" for row in conn.execute(query).fetchall()]
    return texts


def _files_as_text(folder: Path) -> list[str]:
    return [
        f"{path}: {path.read_bytes().decode('utf-8', 'replace')}"
        for path in folder.rglob("*")
        if path.is_file()
    ]


def _files_as_text_of(*paths: Path) -> list[str]:
    return [f"{path}: {path.read_text()}" for path in paths]


def _found(texts: list[str], secrets: dict[str, str]) -> list[str]:
    return [f"{name} in {text[:160]!r}" for text in texts for name, value in secrets.items() if value in text]


@pytest.fixture()
def private_warehouse():
    """A PostGIS warehouse on a throwaway cluster; its role's password is a random value planted here."""
    cluster = PrivateCluster()
    try:
        cluster.start()
        yield cluster.url
    finally:
        cluster.destroy()


def _plant_secrets(monkeypatch: pytest.MonkeyPatch, database_url: str) -> dict[str, str]:
    """Put the secrets where a deployment keeps them (the environment); the values the scan looks for."""
    monkeypatch.setenv("SURVEILLANCE_DATABASE_URL", database_url)
    monkeypatch.setenv("GBIF_USER", GBIF_USER)
    monkeypatch.setenv("GBIF_PASSWORD", GBIF_PASSWORD)
    # No code reads a ledger salt yet; set anyway, so the scan covers it when the geocoder ledger lands.
    monkeypatch.setenv("GEOCODER_LEDGER_SALT", LEDGER_SALT)
    monkeypatch.setenv("RELEASE_MASKING_KEY", MASKING_KEY)
    database_password = urlsplit(database_url).password
    assert database_password and len(database_password) >= 32, "the cluster's planted password"
    return {
        "database password": database_password,
        "GBIF password": GBIF_PASSWORD,
        "GBIF Basic token": base64.b64encode(f"{GBIF_USER}:{GBIF_PASSWORD}".encode()).decode(),
        "ledger salt": LEDGER_SALT,
        "release masking key": MASKING_KEY,
    }


def _resources_as_deployed(data_dir: Path, gbif: FakeGbif) -> dict[str, object]:
    """As definitions.live_resources binds them: secrets as EnvVar, read at run time."""
    return {
        "warehouse": Warehouse(database_url=dg.EnvVar("SURVEILLANCE_DATABASE_URL")),
        "paths": DataPaths(root=str(data_dir), region_layer=str(lab_layer_path())),
        "gbif": LabGbifSource(source="lab", base_url=gbif.base_url),
        "gbif_account": GbifAccount(user=dg.EnvVar("GBIF_USER"), password=dg.EnvVar("GBIF_PASSWORD")),
        "masking": ReleaseMasking(key=dg.EnvVar("RELEASE_MASKING_KEY")),
    }


def _run(instance, resources, assets, partition=None, config=None, raise_on_error=True):
    return dg.materialize(
        assets,
        instance=instance,
        partition_key=partition,
        resources=resources,
        run_config=config or {},
        raise_on_error=raise_on_error,
    )


def _register(instance, resources, raise_on_error=True):
    return register_derived_dataset.execute_in_process(
        instance=instance,
        resources=resources,
        run_config={"ops": {"register_derived_dataset_op": {"config": PUBLISH}}},
        raise_on_error=raise_on_error,
    )


def _runs_that_use_every_secret(instance, resources, gbif: FakeGbif, planted: dict[str, str], data_dir: Path):
    """Loads, a masked release (its draws keyed by the masking key), a sample release registered with GBIF
    (the credentials really sent), a delivery."""
    for slug in (DEVIL, "ornithorhynchus-anatinus"):
        assert _run(instance, resources, SAMPLED, slug).success
    assert _run(instance, resources, [occurrence_quality, masked_release], DEVIL).success
    assert _run(
        instance, resources, [occurrence_sample_summary, sample_export], config=keep_all("sample_export")
    ).success
    assert _register(instance, resources).success
    assert gbif.posts() and gbif.posts()[0]["authorization"] == f"Basic {planted['GBIF Basic token']}"
    write_lab_delivery(data_dir, "A", "2026-11-02")
    assert _run(instance, resources, [devil_snapshot]).success


def _runs_that_fail(instance, resources, gbif: FakeGbif, database_url: str, data_dir: Path) -> list[str]:
    """A bad delivery, a warehouse that refuses connections (same password, closed port), and a registration
    whose answer is lost; the errors they raise or report."""
    errors: list[str] = []
    with pytest.raises(Exception) as refused:
        dg.materialize(
            [devil_snapshot],
            instance=instance,
            resources={**resources, "warehouse": Warehouse(database_url=_with_port(database_url, 1))},
        )
    errors.append(f"{refused.type.__name__}: {refused.value}")
    (data_dir / "deliveries" / DEVIL / "2026-11-09.csv").write_text("id,year,license\n1,2020,secret?\n")
    failures = [_run(instance, resources, [devil_snapshot], raise_on_error=False)]
    gbif.create_mode = "drop"
    (data_dir / "exports" / "sample" / "manifest.json").write_bytes(b'{"changed": true}\n')
    failures.append(_register(instance, resources, raise_on_error=False))
    assert not any(failure.success for failure in failures)
    for failure in failures:
        for event in failure.all_events:
            if event.is_step_failure:
                errors.append(str(event.step_failure_data.error))
    assert any("secret?" in error for error in errors), "the bad delivery's error was collected"
    assert any("Connection refused" in error or "port 1" in error for error in errors), errors
    return errors


def _everything_written(instance, runs, events, errors, database_url, dagster_storage_url, data_dir):
    """Every text a secret could have leaked into."""
    return [
        *errors,
        *events,
        *(dg.serialize_value(record) for record in runs),
        *_rows_as_text(database_url),
        *_rows_as_text(dagster_storage_url),
        *_files_as_text(data_dir),
        # The test instance's own dagster.yaml is the fixture's (it names the storage URL with its
        # password); the project's dagster.yaml, which reads every credential from env:, is scanned instead.
        *(text for text in _files_as_text(Path(instance.root_directory)) if "dagster.yaml: " not in text),
        *_files_as_text_of(PROJECT / "dagster.yaml", PROJECT / "workspace.yaml"),
    ]


def _assert_the_scan_has_teeth(database_url: str, events: list[str]) -> None:
    """The scan sees the metadata it should (a job key) and a planted secret in a table."""
    with psycopg.connect(database_url, autocommit=True) as db:
        job_key = db.execute(
            "SELECT job_key FROM target_state WHERE target = 'occurrences' LIMIT 1"
        ).fetchone()[0]
        assert any(job_key in event for event in events)
        db.execute("CREATE TABLE security_canary (note text)")
        db.execute("INSERT INTO security_canary VALUES (%s)", [f"planted {LEDGER_SALT}"])
        assert _found(_rows_as_text(database_url), {"ledger salt": LEDGER_SALT}) == [
            f"ledger salt in {'security_canary: (' + chr(34) + 'planted ' + LEDGER_SALT + chr(34) + ')'!r}"
        ]
        db.execute("DROP TABLE security_canary")


def test_secrets_never_reach_events_metadata_tables_files_or_errors(
    private_warehouse, dagster_storage_url, data_dir, postgres_instance, monkeypatch
):
    instance, database_url = postgres_instance, private_warehouse
    planted = _plant_secrets(monkeypatch, database_url)
    with FakeGbif() as gbif:
        resources = _resources_as_deployed(data_dir, gbif)
        _runs_that_use_every_secret(instance, resources, gbif, planted, data_dir)
        errors = _runs_that_fail(instance, resources, gbif, database_url, data_dir)

    runs = instance.get_runs()
    events = [dg.serialize_value(entry) for record in runs for entry in instance.all_logs(record.run_id)]
    texts = _everything_written(instance, runs, events, errors, database_url, dagster_storage_url, data_dir)
    _assert_the_scan_has_teeth(database_url, events)
    assert len(runs) >= 8 and len(events) > 100
    # The key of the masked release's draws, derived from the masking key: with it, the release could be
    # undone.
    draws = SeedKey(MASKING_KEY).scope_key(draw_scope(MaskingRules()))
    planted["masked release draws' key"] = draws.hex()
    assert _found(texts, planted) == []


# ---------------------------------------------------------------- (c) the UI binds to 127.0.0.1


def test_the_ui_and_graphql_bind_to_localhost_only():
    makefile = (PROJECT / "Makefile").read_text()
    [ui] = re.findall(r"^ui:.*\n((?:\t.*\n)+)", makefile, re.MULTILINE)
    assert "dagster dev -h 127.0.0.1 " in ui
    assert "0.0.0.0" not in makefile  # noqa: S104 (the string we look for, not a bind)
    # The e2e harness starts `dagster dev` the same way.
    harness = (PROJECT / "surveillance_pipeline_tests" / "support" / "dagster_dev.py").read_text()
    assert "0.0.0.0" not in harness  # noqa: S104
