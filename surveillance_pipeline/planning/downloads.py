"""What the next run's gbif_raw and occurrences will do with the downloads at hand (GBIF_SOURCE=download),
read before the run: the request each species' raw snapshot will name, and the records a delta of
occurrences will add, change and remove (``make plan``).

The downloads are read as gbif_raw reads them (their indexes, the species' parts, the newest download of
each query) and derived as gbif_derived derives them, streamed and hashed rather than written; only a
download not indexed yet, and a species merged from several downloads, are written, into a temporary
folder deleted with the plan. The derived rows are compared with the derived file occurrences holds the
rows of, record by record, as the delta compares the rows (by gbifID and every column): the same counts.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from surveillance_pipeline.core.record_delta import RecordChanges
from surveillance_pipeline.gbif.download_index import (
    DownloadIndex,
    ensure_index,
    merged_species_lines,
    open_downloads,
)
from surveillance_pipeline.gbif.ingest import (
    download_request,
    downloads_reason,
    downloads_retrieved,
    species_sources,
    stored_snapshot,
)
from surveillance_pipeline.gbif.raw_snapshots import records_path
from surveillance_pipeline.gbif.records import RecordsWriter, whole_line_blocks
from surveillance_pipeline.gbif.registry import Species
from surveillance_pipeline.occurrences.derive import derive_records_file
from surveillance_pipeline.occurrences.load import OccurrenceRules, derived_file_blocks


@dataclass(frozen=True)
class PlannedRaw:
    """A species' raw snapshot as the next gbif_raw leaves it: ``reason`` None when it keeps the one it
    holds (its request unchanged), else why it writes a new one, and the records file it will hold."""

    reason: str | None
    records: Path
    records_sha256: str


@dataclass(frozen=True)
class PlannedRows:
    """A species' next derived file (its sha256) and what occurrences' rows would do by delta."""

    derived_sha256: str
    changes: RecordChanges


class PlannedDownloads:
    """The downloads folder as the next gbif_raw will read it, each download indexed (a download the run
    has not indexed yet is indexed in ``scratch``, as the run will index it)."""

    def __init__(self, downloads: Path, index_root: Path, registry: Sequence[Species], scratch: Path) -> None:
        folder = open_downloads(downloads, index_root, registry, build=False)
        self.scratch = scratch
        self.indexed_here: list[str] = []
        indexes: list[DownloadIndex] = []
        for info, index in zip(folder.downloads, folder.indexes, strict=True):
            if index is None:
                index = ensure_index(info, scratch / "indexes", registry)
                self.indexed_here.append(info.path.name)
            indexes.append(index)
        self.indexes = tuple(indexes)

    def raw(self, species: Species, raw_path: Path) -> PlannedRaw | None:
        """What gbif_raw will do for the species; None when no download holds it or asked for it (the
        search's, then)."""
        found = species_sources(self.indexes, species)
        if not found.held():
            return None
        request = download_request(species, found)
        previous = stored_snapshot(raw_path)
        held_records = records_path(raw_path)
        if (
            previous is not None
            and previous.request == request
            and previous.retrieved == downloads_retrieved(found)
            and previous.records_file == held_records.name
            and held_records.is_file()
        ):
            # The run also hashes the records file: one damaged since is written again.
            return PlannedRaw(None, held_records, previous.records_sha256 or "")
        reason = downloads_reason(previous, request, found)
        if len(found.current) == 1:
            part = found.current[0][1]
            return PlannedRaw(reason, part.path, part.sha256)
        merged = Path(tempfile.mkdtemp(prefix=f"{species.slug}-", dir=self.scratch)) / held_records.name
        with RecordsWriter(merged) as writer:
            writer.write_lines(merged_species_lines(found.current))
            sha256 = writer.commit()
        return PlannedRaw(reason, merged, sha256)


def planned_rows(
    raw: PlannedRaw,
    species: Species,
    held_derived: Path,
    rules: OccurrenceRules,
    share_limit: float,
) -> PlannedRows:
    """The next derived file's sha256 and the record changes between the rows of ``held_derived`` (the
    derived file the partition's rows were loaded from) and those of the records the raw snapshot will
    hold, both under ``rules``; not applied (too large) past ``share_limit``, as the run decides."""
    digest = hashlib.sha256()

    def hashed(blocks: Iterable[bytes]) -> Iterator[bytes]:
        for block in blocks:
            digest.update(block)
            yield block

    def compared(blocks: Iterable[bytes]) -> RecordChanges:
        return _compare(derived_file_blocks(held_derived), hashed(blocks), rules, share_limit)

    counts: dict[str, int] = {}
    changes = derive_records_file(raw.records, raw.records_sha256, species, counts, compared)
    return PlannedRows(digest.hexdigest(), changes)


def _rows(blocks: Iterable[bytes]) -> Iterator[tuple[int, bytes]]:
    """A derived CSV's rows (id, line), after its header, in the file's order (by id)."""
    header = True
    for block in whole_line_blocks(blocks):
        lines = block.split(b"\n")
        if block.endswith(b"\n"):
            lines.pop()
        for line in lines:
            if header:
                header = False
                continue
            yield int(line[: line.index(b",")]), line


def _compare(
    held: Iterable[bytes], following: Iterable[bytes], rules: OccurrenceRules, share_limit: float
) -> RecordChanges:
    """Both derived files walked once by id, each keeping the rows ``rules`` keep
    (insert_species_occurrences.sql)."""
    licenses = set(rules.licenses)

    def kept(rows: Iterator[tuple[int, bytes]]) -> Iterator[tuple[int, bytes]]:
        for key, line in rows:
            fields = line.split(b",")
            license_name = fields[4].decode("utf-8")
            if license_name and license_name not in licenses:
                continue
            if rules.require_coordinates and not fields[2]:
                continue
            yield key, line

    old, new = kept(_rows(held)), kept(_rows(following))
    added = changed = removed = rows = held_rows = 0
    before, after = next(old, None), next(new, None)
    while before is not None or after is not None:
        if after is None or (before is not None and before[0] < after[0]):
            removed += 1
            held_rows += 1
            before = next(old, None)
        elif before is None or after[0] < before[0]:
            added += 1
            rows += 1
            after = next(new, None)
        else:
            # Derive writes each value one way (the year as an integer, a coordinate as the float's repr,
            # a license by its normalized name): rows with the same values have the same line.
            changed += before[1] != after[1]
            rows += 1
            held_rows += 1
            before, after = next(old, None), next(new, None)
    applied = added + changed + removed <= share_limit * max(rows, held_rows, 1)
    return RecordChanges(added, changed, removed, rows, applied=applied)
