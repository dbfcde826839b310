"""Raw snapshots: ``data/raw/<slug>.json``, the request, one retrieval time, records normalized.

Normalized means keys sorted and records sorted by GBIF key, so the same records give the same bytes
whatever order GBIF served them in. Only ingest writes these files; it is the one step that talks to GBIF.

Two layouts share the path. A search answer (at most 100,000 records, occurrence search's limit) keeps its
records inside the JSON (``format`` 1). A species read from GBIF downloads can hold millions, so its JSON
is only a header (``format`` 2) naming a records file beside it, ``<slug>.records.tsv.gz`` (see
``gbif.records``), and that file's sha256: the header's own sha256 then changes with every record, and
readers stream the records instead of parsing them whole.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from surveillance_pipeline.core.errors import InputError, decode_utf8
from surveillance_pipeline.core.keys import canonical_json, sha256_hex
from surveillance_pipeline.core.recent import RecentValues
from surveillance_pipeline.gbif.records import RECORD_COLUMNS, iter_records

RAW_FORMAT = 1
# A header whose records live in a records file beside it.
RAW_HEADER_FORMAT = 2
RECORDS_SUFFIX = ".records.tsv.gz"
RECENT_SNAPSHOTS_BYTES = 64 * 2**20


@dataclass(frozen=True)
class RawSnapshot:
    """One raw file's content. Read-only by convention: a parsed one is shared (``parse_raw_snapshot``)."""

    request: dict[str, Any]
    retrieved: str
    source: str
    records: list[dict[str, Any]]
    # Format 2 only: the records file's name (beside the header), its sha256 and its record count.
    records_file: str | None = None
    records_sha256: str | None = None
    count: int | None = None

    def iter_records(self, header_path: Path) -> Iterator[dict[str, Any]]:
        """The records in key order: from the JSON, or streamed from the records file (checked against
        the sha256 the header recorded once it has been read to the end)."""
        if self.records_file is None:
            return iter(self.records)
        return iter_records(header_path.with_name(self.records_file), self.records_sha256)

    def to_bytes(self) -> bytes:
        if self.records_file is not None:
            header = {
                "format": RAW_HEADER_FORMAT,
                "request": self.request,
                "retrieved": self.retrieved,
                "source": self.source,
                "count": self.count,
                "columns": list(RECORD_COLUMNS),
                "records_file": self.records_file,
                "records_sha256": self.records_sha256,
            }
            return (json.dumps(header, sort_keys=True, indent=1, ensure_ascii=False) + "\n").encode()
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
    # The records' canonical JSON: what the records are, whatever the file around them says.
    text: str
    # Its sha256.
    sha256: str
    count: int

    @cached_property
    def records(self) -> list[dict[str, Any]]:
        """The records parsed back from ``text``: copies sharing nothing with the client's own objects,
        holding nothing JSON cannot. Parsed only when asked: an unchanged answer needs only the sha256."""
        parsed: list[dict[str, Any]] = json.loads(self.text)
        return parsed


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
    return NormalizedRecords(text, sha256_hex(text.encode("utf-8")), len(originals))


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
    if document.get("format") == RAW_HEADER_FORMAT:
        return _parse_header(path, document)
    for name, kind in (("request", dict), ("retrieved", str), ("source", str), ("records", list)):
        if not isinstance(document.get(name), kind):
            raise InputError(path, "document", name, f"missing or not a {kind.__name__}")
    return RawSnapshot(document["request"], document["retrieved"], document["source"], document["records"])


def _parse_header(path: Path, document: dict[str, Any]) -> RawSnapshot:
    for name, kind in (
        ("request", dict),
        ("retrieved", str),
        ("source", str),
        ("records_file", str),
        ("records_sha256", str),
        ("count", int),
        ("columns", list),
    ):
        if not isinstance(document.get(name), kind):
            raise InputError(path, "document", name, f"missing or not a {kind.__name__}")
    if document["columns"] != list(RECORD_COLUMNS):
        raise InputError(
            path, "document", "columns", "not the columns this code writes: materialize gbif_raw"
        )
    records_file = document["records_file"]
    if "/" in records_file or records_file.startswith("."):
        raise InputError(path, "document", "records_file", f"{records_file!r} is not a file beside it")
    return RawSnapshot(
        document["request"],
        document["retrieved"],
        document["source"],
        [],
        records_file=records_file,
        records_sha256=document["records_sha256"],
        count=document["count"],
    )


def records_path(header_path: Path) -> Path:
    """Where a format-2 snapshot's records file lives: ``<slug>.records.tsv.gz`` beside ``<slug>.json``."""
    return header_path.with_name(header_path.stem + RECORDS_SUFFIX)
