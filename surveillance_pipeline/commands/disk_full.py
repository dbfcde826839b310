"""A full disk is said once, where it is and how much room is needed, not once per failed partition.

When the data folder's disk fills, every partition still to write fails alike ("[Errno 28] No space left on
device", 49 lines on a 12 MB disk); when PostgreSQL's does, every load fails with its "could not extend
file". Either way each target kept the snapshot it held (a partition is swapped in whole, or its
transaction rolls back), and the next run, with room again, loads what is missing. make run prints one
line for each full disk in place of those lines, naming the folder or the server, the space free there and
the space the run needs; other failures are printed as they are.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

# The lab's data folder after a first make run (du -sh data: 31 MB, 2026-12-06), with room to spare.
LAB_DATA_MB = 40
# A GBIF download's species files take about a third of its zip again beside it (docs/performance.md).
DOWNLOAD_SHARE = 1 / 3
MB = 1024 * 1024


def _is_database_full(line: str) -> bool:
    return "could not extend file" in line or "DiskFull" in line


def _is_folder_full(line: str) -> bool:
    return "No space left on device" in line or "[Errno 28]" in line


def needed_mb(folder: Path) -> int:
    """The room a run needs in the data folder: the lab's, and a third of every download zip in it."""
    zips = sum(path.stat().st_size for path in (folder / "downloads").glob("*.zip")) if folder.is_dir() else 0
    return LAB_DATA_MB + round(zips * DOWNLOAD_SHARE / MB)


def _free_mb(folder: Path) -> int | None:
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        return shutil.disk_usage(probe).free // MB
    except OSError:
        return None


def _where(lines: Sequence[str]) -> str:
    """Which assets' steps or partitions failed, e.g. 'gbif_raw (49), gbif_derived (1)'."""
    counts: dict[str, int] = {}
    for line in lines:
        asset = line.split(" ", 1)[0]
        counts[asset] = counts.get(asset, 0) + 1
    return ", ".join(f"{asset} ({count})" for asset, count in counts.items())


def collapse_disk_full(failures: Sequence[str], folder: Path) -> list[str]:
    """``failures`` (make run's lines, "<asset> partition <key> failed: <error>" or "<asset> failed: ..."),
    each full disk said once; the other lines as they are, in their order."""
    database = [line for line in failures if _is_database_full(line)]
    on_folder = [line for line in failures if _is_folder_full(line) and line not in database]
    kept = [line for line in failures if line not in database and line not in on_folder]
    said = []
    if on_folder:
        free = _free_mb(folder)
        room = f"{free} MB free there" if free is not None else "its free space unknown"
        said.append(
            f"the disk of the data folder {folder} is full ([Errno 28] No space left on device; "
            f"{len(on_folder)} failed: {_where(on_folder)}). {room}; a run needs about "
            f"{needed_mb(folder)} MB "
            "(the lab's data, and a third of each download's zip). Every target kept what it held: free "
            "space there (or set SURVEILLANCE_DATA_DIR to a larger disk) and run make run again."
        )
    if database:
        said.append(
            f"PostgreSQL's disk is full (could not extend file; {len(database)} failed: {_where(database)}). "
            "Every target kept the snapshot it held (each load rolled back): free space where the server "
            "keeps the warehouse's tables (its data directory, or their tablespace) and run make run again."
        )
    return said + kept
