"""Ingest: the one step that talks to GBIF. Fetch a species, normalize, and keep the old file if equal."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from surveillance_pipeline.core.errors import InputError
from surveillance_pipeline.core.keys import canonical_json, sha256_hex
from surveillance_pipeline.gbif.client import GbifClient, fetch_all_occurrences
from surveillance_pipeline.gbif.registry import Species
from surveillance_pipeline.occurrences.raw import (
    RawSnapshot,
    normalize_records,
    read_raw_snapshot,
    write_atomically,
)


@dataclass(frozen=True)
class IngestOutcome:
    written: bool
    reason: str
    path: Path
    file_sha256: str
    records: int
    records_sha256: str
    retrieved: str


def utc_now_text() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def ingest_species(
    client: GbifClient, species: Species, raw_path: Path, retrieved: str | None = None
) -> IngestOutcome:
    """Fetch one species and write its raw snapshot, unless the stored one has the same request and records.

    Keeping the old file keeps its ``retrieved`` time and so its sha256: an unchanged GBIF answer changes
    nothing downstream.
    """
    request = species.request()
    records = normalize_records(fetch_all_occurrences(client, request["params"]), f"GBIF {client.source}")
    records_sha256 = sha256_hex(canonical_json(records).encode("utf-8"))
    previous = _previous_snapshot(raw_path)
    if previous is not None and previous.request == request and previous.records == records:
        data = raw_path.read_bytes()
        return IngestOutcome(
            False,
            "nothing changed",
            raw_path,
            sha256_hex(data),
            len(records),
            records_sha256,
            previous.retrieved,
        )

    stamp = retrieved or getattr(client, "snapshot_retrieved", None) or utc_now_text()
    snapshot = RawSnapshot(request, stamp, client.source, records)
    data = snapshot.to_bytes()
    write_atomically(raw_path, data)
    if previous is None:
        reason = "first load"
    elif previous.request != request:
        reason = "request changed"
    else:
        reason = "records changed"
    return IngestOutcome(
        True, reason, raw_path, sha256_hex(data), len(records), records_sha256, snapshot.retrieved
    )


def _previous_snapshot(raw_path: Path) -> RawSnapshot | None:
    """The stored snapshot, or None when there is none or it cannot be read (it is then replaced)."""
    if not raw_path.exists():
        return None
    try:
        return read_raw_snapshot(raw_path)
    except InputError:
        return None
