"""`make run` when a step or a species fails: the user sees its own error last, not a crash of the summary."""

import os
import re
import shutil
import subprocess

import dagster as dg
import psycopg
import pytest
from psycopg import sql

from surveillance_pipeline.commands.run import summarize
from surveillance_pipeline.gbif.registry import packaged_registry_path, partition_keys
from surveillance_pipeline.orchestration.partitions import species_partitions
from surveillance_pipeline_tests.support.commands import make_run_command, verify_command
from surveillance_pipeline_tests.support.fake_gbif import FakeGbif
from surveillance_pipeline_tests.support.faults.cluster import PrivateCluster
from surveillance_pipeline_tests.support.pipeline import partitions_in_status, rows_md5

pytestmark = [pytest.mark.db, pytest.mark.dagster]


def test_a_failed_first_step_on_an_empty_warehouse_ends_with_its_own_error(
    db, database_url, data_dir, dagster_storage_url, postgres_instance, tmp_path
):
    # What a user gets by dropping something that is not a zip into data/downloads/.
    (data_dir / "downloads").mkdir()
    (data_dir / "downloads" / "bad.zip").write_text("this is not a zip\n")
    assert db.execute("SELECT to_regclass('provenance')").fetchone() == (None,)
    # As `make run` runs it, on the instance the fixture just wiped.
    finished = make_run_command(
        tmp_path, dagster_storage_url, database_url, data_dir, {"GBIF_SOURCE": "download"}
    )
    output = finished.stdout + finished.stderr
    assert finished.returncode != 0, output
    assert "UndefinedTable" not in output and "Traceback" not in output, output
    last = [line for line in finished.stderr.splitlines() if line.strip()][-1]
    # The reader's wording may change; the step and the file it names must not. The first step is the
    # observation of the downloads folder, before any load.
    assert last.startswith("make run: gbif_downloads failed: "), output
    assert "bad.zip" in last, output
    assert "FAILED" in finished.stdout, output


def test_the_summary_of_an_empty_warehouse_is_its_header(db, database_url):
    assert summarize(database_url, ["no-such-run"]) == [
        f"{'asset':<5} {'loaded':>6} {'skipped':>7} {'rows':>8} {'seconds':>7}  reason"
    ]


def _latitude_as_text(records):
    """GBIF answers one record of the species with a latitude that is not a number."""
    first, *rest = records
    return [{**first, "decimalLatitude": "north"}, *rest]


def test_a_species_that_fails_is_named_and_the_others_load(
    db, database_url, data_dir, dagster_storage_url, postgres_instance, tmp_path
):
    broken = partition_keys()[3]
    with FakeGbif() as gbif:
        gbif.serve_lab_occurrences()
        gbif.edit_species(broken, _latitude_as_text)
        gbif_env = {"GBIF_SOURCE": "api", "GBIF_BASE_URL": gbif.base_url}
        finished = make_run_command(tmp_path, dagster_storage_url, database_url, data_dir, gbif_env)
    output = finished.stdout + finished.stderr
    assert finished.returncode == 1, output
    assert "Traceback" not in output, output
    errors = [line for line in finished.stderr.splitlines() if line.startswith("make run: ")]
    # The species' own error, named by partition, is what the user reads last.
    assert errors[-1].startswith(f"make run: gbif_derived partition {broken} failed: "), output
    assert "decimalLatitude" in errors[-1], output
    table = {line.split()[0]: line.split()[1:4] for line in finished.stdout.splitlines()[2:]}
    assert table["gbif_derived"][:2] == ["70", "0"] and table["occurrences"][:2] == ["70", "0"], output
    # The later jobs ran: the batches and the unpartitioned assets.
    assert table["occurrence_batches"][0] == "21" and table["sample_export"][0] == "1", output
    materialized, failed = (
        partitions_in_status(postgres_instance, dg.AssetKey("occurrences"), species_partitions, status)
        for status in (dg.AssetPartitionStatus.MATERIALIZED, dg.AssetPartitionStatus.FAILED)
    )
    assert failed == {broken} and len(materialized) == 70 and broken not in materialized


@pytest.fixture()
def small_disk(tmp_path):
    """A 12 MB file system of its own (the lab's data folder needs about 31 MB), grown on demand."""
    mount_point = tmp_path / "small_disk"
    mount_point.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=12m", "tmpfs", str(mount_point)], check=True)  # noqa: S607
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "--lazy", str(mount_point)], check=True)  # noqa: S607


def test_a_full_data_disk_is_said_once_with_the_folder_and_the_room_needed_and_the_next_run_completes(
    db, database_url, dagster_storage_url, postgres_instance, tmp_path, small_disk
):
    data_dir = small_disk / "data"
    failed = make_run_command(tmp_path, dagster_storage_url, database_url, data_dir, {})
    assert failed.returncode != 0, failed.stdout + failed.stderr
    said = [line for line in failed.stderr.splitlines() if line.startswith("make run: ")]
    full = [line for line in said if "No space left on device" in line]
    assert len(full) == 1, failed.stderr
    assert (
        f"the disk of the data folder {data_dir} is full" in full[0] and "a run needs about 40 MB" in full[0]
    )
    assert "MB free there" in full[0] and "Traceback" not in failed.stderr
    # Grown, the same folder completes: every partition loaded, the warehouse's tables whole.
    subprocess.run(["mount", "-o", "remount,size=256m", str(small_disk)], check=True)  # noqa: S607
    again = make_run_command(tmp_path, dagster_storage_url, database_url, data_dir, {})
    assert again.returncode == 0, again.stdout + again.stderr
    assert db.execute("SELECT count(*) FROM occurrences").fetchone() == (26391,)


@pytest.fixture()
def warehouse_on_a_small_disk():
    """A warehouse whose tables go to a 64 MB file system of their own, on a throwaway cluster: a
    tablespace needs a superuser, and the project's server is not to be changed. The catalogs and the
    write-ahead log stay on the cluster's own disk, as on a server whose data disk fills. Yields the
    warehouse's URL and the mount point."""
    cluster = PrivateCluster()
    mount_point = cluster.root / "small_disk"
    mounted = False
    try:
        cluster.start()
        mount_point.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount_point)], check=True)  # noqa: S607
        mounted = True
        shutil.chown(mount_point, "postgres", "postgres")
        with psycopg.connect(cluster.url, autocommit=True) as conn:
            conn.execute(
                sql.SQL("CREATE TABLESPACE small_disk LOCATION {}").format(sql.Literal(str(mount_point)))
            )
            conn.execute("ALTER DATABASE warehouse SET default_tablespace = small_disk")
        yield cluster.url, mount_point
    finally:
        # Unmounted before the cluster's folder is removed, which holds the mount point.
        if mounted:
            subprocess.run(["umount", "--lazy", str(mount_point)], check=True)  # noqa: S607
        cluster.destroy()


def _held(url):
    """occurrence_quality's state rows and an md5 of its rows."""
    with psycopg.connect(url) as conn:
        keys = conn.execute(
            "SELECT partition_key, job_key FROM target_state WHERE target = 'occurrence_quality' ORDER BY 1"
        ).fetchall()
        return keys, rows_md5(conn, "occurrence_quality")


def test_a_full_database_disk_is_said_once_and_the_flags_keep_the_snapshot_they_held(
    dagster_storage_url, postgres_instance, tmp_path, warehouse_on_a_small_disk
):
    url, mount_point = warehouse_on_a_small_disk
    registry = tmp_path / "species.csv"
    lines = packaged_registry_path().read_text(encoding="utf-8").splitlines()
    registry.write_text("\n".join(lines[:7]) + "\n", encoding="utf-8")
    env = {"SURVEILLANCE_SPECIES_FILE": str(registry)}
    data_dir = tmp_path / "data"
    first = make_run_command(tmp_path, dagster_storage_url, url, data_dir, env)
    assert first.returncode == 0, first.stdout + first.stderr
    before = _held(url)
    assert len(before[0]) == 6
    # The disk fills (another file takes all but 64 kB of it); a threshold change reloads every species'
    # flags, and each load needs new pages.
    free = shutil.disk_usage(mount_point).free
    with (mount_point / "filler").open("wb") as filler:
        os.posix_fallocate(filler.fileno(), 0, free - 64 * 1024)
    quality_file = tmp_path / "quality.yaml"
    quality_file.write_text("old_before_year: 1950\n", encoding="utf-8")
    env["SURVEILLANCE_QUALITY_FILE"] = str(quality_file)
    failed = make_run_command(tmp_path, dagster_storage_url, url, data_dir, env)
    assert failed.returncode != 0, failed.stdout + failed.stderr
    said = [line for line in failed.stderr.splitlines() if line.startswith("make run: ")]
    full = [line for line in said if "could not extend file" in line]
    assert len(full) == 1 and full[0].startswith("make run: PostgreSQL's disk is full"), failed.stderr
    # The flags' reloads fail for want of room. An earlier step's skip may fail too: its provenance row
    # can need a new page, and autovacuum, after the first run, may have taken the 64 kB for the tables'
    # free-space and visibility maps (seen once in CI: "2 failed: occurrences (1), occurrence_quality (1)").
    assert re.search(r"failed: (.*, )?occurrence_quality \(", full[0]), full
    assert "Traceback" not in failed.stderr, failed.stderr
    # Every species' flags are the snapshot they were, under the key they had; every partition holds.
    assert _held(url) == before
    verified = verify_command(url)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    # With room again, the next run loads the new flags.
    (mount_point / "filler").unlink()
    again = make_run_command(tmp_path, dagster_storage_url, url, data_dir, env)
    assert again.returncode == 0, again.stdout + again.stderr
    after = _held(url)
    assert [slug for slug, _ in after[0]] == [slug for slug, _ in before[0]]
    assert not {key for _, key in after[0]} & {key for _, key in before[0]}
    assert verify_command(url).returncode == 0
