"""Whole-partition replace: staging beside live, swapped by renames, every crash window repaired."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from surveillance_pipeline.core.keys import JobKeyParts, forget_hashed_files, sha256_file, sha256_file_once
from surveillance_pipeline.core.partition_files import (
    aside_folder,
    delete_stale_staging_file,
    file_stamp,
    read_file_stamps,
    recover_partition_folder,
    replace_file,
    replace_partition_folder,
    sha256_file_stamped,
    staging_folder,
    write_file_durably,
    write_file_stamps,
)
from surveillance_pipeline.releases.exports import MANIFEST, csv_export, export_is_current, publish_export
from surveillance_pipeline_tests.support.paths import PROJECT_ROOT


def hashes(folder: Path) -> dict[str, str]:
    return {p.name: sha256_file(p) for p in sorted(folder.iterdir())}


def writer(files: dict[str, bytes]):
    def write_into(staging: Path) -> None:
        for name, data in files.items():
            write_file_durably(staging / name, data)

    return write_into


def test_a_replace_drops_files_the_new_build_does_not_write(tmp_path):
    live = tmp_path / "asset" / "p1"
    replace_partition_folder(live, writer({"a.csv": b"1\n", "b.csv": b"2\n"}))
    replace_partition_folder(live, writer({"a.csv": b"3\n"}))
    assert {p.name: p.read_bytes() for p in live.iterdir()} == {"a.csv": b"3\n"}
    assert sorted(p.name for p in live.parent.iterdir()) == ["p1"]


def test_a_failed_build_leaves_live_intact_and_its_staging_goes_at_the_next_start(tmp_path):
    live = tmp_path / "p1"
    replace_partition_folder(live, writer({"a.csv": b"old\n"}))

    def fail_half_way(staging: Path) -> None:
        write_file_durably(staging / "a.csv", b"half")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        replace_partition_folder(live, fail_half_way)
    assert (live / "a.csv").read_bytes() == b"old\n"
    assert staging_folder(live).exists()
    replace_partition_folder(live, writer({"a.csv": b"new\n"}))
    assert (live / "a.csv").read_bytes() == b"new\n"
    assert not staging_folder(live).exists()


@pytest.mark.parametrize(
    ("left_behind", "expected_live", "expected_actions"),
    [
        # Killed between the renames: live missing, .old holds the last complete partition.
        (
            {"old": b"old\n", "staging": b"new\n"},
            b"old\n",
            ["deleted stale p1.staging", "restored p1 from p1.old"],
        ),
        # Killed after the swap, before .old was deleted.
        ({"live": b"new\n", "old": b"old\n"}, b"new\n", ["deleted p1.old left after a swap"]),
        # Killed while writing staging.
        ({"live": b"old\n", "staging": b"ne"}, b"old\n", ["deleted stale p1.staging"]),
        # Nothing left behind.
        ({"live": b"old\n"}, b"old\n", []),
    ],
)
def test_recovery_repairs_every_crash_window(tmp_path, left_behind, expected_live, expected_actions):
    live = tmp_path / "p1"
    folders = {"live": live, "old": aside_folder(live), "staging": staging_folder(live)}
    for role, data in left_behind.items():
        folders[role].mkdir()
        (folders[role] / "a.csv").write_bytes(data)
    assert recover_partition_folder(live) == expected_actions
    assert (live / "a.csv").read_bytes() == expected_live
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p1"]


def test_replace_file_deletes_a_stale_staging_file_and_never_appends(tmp_path):
    path = tmp_path / "raw" / "x.json"
    path.parent.mkdir()
    stale = path.with_name(".x.json.staging")
    stale.write_bytes(b"a long half-written stale file")
    replace_file(path, b"new")
    assert path.read_bytes() == b"new"
    assert not stale.exists()
    stale.write_bytes(b"left by a killed run")
    assert delete_stale_staging_file(path) is True
    assert delete_stale_staging_file(path) is False


# Runs in a child process: publishes one export, then starts a second one whose writer stops half way
# (after its first file, with a marker written) until the parent kills it with SIGKILL.
KILLED_WRITER = """
import sys, time
from pathlib import Path
from surveillance_pipeline.core.partition_files import replace_partition_folder, write_file_durably
live, marker = Path(sys.argv[1]), Path(sys.argv[2])

def write_slowly(staging):
    write_file_durably(staging / "sample.csv", b"id\\n999\\n")
    marker.write_text("staging half written")
    time.sleep(600)

replace_partition_folder(live, write_slowly)
"""


def test_sigkill_while_writing_staging_leaves_live_intact_and_the_rerun_completes(tmp_path):
    folder = tmp_path / "exports" / "sample"
    parts = JobKeyParts(input="a", transform=1, config={}, schema=1)
    publish_export(folder, [csv_export("sample.csv", ("id",), [(1,), (2,)])], parts, "ORDER BY id")
    before = hashes(folder)

    marker = tmp_path / "marker"
    child = subprocess.Popen(  # noqa: S603 - our own interpreter running our own script
        [sys.executable, "-c", KILLED_WRITER, str(folder), str(marker)],
        cwd=PROJECT_ROOT,
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
    )
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert child.poll() is None, "the writer exited before reaching its kill point"
            assert time.monotonic() < deadline, "the writer never reached its kill point"
            time.sleep(0.05)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait()
    assert child.returncode == -signal.SIGKILL
    assert (staging_folder(folder) / "sample.csv").exists(), "the kill came while staging was written"
    assert hashes(folder) == before
    assert export_is_current(folder, parts.key)

    new_parts = JobKeyParts(input="b", transform=1, config={}, schema=1)
    publish_export(folder, [csv_export("sample.csv", ("id",), [(3,)])], new_parts, "ORDER BY id")
    assert not staging_folder(folder).exists()
    assert not aside_folder(folder).exists()
    assert (folder / "sample.csv").read_bytes() == b"id\n3\n"
    assert export_is_current(folder, new_parts.key)
    assert sorted(p.name for p in folder.iterdir()) == [MANIFEST, "sample.csv"]


def test_a_kept_stamp_vouches_for_the_bytes_and_any_write_voids_it(tmp_path):
    records = tmp_path / "devil.records.tsv.gz"
    records.write_bytes(b"first bytes\n")
    stamps = tmp_path / "memos" / "devil.stamps.json"
    first = sha256_file_stamped(records, stamps)
    assert first == sha256_file(records)
    assert read_file_stamps(stamps) == {records.name: [*file_stamp(records), first]}

    # A new process (nothing remembered in it) takes the kept sha256 without reading the file: proven by
    # a stamp kept with another sha256, which it answers, as sha256_file_once does afterwards.
    forget_hashed_files()
    write_file_stamps(stamps, {records.name: [*file_stamp(records), "0" * 64]})
    assert sha256_file_stamped(records, stamps) == "0" * 64
    assert sha256_file_once(records) == "0" * 64
    assert sha256_file_stamped(records, None) == "0" * 64  # this process remembers, as for any hash
    forget_hashed_files()
    assert sha256_file_stamped(records, None) == first  # no stamps (make plan, make repair): hashed

    # An edit of the same size with the modification time set back: the change time still moved, so the
    # file is hashed again and its new stamp kept.
    write_file_stamps(stamps, {records.name: [*file_stamp(records), first]})
    before = records.stat()
    time.sleep(0.01)
    records.write_bytes(b"other bytes\n")
    os.utime(records, ns=(before.st_atime_ns, before.st_mtime_ns))
    # Nothing forgotten: this process's memory of the old bytes is keyed by their change time too.
    assert sha256_file_once(records) == sha256_file(records) != first
    edited = sha256_file_stamped(records, stamps)
    assert edited == sha256_file(records) != first
    assert read_file_stamps(stamps)[records.name][-1] == edited

    # keep=False reads the memo but never writes it (occurrences reading gbif_derived's stamps).
    records.write_bytes(b"third bytes, longer\n")
    assert sha256_file_stamped(records, stamps, keep=False) == sha256_file(records)
    assert read_file_stamps(stamps)[records.name][-1] == edited
