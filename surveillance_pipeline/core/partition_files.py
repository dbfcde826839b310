"""Replace a whole partition of files, never append: build ``<partition>.staging`` beside it, then swap.

A partition's files (``data/<asset>/<partition>/``) are written into a fresh staging folder beside the
live one and swapped in by renames, so a reader, or a run killed half way, sees either the old partition
or the new one, never a mix and never a leftover file from an earlier run.

Why rename-aside and not a symlink swap: rename(2) cannot replace a non-empty directory, so the swap is
``live -> <partition>.old``, ``staging -> live``, then ``.old`` is deleted. A symlink swap (``live`` a link
retargeted with one rename) would have no moment without ``live``, but it changes what every reader and
the shared layout see (a link where a folder was, versioned folders to collect). Our readers are pipeline
steps that Dagster pools never run beside the writer, so the short window without ``live`` is harmless,
and every crash window is repaired by ``recover_partition_folder`` at the next start:

- killed while writing staging: live is untouched; the staging folder is deleted, never reused;
- killed between the two renames: live is missing and ``.old`` holds the last complete partition, which
  is put back (the new build is discarded with its staging folder: it is rebuilt, not trusted);
- killed after the swap, before or while deleting ``.old``: live is complete, ``.old`` is deleted.

Single-file partitions (``data/raw/<slug>.json``) need no folder: one rename replaces a file atomically,
and ``replace_file`` deletes a stale staging file before it writes.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

STAGING_SUFFIX = ".staging"
ASIDE_SUFFIX = ".old"


def staging_folder(live: Path) -> Path:
    return live.with_name(live.name + STAGING_SUFFIX)


def aside_folder(live: Path) -> Path:
    return live.with_name(live.name + ASIDE_SUFFIX)


def _fsync_folder(folder: Path) -> None:
    """Make renames and new entries in ``folder`` durable (a directory fsync on POSIX)."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def recover_partition_folder(live: Path) -> list[str]:
    """Repair what a killed swap left behind; returns what it did (empty when nothing was left).

    Deletes a stale staging folder, puts ``.old`` back when live is missing, and deletes ``.old`` when
    live is there.
    """
    done: list[str] = []
    staging, aside = staging_folder(live), aside_folder(live)
    if staging.exists():
        shutil.rmtree(staging)
        done.append(f"deleted stale {staging.name}")
    if aside.exists():
        if live.exists():
            shutil.rmtree(aside)
            done.append(f"deleted {aside.name} left after a swap")
        else:
            os.rename(aside, live)
            done.append(f"restored {live.name} from {aside.name}")
    return done


def write_file_durably(path: Path, data: bytes) -> None:
    with path.open("wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def replace_partition_folder(live: Path, write_into: Callable[[Path], None]) -> None:
    """Make ``live`` hold exactly what ``write_into(staging)`` writes, swapped in whole.

    ``write_into`` receives an empty staging folder and must write every file of the partition into it
    (durably, e.g. with ``write_file_durably``). Whatever was in ``live`` before is gone afterwards,
    including files the new build does not write.
    """
    live.parent.mkdir(parents=True, exist_ok=True)
    recover_partition_folder(live)
    staging = staging_folder(live)
    staging.mkdir()
    write_into(staging)
    _fsync_folder(staging)
    aside = aside_folder(live)
    if live.exists():
        os.rename(live, aside)
    os.rename(staging, live)
    _fsync_folder(live.parent)
    if aside.exists():
        shutil.rmtree(aside)


def staging_file(path: Path) -> Path:
    """Where a single-file partition is written before it is renamed over ``path``."""
    return path.with_name(f".{path.name}{STAGING_SUFFIX}")


def replace_file(path: Path, data: bytes) -> None:
    """Replace a single-file partition: write ``.<name>.staging`` beside it, then rename over it.

    A staging file left by a killed run is deleted first, never appended to or reused.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = staging_file(path)
    staging.unlink(missing_ok=True)
    write_file_durably(staging, data)
    os.replace(staging, path)
    _fsync_folder(path.parent)


def delete_stale_staging_file(path: Path) -> bool:
    """Delete the staging file a killed ``replace_file`` left beside ``path``; True when there was one.

    Called when a partition's step starts, so a stale file goes even when the partition then skips.
    """
    staging = staging_file(path)
    if staging.exists():
        staging.unlink()
        return True
    return False


def read_memo(path: Path, **expected: object) -> dict[str, Any] | None:
    """A memo's JSON object (``data/memos/...``, written with replace_file) when it holds each ``expected``
    field with that value; None when it is missing, unreadable, or written for other inputs or another
    layout. A memo saves work: one that cannot be used costs that work again, never a wrong answer."""
    try:
        memo = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(memo, dict) or any(memo.get(name) != value for name, value in expected.items()):
        return None
    return memo
