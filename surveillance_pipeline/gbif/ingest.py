"""Ingest: the one step that talks to GBIF (or reads the downloads a user got from it).

Fetch a species, normalize, and keep the old file if equal.
"""

from __future__ import annotations

import heapq
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from surveillance_pipeline.core import keys as keys_module
from surveillance_pipeline.core.errors import InputError
from surveillance_pipeline.core.keys import canonical_json, modules_source_sha256, sha256_hex
from surveillance_pipeline.core.partition_files import (
    delete_stale_staging_file,
    keep_file_stamps,
    read_memo,
    replace_file,
    sha256_file_stamped,
)
from surveillance_pipeline.core.refresh import LOADED, SKIPPED, RefreshOutcome, record_provenance
from surveillance_pipeline.gbif import client as client_module
from surveillance_pipeline.gbif import raw_snapshots as raw_snapshots_module
from surveillance_pipeline.gbif.client import DOWNLOAD_SOURCE, GbifClient, fetch_all_occurrences
from surveillance_pipeline.gbif.download_index import (
    DownloadIndex,
    SpeciesPart,
    keys_missing_from,
    merged_species_lines,
)
from surveillance_pipeline.gbif.download_query import query_asks_for
from surveillance_pipeline.gbif.downloads import DownloadInfo
from surveillance_pipeline.gbif.raw_snapshots import (
    RawSnapshot,
    normalize_records,
    parse_raw_snapshot,
    records_path,
)
from surveillance_pipeline.gbif.records import RecordsWriter, copy_records, iter_record_lines, record_key
from surveillance_pipeline.gbif.registry import DOWNLOAD_ENDPOINT, Species

# The code that turns a search answer into a stored snapshot (paging, normalizing, the file's layout, the
# canonical JSON), hashed at import: a source's answer version vouches for a stored file only together
# with it, so a change to how answers are stored is fetched and compared again.
STORING_CODE_SHA256 = modules_source_sha256(
    sys.modules[__name__], raw_snapshots_module, client_module, keys_module
)

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
    # Records of downloads a newer one of their query superseded that no current download holds.
    records_gone: int | None = None


def utc_now_text() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def ingest_species(
    client: GbifClient,
    species: Species,
    raw_path: Path,
    retrieved: str | None = None,
    summary: Path | None = None,
    trust_answer_versions: bool = True,
) -> IngestOutcome:
    """Fetch one species and write its raw snapshot, unless the stored one has the same request and records.

    Keeping the old file keeps its ``retrieved`` time and so its sha256: an unchanged GBIF answer changes
    nothing downstream. ``summary``: the memo of the stored file's summary (write_raw_snapshot). A source
    that versions its answers (the lab) is not asked again for an answer whose version the memo holds,
    stored by this code; unless ``trust_answer_versions`` is False (make repair), which always fetches.
    """
    request = species.request()
    answer_version = _stored_answer_version(client.answer_version(request["params"]))
    if answer_version is not None and summary is not None and trust_answer_versions:
        held = _held_answer(request, client.source, raw_path, summary, answer_version)
        if held is not None:
            return held
    records = fetch_all_occurrences(client, request["params"])
    # The lab's data has a fixed retrieval time, so a fresh data folder gets the same raw bytes.
    stamp = retrieved or client.snapshot_retrieved
    return write_raw_snapshot(request, client.source, records, raw_path, stamp, summary, answer_version)


def _stored_answer_version(answer_version: str | None) -> str | None:
    """The source's version of an answer, stored by this code (STORING_CODE_SHA256); None: no version."""
    if answer_version is None:
        return None
    return sha256_hex(canonical_json([answer_version, STORING_CODE_SHA256]).encode("utf-8"))


def _held_answer(
    request: dict[str, Any], source: str, raw_path: Path, summary: Path, answer_version: str
) -> IngestOutcome | None:
    """The stored snapshot, unchanged, when its summary says it holds the answer of this version to this
    request (and the file still has the bytes summarized); None: fetch and compare."""
    try:
        data = raw_path.read_bytes()
    except FileNotFoundError:
        return None
    data_sha256 = sha256_hex(data)
    kept = _SnapshotSummary.read(summary, data_sha256)
    if kept is None or kept.request != request or kept.answer_version != answer_version:
        return None
    return _unchanged(request, source, raw_path, data_sha256, kept.count, kept.records_sha256, kept.retrieved)


@dataclass(frozen=True)
class Superseded:
    """A download's part of a species left out because a newer download of the same query is at hand."""

    info: DownloadInfo
    part: SpeciesPart
    by: DownloadInfo


@dataclass(frozen=True)
class SpeciesSources:
    """The downloads a species' records come from (oldest first), those that asked for it and hold none
    of its records, and the parts newer downloads of their query supersede."""

    current: list[tuple[DownloadInfo, SpeciesPart]]
    superseded: list[Superseded]
    # Downloads (not superseded) whose query asked for the species (download_query.query_asks_for) and
    # that hold none of its records: GBIF's answer that it has none.
    empty_answers: list[DownloadInfo] = field(default_factory=list)

    def held(self) -> bool:
        """Whether the downloads decide the species' raw snapshot (else the search does): a download at
        hand holds its records or asked for it. A superseded part alone does not: a folder holding the
        newer download alone would search the species, so the refresh does too."""
        return bool(self.current or self.empty_answers)

    def read(self) -> list[tuple[DownloadInfo, SpeciesPart | None]]:
        """Every download that answers for the species, oldest first; None: it holds none of its records."""
        answers: list[tuple[DownloadInfo, SpeciesPart | None]] = [*self.current]
        answers += [(info, None) for info in self.empty_answers]
        return sorted(answers, key=lambda answer: answer[0].recency())


def download_request(species: Species, sources: SpeciesSources) -> dict[str, Any]:
    """The raw snapshot's request for a species read from downloads: which downloads (and which of
    their records: count and sha256 of the species' part; 0 and null for a download that asked for the
    species and holds none), which taxon, which area.

    A download a newer one of its query superseded is not read, so it is not named: the request (and the
    raw snapshot, and every key after it) is the one a folder holding the newer download alone gives, and
    it changes when a refreshed download arrives because the newer download is named instead."""
    return {
        "area": {"country": species.country, "stateProvince": species.state_province},
        "downloads": [
            {
                **info.identity(),
                "records": part.records if part is not None else 0,
                "records_sha256": part.sha256 if part is not None else None,
            }
            for info, part in sources.read()
        ],
        "endpoint": DOWNLOAD_ENDPOINT,
        "taxon": species.taxon_filter(),
    }


def species_sources(indexes: Sequence[DownloadIndex], species: Species) -> SpeciesSources:
    """The downloads holding records of the species, oldest first, those that asked for it and hold
    none, and the parts superseded.

    Of several downloads of one query (the query GBIF wrote into the download's metadata, byte for byte),
    only the newest is read: GBIF removes records (withdrawn, merged into another, moved to another taxon),
    and a record the newer download lacks is gone from GBIF. Downloads of different queries, or whose
    query is not known (a simple CSV names none), add up: a record in two is taken from the newer.
    A download whose query asked for the species by its backbone key and area holds all GBIF has of it:
    none is an answer (the species ends empty), where a download that did not ask leaves it to the search.
    """
    ordered = sorted(indexes, key=lambda index: index.info.recency())
    newest_of_query = {index.info.query: index.info for index in ordered if index.info.query is not None}
    current: list[tuple[DownloadInfo, SpeciesPart]] = []
    superseded: list[Superseded] = []
    empty_answers: list[DownloadInfo] = []
    for index in ordered:
        newest = newest_of_query.get(index.info.query) if index.info.query is not None else None
        part = index.part(species.slug)
        if part is None or part.records == 0:
            if newest is index.info and query_asks_for(index.info.query, species):
                empty_answers.append(index.info)
        elif newest is not None and newest is not index.info:
            superseded.append(Superseded(index.info, part, newest))
        else:
            current.append((index.info, part))
    return SpeciesSources(current, superseded, empty_answers)


def downloads_retrieved(sources: SpeciesSources) -> str:
    """When GBIF made the newest download that answers for the species: the same downloads give the same
    bytes in a fresh folder. A skip compares it as it compares the request: a snapshot whose time came
    from a download that does not answer for the species (as one was once written) is written again."""
    return max((info.created for info, _ in sources.read() if info.created), default=UNKNOWN_TIME)


def records_gone(sources: SpeciesSources) -> int:
    """How many records of the superseded parts no current download holds: a walk over their keys, each
    part sorted by gbifID as its index wrote it (read only when the species loads; memory flat).

    The common case, one older download of the query and the newer one, walks the two in blocks of ids
    (keys_missing_from); several parts on a side merge their lines."""
    if len(sources.superseded) == 1 and len(sources.current) <= 1:
        newer = sources.current[0][1] if sources.current else None
        return keys_missing_from(sources.superseded[0].part, newer)

    def keys(parts: Sequence[SpeciesPart]) -> Iterator[int]:
        streams = [(record_key(line) for line in iter_record_lines(p.path, p.sha256)) for p in parts]
        previous = None
        for key in heapq.merge(*streams):
            if key != previous:
                yield key
                previous = key

    held = keys([part for _, part in sources.current])
    next_held = next(held, None)
    gone = 0
    for key in keys([old.part for old in sources.superseded]):
        while next_held is not None and next_held < key:
            next_held = next(held, None)
        if next_held != key:
            gone += 1
    return gone


def ingest_species_from_downloads(
    indexes: Sequence[DownloadIndex], species: Species, raw_path: Path, stamps: Path | None = None
) -> IngestOutcome | None:
    """The species' records from the downloads at hand, as a header and a records file; None when no
    download holds the species nor asked for it (it is then the search client's, as in a folder without
    those downloads). A download that asked for the species and holds none of it answers: an empty file.

    The request names each source download's part of this species (count and sha256), and the records
    are a pure function of those parts: an equal request with its records file intact is a skip, decided
    without reading a record. ``stamps``: a memo of the records file's stamp and sha256, so that a file
    unchanged since it was last hashed is not read again (``sha256_file_stamped``); None: hashed.
    """
    found = species_sources(indexes, species)
    if not found.held():
        return None
    sources = found.current
    request = download_request(species, found)
    retrieved = downloads_retrieved(found)
    records_file = records_path(raw_path)
    previous, previous_sha256 = _previous_snapshot(raw_path) or (None, "")
    if (
        previous is not None
        and previous.request == request
        and previous.retrieved == retrieved
        and previous.records_file == records_file.name
        and records_file.is_file()
        and sha256_file_stamped(records_file, stamps) == previous.records_sha256
    ):
        return _unchanged(
            request,
            DOWNLOAD_SOURCE,
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
        # Several, or none: the downloads that asked for the species hold none of it (an empty file).
        with RecordsWriter(records_file) as writer:
            writer.write_lines(merged_species_lines(sources))
            rows = writer.rows
            records_sha256 = writer.commit()
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
    if stamps is not None:
        keep_file_stamps(stamps, {records_file: records_sha256})
    reason = downloads_reason(previous, request, found)
    # The count goes to the partition's metadata: in the reason it would make every species' reason its
    # own line of make run's table.
    gone = records_gone(found) if found.superseded else None
    return IngestOutcome(
        request,
        DOWNLOAD_SOURCE,
        True,
        reason,
        raw_path,
        sha256_hex(data),
        rows,
        records_sha256,
        retrieved,
        gone,
    )


def _reason(previous: RawSnapshot | None, request: dict[str, Any]) -> str:
    if previous is None:
        return "first load"
    if previous.request != request:
        return "request changed"
    return "records changed"


def downloads_reason(previous: RawSnapshot | None, request: dict[str, Any], found: SpeciesSources) -> str:
    """Why a species read from downloads loads: 'request changed; newer download K of the same query'."""
    reason = _reason(previous, request)
    if found.superseded:
        newer = ", ".join(sorted({old.by.key for old in found.superseded}))
        reason += f"; newer download {newer} of the same query"
    return reason


def stored_snapshot(raw_path: Path) -> RawSnapshot | None:
    """The raw snapshot stored at ``raw_path``; None when there is none or it cannot be read."""
    found = _previous_snapshot(raw_path)
    return found[0] if found is not None else None


def write_raw_snapshot(
    request: dict[str, Any],
    source: str,
    records: list[dict[str, Any]],
    raw_path: Path,
    retrieved: str | None = None,
    summary: Path | None = None,
    answer_version: str | None = None,
) -> IngestOutcome:
    """Normalize and write the snapshot, or keep the stored file when request and records are equal.

    ``summary``: a memo of the stored file's request and records' sha256 under the sha256 of its bytes
    (_SnapshotSummary), so that an unchanged answer is told from the stored file without parsing it
    (parsing was a third of a lab run's gbif_raw). A memo for other bytes is ignored and written again.
    ``answer_version``: the source's version of these records (GbifClient.answer_version), kept in the memo
    so that the next ingest of the same version need not fetch them.
    """
    normalized = normalize_records(records, f"GBIF {source}")
    try:
        data: bytes | None = raw_path.read_bytes()
    except FileNotFoundError:
        data = None
    data_sha256 = sha256_hex(data) if data is not None else ""
    kept = _SnapshotSummary.read(summary, data_sha256) if summary is not None and data is not None else None
    if kept is not None and kept.request == request and kept.records_sha256 == normalized.sha256:
        if summary is not None and kept.answer_version != answer_version:
            replace(kept, answer_version=answer_version).write(summary)
        return _unchanged(
            request, source, raw_path, data_sha256, normalized.count, normalized.sha256, kept.retrieved
        )
    previous = _parsed_or_none(raw_path, data, data_sha256) if data is not None else None
    if (
        previous is not None
        and previous.records_file is None
        and previous.request == request
        and previous.records == normalized.records
    ):
        if summary is not None:
            _SnapshotSummary(
                data_sha256, request, normalized.sha256, normalized.count, previous.retrieved, answer_version
            ).write(summary)
        return _unchanged(
            request, source, raw_path, data_sha256, normalized.count, normalized.sha256, previous.retrieved
        )

    snapshot = RawSnapshot(request, retrieved or utc_now_text(), source, normalized.records)
    data = snapshot.to_bytes()
    replace_file(raw_path, data)
    # A species that was read from downloads before: its records file is no longer named by anything.
    records_path(raw_path).unlink(missing_ok=True)
    written_sha256 = sha256_hex(data)
    if summary is not None:
        _SnapshotSummary(
            written_sha256, request, normalized.sha256, normalized.count, snapshot.retrieved, answer_version
        ).write(summary)
    return IngestOutcome(
        request,
        source,
        True,
        _reason(previous, request),
        raw_path,
        written_sha256,
        normalized.count,
        normalized.sha256,
        snapshot.retrieved,
    )


def _unchanged(
    request: dict[str, Any],
    source: str,
    raw_path: Path,
    file_sha256: str,
    records: int,
    records_sha256: str,
    retrieved: str,
) -> IngestOutcome:
    """The outcome of an ingest that kept the stored file as it was."""
    return IngestOutcome(
        request, source, False, "nothing changed", raw_path, file_sha256, records, records_sha256, retrieved
    )


def _previous_snapshot(raw_path: Path) -> tuple[RawSnapshot, str] | None:
    """The stored snapshot and its file's sha256, from one read of the file; None when there is none or
    it cannot be read (it is then replaced)."""
    try:
        data = raw_path.read_bytes()
    except FileNotFoundError:
        return None
    data_sha256 = sha256_hex(data)
    previous = _parsed_or_none(raw_path, data, data_sha256)
    return (previous, data_sha256) if previous is not None else None


def _parsed_or_none(raw_path: Path, data: bytes, data_sha256: str) -> RawSnapshot | None:
    """The stored snapshot; None when it cannot be read (it is then replaced)."""
    try:
        return parse_raw_snapshot(raw_path, data, data_sha256)
    except InputError:
        return None


# The memo's layout; another version is ignored (and written again). 2: the records' count and the
# source's answer version.
SUMMARY_VERSION = 2


@dataclass(frozen=True)
class _SnapshotSummary:
    """What ingest compares of a stored inline snapshot (its request and its records' sha256 and count)
    and the retrieval time it keeps, under the sha256 of the file's bytes; with the source's version of
    the answer those records were (None: the source gives none). A function of those bytes alone, as the
    parses a process keeps in memory are (raw_snapshots._recent_snapshots): a file changed by any means
    has another sha256, and the memo is then not used."""

    file_sha256: str
    request: dict[str, Any]
    records_sha256: str
    count: int
    retrieved: str
    answer_version: str | None

    @classmethod
    def read(cls, path: Path, file_sha256: str) -> _SnapshotSummary | None:
        memo = read_memo(path, version=SUMMARY_VERSION, file_sha256=file_sha256)
        if memo is None or not isinstance(memo.get("request"), dict):
            return None
        if not isinstance(memo.get("records_sha256"), str) or not isinstance(memo.get("retrieved"), str):
            return None
        count, answer_version = memo.get("count"), memo.get("answer_version")
        if not isinstance(count, int) or not isinstance(answer_version, str | None):
            return None
        return cls(
            file_sha256, memo["request"], memo["records_sha256"], count, memo["retrieved"], answer_version
        )

    def write(self, path: Path) -> None:
        replace_file(path, canonical_json({"version": SUMMARY_VERSION, **asdict(self)}).encode("utf-8"))


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
    summary: Path | None = None,
    stamps: Path | None = None,
    trust_answer_versions: bool = True,
) -> tuple[RefreshOutcome, IngestOutcome]:
    """Ingest one species from the downloads' indexes, else from occurrence search; record provenance.

    ``search_client`` is called only when the downloads do not hold the species, so a run whose species
    all come from downloads never builds one. The data version is the raw file's sha256. ``summary`` and
    ``stamps``: gbif_raw's memos (write_raw_snapshot, ingest_species_from_downloads);
    ``trust_answer_versions``: ingest_species's (False under make repair).
    """
    delete_stale_staging_file(raw_path)
    delete_stale_staging_file(records_path(raw_path))
    ingested = ingest_species_from_downloads(indexes, species, raw_path, stamps)
    if ingested is None:
        ingested = ingest_species(
            search_client(), species, raw_path, summary=summary, trust_answer_versions=trust_answer_versions
        )
    parts = {"request": ingested.request, "source": ingested.source, "records": ingested.records_sha256}
    action = LOADED if ingested.written else SKIPPED
    outcome = RefreshOutcome(action, ingested.reason, ingested.file_sha256, parts, ingested.records)
    record_provenance(conn, run_id=run_id, asset=RAW_ASSET, partition_key=species.slug, outcome=outcome)
    return outcome, ingested
