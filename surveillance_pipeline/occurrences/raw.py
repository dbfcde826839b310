"""Raw snapshots: ``data/raw/<slug>.json``, the request, one retrieval time, records normalized.

Normalized means keys sorted and records sorted by GBIF key, so the same records give the same bytes
whatever order GBIF served them in. Only ingest writes these files; it is the one step that talks to GBIF.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from surveillance_pipeline.core.errors import InputError, decode_utf8
from surveillance_pipeline.core.keys import canonical_json, sha256_hex
from surveillance_pipeline.core.partition_files import replace_file
from surveillance_pipeline.core.recent import RecentValues

RAW_FORMAT = 1
RECENT_SNAPSHOTS_BYTES = 64 * 2**20


@dataclass(frozen=True)
class RawSnapshot:
    """One raw file's content. Read-only by convention: a parsed one is shared (``parse_raw_snapshot``)."""

    request: dict[str, Any]
    retrieved: str
    source: str
    records: list[dict[str, Any]]

    def to_bytes(self) -> bytes:
        document = {
            "format": RAW_FORMAT,
            "request": self.request,
            "retrieved": self.retrieved,
            "source": self.source,
            "count": len(self.records),
            "records": self.records,
        }
        return (
            json.dumps(document, sort_keys=True, indent=1, ensure_ascii=False, allow_nan=False) + "\n"
        ).encode()


@dataclass(frozen=True)
class NormalizedRecords:
    records: list[dict[str, Any]]
    # sha256 of the records' canonical JSON: what the records are, whatever the file around them says.
    sha256: str


def normalize_records(
    records: Iterable[dict[str, Any]], path: Path | str = "<response>"
) -> NormalizedRecords:
    """Records as plain JSON values sorted by GBIF ``key`` (key order inside is fixed when written).

    One canonical serialization gives both the sha256 and the copies, parsed back from it: the copies
    share nothing with the client's own objects, and hold nothing JSON cannot.
    """
    originals = list(records)
    for index, record in enumerate(originals):
        key = record.get("key") if isinstance(record, dict) else None
        if isinstance(key, bool) or not isinstance(key, int):
            raise InputError(path, f"record {index}", "key", f"expected an integer gbifID, got {key!r}")
    text = canonical_json(sorted(originals, key=lambda record: record["key"]))
    return NormalizedRecords(json.loads(text), sha256_hex(text.encode("utf-8")))


def read_raw_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise InputError(path, "file", None, "raw snapshot is missing: materialize gbif_raw first") from None


def read_raw_snapshot(path: Path) -> RawSnapshot:
    """Read a raw snapshot, naming the file and line when it is not the JSON we wrote."""
    return parse_raw_snapshot(path, read_raw_bytes(path))


# Parsing is most of what a run that changes nothing does with a raw snapshot, and three steps parse the
# same bytes: ingest reads the stored snapshot to compare, derive and geocoded_localities read it as input.
# So a process keeps its recent parses, keyed by the bytes' sha256 and bounded by the files' size (the
# parsed records take about three times that). A snapshot is shared: no caller changes one.
_recent_snapshots: RecentValues[str, RawSnapshot] = RecentValues(RECENT_SNAPSHOTS_BYTES)


def parse_raw_snapshot(path: Path, data: bytes, data_sha256: str | None = None) -> RawSnapshot:
    """A raw snapshot from the bytes read from ``path`` (named in errors); ``data_sha256`` if known."""
    key = data_sha256 or sha256_hex(data)
    snapshot = _recent_snapshots.get(key)
    if snapshot is None:
        snapshot = _parse_raw_snapshot(path, data)
        _recent_snapshots.put(key, snapshot, len(data))
    return snapshot


def _parse_raw_snapshot(path: Path, data: bytes) -> RawSnapshot:
    try:
        document = json.loads(decode_utf8(path, data))
    except json.JSONDecodeError as error:
        raise InputError(
            path, f"line {error.lineno} column {error.colno}", None, f"malformed JSON: {error.msg}"
        ) from None
    except InputError:
        raise  # decode_utf8's own, already naming line and byte (InputError is a ValueError too)
    except ValueError as error:
        # json parses a number of more than 4,300 digits into int, which refuses it with a plain ValueError.
        raise InputError(path, "document", None, f"unreadable JSON: {error}") from None
    if not isinstance(document, dict):
        raise InputError(path, "line 1", None, "expected a JSON object")
    for name, kind in (("request", dict), ("retrieved", str), ("source", str), ("records", list)):
        if not isinstance(document.get(name), kind):
            raise InputError(path, "document", name, f"missing or not a {kind.__name__}")
    return RawSnapshot(document["request"], document["retrieved"], document["source"], document["records"])


def write_atomically(path: Path, data: bytes) -> None:
    """Write beside the target and rename over it, so a reader never sees half a file."""
    replace_file(path, data)


def file_version(data: bytes) -> str:
    return sha256_hex(data)
