"""Ingest: the one step that talks to GBIF (or reads the downloads a user got from it).

Fetch a species, normalize, and keep the old file if equal.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from surveillance_pipeline.core.errors import InputError
from surveillance_pipeline.core.keys import sha256_file_once, sha256_hex
from surveillance_pipeline.core.partition_files import delete_stale_staging_file, replace_file
from surveillance_pipeline.core.refresh import LOADED, SKIPPED, RefreshOutcome, record_provenance
from surveillance_pipeline.gbif.client import DOWNLOAD_SOURCE, GbifClient, fetch_all_occurrences
from surveillance_pipeline.gbif.download_index import DownloadIndex, SpeciesPart, merged_species_lines
from surveillance_pipeline.gbif.downloads import DownloadInfo
from surveillance_pipeline.gbif.raw_snapshots import (
    RawSnapshot,
    normalize_records,
    parse_raw_snapshot,
    records_path,
)
from surveillance_pipeline.gbif.records import RecordsWriter, copy_records
from surveillance_pipeline.gbif.registry import DOWNLOAD_ENDPOINT, Species

# A download whose zip says nothing of when it was made (no key, no metadata, no member times): a fixed
# time, never the clock, so the same downloads give the same raw bytes.
UNKNOWN_TIME = "1970-01-01T00:00:00Z"


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


def download_request(species: Species, sources: Sequence[tuple[DownloadInfo, SpeciesPart]]) -> dict[str, Any]:
    """The raw snapshot's request for a species read from downloads: which downloads (and which of
    their records: count and sha256 of the species' part), which taxon, which area."""
    return {
        "area": {"country": species.country, "stateProvince": species.state_province},
        "downloads": [
            {**info.identity(), "records": part.records, "records_sha256": part.sha256}
            for info, part in sources
        ],
        "endpoint": DOWNLOAD_ENDPOINT,
        "taxon": species.taxon_filter(),
    }


def species_sources(
    indexes: Sequence[DownloadIndex], species: Species
) -> list[tuple[DownloadInfo, SpeciesPart]]:
    """The downloads holding records of the species, oldest first."""
    ordered = sorted(indexes, key=lambda index: index.info.recency())
    return [
        (index.info, part)
        for index in ordered
        if (part := index.part(species.slug)) is not None and part.records > 0
    ]


def ingest_species_from_downloads(
    indexes: Sequence[DownloadIndex], species: Species, raw_path: Path
) -> IngestOutcome | None:
    """The species' records from the downloads at hand, as a header and a records file; None when no
    download holds the species (it is then the search client's, never emptied).

    The request names each source download's part of this species (count and sha256), and the records
    are a pure function of those parts: an equal request with its records file intact is a skip, decided
    without reading a record.
    """
    sources = species_sources(indexes, species)
    if not sources:
        return None
    request = download_request(species, sources)
    records_file = records_path(raw_path)
    previous, previous_sha256 = _previous_snapshot(raw_path) or (None, "")
    if (
        previous is not None
        and previous.request == request
        and previous.records_file == records_file.name
        and records_file.is_file()
        and sha256_file_once(records_file) == previous.records_sha256
    ):
        return IngestOutcome(
            request,
            DOWNLOAD_SOURCE,
            False,
            "nothing changed",
            raw_path,
            previous_sha256,
            previous.count or 0,
            previous.records_sha256 or "",
            previous.retrieved,
        )
    if len(sources) == 1:
        # One download: its part already is this file, byte for byte.
        part = sources[0][1]
        records_sha256, rows = copy_records(part.path, records_file, part.sha256), part.records
    else:
        with RecordsWriter(records_file) as writer:
            writer.write_lines(merged_species_lines(sources))
            rows = writer.rows
            records_sha256 = writer.commit()
    # When GBIF made the newest download read: the same downloads give the same bytes in a fresh folder.
    retrieved = max((info.created for info, _ in sources if info.created), default=UNKNOWN_TIME)
    snapshot = RawSnapshot(
        request,
        retrieved,
        DOWNLOAD_SOURCE,
        [],
        records_file=records_file.name,
        records_sha256=records_sha256,
        count=rows,
    )
    data = snapshot.to_bytes()
    replace_file(raw_path, data)
    return IngestOutcome(
        request,
        DOWNLOAD_SOURCE,
        True,
        _reason(previous, request),
        raw_path,
        sha256_hex(data),
        rows,
        records_sha256,
        retrieved,
    )


def _reason(previous: RawSnapshot | None, request: dict[str, Any]) -> str:
    if previous is None:
        return "first load"
    if previous.request != request:
        return "request changed"
    return "records changed"


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
    if (
        previous is not None
        and previous.records_file is None
        and previous.request == request
        and previous.records == records
    ):
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
    replace_file(raw_path, data)
    # A species that was read from downloads before: its records file is no longer named by anything.
    records_path(raw_path).unlink(missing_ok=True)
    return IngestOutcome(
        request,
        source,
        True,
        _reason(previous, request),
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


# The asset whose provenance rows name each ingest.
RAW_ASSET = "gbif_raw"


def refresh_raw_snapshot(
    conn: psycopg.Connection,
    *,
    species: Species,
    raw_path: Path,
    indexes: Sequence[DownloadIndex],
    search_client: Callable[[], GbifClient],
    run_id: str,
) -> tuple[RefreshOutcome, IngestOutcome]:
    """Ingest one species from the downloads' indexes, else from occurrence search; record provenance.

    ``search_client`` is called only when the downloads do not hold the species, so a run whose species
    all come from downloads never builds one. The data version is the raw file's sha256.
    """
    delete_stale_staging_file(raw_path)
    delete_stale_staging_file(records_path(raw_path))
    ingested = ingest_species_from_downloads(indexes, species, raw_path)
    if ingested is None:
        ingested = ingest_species(search_client(), species, raw_path)
    parts = {"request": ingested.request, "source": ingested.source, "records": ingested.records_sha256}
    action = LOADED if ingested.written else SKIPPED
    outcome = RefreshOutcome(action, ingested.reason, ingested.file_sha256, parts, ingested.records)
    record_provenance(conn, run_id=run_id, asset=RAW_ASSET, partition_key=species.slug, outcome=outcome)
    return outcome, ingested
