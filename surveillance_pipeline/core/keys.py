"""Job keys: the identity of what a target holds.

A job key is sha256 over canonical JSON of ``{input, transform, config, schema}``. Two runs with equal
keys produce the same rows, so the second may skip; any other key means reload, including a return to an
earlier input (which a checksum ledger would wrongly skip).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

# Order in which changed parts are named in a reason ("transform and config changed").
PART_NAMES = ("input", "transform", "config", "schema")


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no spaces: one text per value, on every machine and Python."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def modules_source_sha256(*modules: ModuleType) -> str:
    """The sha256 of these modules' source files, in order: a version of what their code does that no one
    has to remember to bump (a comment's edit is a new version too, which costs one full compare). Call
    at import, so that it names the code this process runs, not a file edited on disk since."""
    digest = hashlib.sha256()
    for module in modules:
        if module.__file__ is None:
            raise RuntimeError(f"module {module.__name__} has no source file to version")
        digest.update(Path(module.__file__).read_bytes())
    return digest.hexdigest()


def sha256_file(path: Path, chunk_size: int = 1 << 20) -> str:
    """sha256 of a file's bytes, read in blocks so a large snapshot never sits in memory whole."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(chunk_size):
            digest.update(block)
    return digest.hexdigest()


# sha256 of files this process has hashed, by what identifies their bytes on disk. A run over many
# partitions asks for the sha256 of one large file several times (gbif_raw's skip, gbif_derived's and
# occurrences' checks of the same records and derived files); the bytes are read once per process. The
# identity holds the change time (ctime), which any write moves and no tool sets back: an edit of the same
# size with its mtime set back is hashed again (core.partition_files explains the stamps).
_hashed_files: dict[tuple[str, int, int, int, int, int], str] = {}
HASHED_FILES_KEPT = 4096


def forget_hashed_files() -> None:
    """Forget every sha256 this process remembered: the next ask hashes the bytes, as a new process would."""
    _hashed_files.clear()


def file_identity(path: Path) -> tuple[str, int, int, int, int, int]:
    """The file's resolved path, device, inode, size, mtime and ctime (nanoseconds)."""
    found = path.stat()
    return (
        str(path.resolve()),
        found.st_dev,
        found.st_ino,
        found.st_size,
        found.st_mtime_ns,
        found.st_ctime_ns,
    )


def sha256_file_once(path: Path) -> str:
    """``sha256_file``, remembered in this process while the file's identity (``file_identity``) stays
    the same: any write or replacement changes it, so an edited file is hashed again."""
    identity = file_identity(path)
    digest = _hashed_files.get(identity)
    if digest is None:
        digest = sha256_file(path)
        remember_file_sha256(identity, digest)
    return digest


def remember_file_sha256(identity: tuple[str, int, int, int, int, int], digest: str) -> None:
    """Let ``sha256_file_once`` answer ``digest`` for the file with this identity, unread: for a sha256
    known otherwise (a stamp that vouches for the bytes, core.partition_files.sha256_file_stamped)."""
    if len(_hashed_files) >= HASHED_FILES_KEPT:
        _hashed_files.clear()
    _hashed_files[identity] = digest


@dataclass(frozen=True)
class JobKeyParts:
    """What shapes a target's rows. Connection settings never belong here."""

    input: str
    transform: int
    config: Mapping[str, Any]
    schema: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "input": self.input,
            "transform": self.transform,
            "config": dict(self.config),
            "schema": self.schema,
        }

    @property
    def key(self) -> str:
        return sha256_hex(canonical_json(self.as_dict()).encode("utf-8"))


def changed_parts(previous: Mapping[str, Any] | None, current: JobKeyParts) -> list[str]:
    """Names of the parts that differ from the recorded ones, in PART_NAMES order."""
    if previous is None:
        return list(PART_NAMES)
    now = current.as_dict()
    # Compare canonical forms so {"a":1,"b":2} and {"b":2,"a":1} count as the same config.
    return [name for name in PART_NAMES if canonical_json(previous.get(name)) != canonical_json(now[name])]


def describe_change(previous: Mapping[str, Any] | None, current: JobKeyParts) -> str:
    """The human reason for a reload: 'first load', 'input changed', 'transform and config changed'."""
    if previous is None:
        return "first load"
    names = changed_parts(previous, current)
    if not names:
        # Same parts but a different key can only mean the key recipe itself changed.
        return "key recipe changed"
    if len(names) == 1:
        joined = names[0]
    else:
        joined = ", ".join(names[:-1]) + " and " + names[-1]
    return f"{joined} changed{_changed_sections(previous.get('config'), current.config)}"


def _changed_sections(previous: Any, current: Any) -> str:
    """Which sections of a config made of sections changed (the quality tests' config is one section per
    test): ' (sections a, b)'; '' for a flat config or the same sections' values."""
    if not isinstance(previous, Mapping) or not isinstance(current, Mapping):
        return ""
    if not all(isinstance(value, Mapping) for value in (*previous.values(), *current.values())):
        return ""
    changed = sorted(
        name
        for name in set(previous) | set(current)
        if canonical_json(previous.get(name)) != canonical_json(current.get(name))
    )
    return f" ({', '.join(changed)})" if changed else ""


def advisory_lock_id(*names: str) -> int:
    """A signed 64-bit id for pg_advisory_xact_lock, stable across processes (never Python's hash())."""
    digest = hashlib.sha256("|".join(names).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)
