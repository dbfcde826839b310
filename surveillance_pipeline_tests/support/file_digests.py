"""Each file under a folder by its sha256: how the tests and the bench compare two places' outputs."""

from __future__ import annotations

from pathlib import Path

from surveillance_pipeline.core.keys import sha256_file

# Memos of file stamps (inode, size, mtime, ctime: core.partition_files.file_stamp): the same outputs
# written twice, or in two places, have other stamps. They are compared by name, never by bytes:
# masked_release's, and every ``<partition>.stamps.json`` (DataPaths.stamps). geocoded_localities' memos
# name the geocoder ledger's version, a token each warehouse draws anew (migration 9): by name too.
STAMP_MEMOS = ("memos/masked_release", "memos/geocoded_localities")
STAMP_MEMO_SUFFIX = ".stamps.json"
STAMPS = "(stamps)"


def file_hashes(root: Path) -> dict[str, str]:
    """Each file under ``root`` by its sha256 (a stamp memo by name only)."""
    return {
        p.relative_to(root).as_posix(): STAMPS if _is_stamp_memo(p) else sha256_file(p)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _is_stamp_memo(path: Path) -> bool:
    return path.name.endswith(STAMP_MEMO_SUFFIX) or any(
        path.parent.as_posix().endswith("/" + folder) for folder in STAMP_MEMOS
    )
