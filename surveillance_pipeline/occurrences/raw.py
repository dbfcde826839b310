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
from surveillance_pipeline.core.keys import sha256_hex
from surveillance_pipeline.core.partition_files import replace_file

RAW_FORMAT = 1


@dataclass(frozen=True)
class RawSnapshot:
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


def normalize_records(
    records: Iterable[dict[str, Any]], path: Path | str = "<response>"
) -> list[dict[str, Any]]:
    """Records as plain JSON values sorted by GBIF ``key`` (key order inside is fixed when written)."""
    copies = json.loads(json.dumps(list(records)))
    for index, record in enumerate(copies):
        key = record.get("key") if isinstance(record, dict) else None
        if isinstance(key, bool) or not isinstance(key, int):
            raise InputError(path, f"record {index}", "key", f"expected an integer gbifID, got {key!r}")
    return sorted(copies, key=lambda record: record["key"])


def read_raw_snapshot(path: Path) -> RawSnapshot:
    """Read a raw snapshot, naming the file and line when it is not the JSON we wrote."""
    try:
        document = json.loads(decode_utf8(path, path.read_bytes()))
    except FileNotFoundError:
        raise InputError(path, "file", None, "raw snapshot is missing: materialize gbif_raw first") from None
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
