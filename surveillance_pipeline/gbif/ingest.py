"""Ingest: the one step that talks to GBIF (or reads the downloads a user got from it).

Fetch a species, normalize, and keep the old file if equal.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from surveillance_pipeline.core.errors import InputError
from surveillance_pipeline.core.keys import sha256_hex
from surveillance_pipeline.gbif.client import GbifClient, fetch_all_occurrences
from surveillance_pipeline.gbif.downloads import (
    DOWNLOAD_SOURCE,
    GbifDownload,
    download_request,
    species_records,
)
from surveillance_pipeline.gbif.registry import Species
from surveillance_pipeline.occurrences.raw import (
    RawSnapshot,
    normalize_records,
    parse_raw_snapshot,
    write_atomically,
)


@dataclass(frozen=True)
class IngestOutcome:
    request: dict[str, Any]
    source: str
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
    records = fetch_all_occurrences(client, request["params"])
    # The lab's data has a fixed retrieval time, so a fresh data folder gets the same raw bytes.
    stamp = retrieved or client.snapshot_retrieved
    return write_raw_snapshot(request, client.source, records, raw_path, stamp)


def ingest_species_from_downloads(
    downloads: Iterable[GbifDownload], species: Species, raw_path: Path, retrieved: str | None = None
) -> IngestOutcome:
    """The species' records from the GBIF downloads at hand, written like a search's raw snapshot.

    The request names the downloads that held the species (key, DOI, query, sha256), so a new download
    with records of this species changes the request and reaches derive; one without them does not.
    """
    records, sources = species_records(downloads, species)
    # When GBIF made the newest download read: the same downloads give the same bytes in a fresh folder.
    stamp = retrieved or max((created for d in sources if (created := d.created())), default=None)
    return write_raw_snapshot(download_request(species, sources), DOWNLOAD_SOURCE, records, raw_path, stamp)


def write_raw_snapshot(
    request: dict[str, Any],
    source: str,
    records: list[dict[str, Any]],
    raw_path: Path,
    retrieved: str | None = None,
) -> IngestOutcome:
    """Normalize and write the snapshot, or keep the stored file when request and records are equal."""
    normalized = normalize_records(records, f"GBIF {source}")
    records, records_sha256 = normalized.records, normalized.sha256
    previous, previous_sha256 = _previous_snapshot(raw_path) or (None, "")
    if previous is not None and previous.request == request and previous.records == records:
        return IngestOutcome(
            request,
            source,
            False,
            "nothing changed",
            raw_path,
            previous_sha256,
            len(records),
            records_sha256,
            previous.retrieved,
        )

    snapshot = RawSnapshot(request, retrieved or utc_now_text(), source, records)
    data = snapshot.to_bytes()
    write_atomically(raw_path, data)
    if previous is None:
        reason = "first load"
    elif previous.request != request:
        reason = "request changed"
    else:
        reason = "records changed"
    return IngestOutcome(
        request,
        source,
        True,
        reason,
        raw_path,
        sha256_hex(data),
        len(records),
        records_sha256,
        snapshot.retrieved,
    )


def _previous_snapshot(raw_path: Path) -> tuple[RawSnapshot, str] | None:
    """The stored snapshot and its file's sha256, from one read of the file; None when there is none or
    it cannot be read (it is then replaced)."""
    try:
        data = raw_path.read_bytes()
    except FileNotFoundError:
        return None
    data_sha256 = sha256_hex(data)
    try:
        return parse_raw_snapshot(raw_path, data, data_sha256), data_sha256
    except InputError:
        return None
