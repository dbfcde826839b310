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

from surveillance_pipeline.core.keys import file_identity, remember_file_sha256, sha256_file_once

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


# File stamps: what lets a skip trust an unchanged file without reading it. Any write to a file, in place or
# by replacing it, changes its size, inode or change time (ctime, which no tool can set back, as ``touch``
# sets back mtime), so a file with the stamp kept for a sha256 still has those bytes. The one blind spot is
# a second write of the same size within the filesystem's clock tick (some milliseconds) of the stamp being
# taken; only the pipeline writes then, under its locks. ``make repair`` (every skip verified) and
# ``make plan`` never trust stamps: they hash every file. A stamp memo is ``{"version": 1, "files": {name:
# [device, inode, size, mtime_ns, ctime_ns, sha256]}}``, one per partition, for the files named in it.
STAMPS_VERSION = 1


def file_stamp(path: Path) -> tuple[int, int, int, int, int]:
    """What changes whenever the file's bytes do: device, inode, size, mtime and ctime (nanoseconds)."""
    found = path.stat()  # the same fields, in the same order, as keys.file_identity after the path
    return (found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns)


def read_file_stamps(stamps: Path) -> dict[str, list[Any]]:
    """The stamps kept in a memo, by file name; empty when it is missing or damaged (which costs a read
    of the files, never a wrong skip)."""
    kept = read_memo(stamps, version=STAMPS_VERSION)
    return kept["files"] if kept is not None and isinstance(kept.get("files"), dict) else {}


def write_file_stamps(stamps: Path, files: dict[str, list[Any]]) -> None:
    replace_file(
        stamps, json.dumps({"version": STAMPS_VERSION, "files": files}, sort_keys=True).encode("utf-8")
    )


def forget_file_stamps(stamps: Path, keep: set[str]) -> None:
    """Drop the stamps of files not named in ``keep`` (gone from their folder), so a memo does not grow
    with every file that ever passed through it."""
    kept = read_file_stamps(stamps)
    if set(kept) - keep:
        write_file_stamps(stamps, {name: stamp for name, stamp in kept.items() if name in keep})


def keep_file_stamps(stamps: Path, sha256_of: dict[Path, str]) -> None:
    """Keep each file's stamp as it is now with its sha256, known from writing or reading its bytes just
    before: so the first skip after a load reads no file and writes no memo."""
    kept = read_file_stamps(stamps)
    fresh = {path.name: [*file_stamp(path), sha256] for path, sha256 in sha256_of.items()}
    if any(kept.get(name) != stamp for name, stamp in fresh.items()):
        write_file_stamps(stamps, {**kept, **fresh})


def sha256_file_stamped(path: Path, stamps: Path | None, *, keep: bool = True) -> str:
    """The file's sha256: the one kept in the memo ``stamps`` when the file's stamp is the one kept with
    it (the bytes are not read), else hashed, and then, with ``keep``, its stamp kept for the next process.
    None: hashed as ``sha256_file_once`` does (make plan, make repair). Without stamps, a skip in a fresh
    process read every species' raw records and derived files (about 1 s each of gbif_raw's and
    gbif_derived's skips of a 20M-record download) to learn they had not changed."""
    if stamps is None:
        return sha256_file_once(path)
    identity = file_identity(path)
    before = identity[1:]
    kept = read_file_stamps(stamps)
    entry = kept.get(path.name)
    if isinstance(entry, list) and len(entry) == len(before) + 1 and tuple(entry[:-1]) == before:
        if isinstance(entry[-1], str):
            remember_file_sha256(identity, entry[-1])  # the rest of this process asks sha256_file_once
            return entry[-1]
    # This process's memory is keyed by the same identity, ctime included, so it is as good as a stamp.
    digest = sha256_file_once(path)
    # Kept only when the file did not change while it was read: the stamp must be of these bytes.
    if keep and file_identity(path) == identity:
        write_file_stamps(stamps, {**kept, path.name: [*before, digest]})
    return digest
