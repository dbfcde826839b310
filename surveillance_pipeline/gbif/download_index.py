"""The download index: one pass over a download splits its records by registry species, once per version.

Reading a 50 GB download is the expensive part of using it; everything after should cost what the species
at hand costs. So each download is read once per *version*, and what it holds per species is kept:

    <index root>/<zip sha256>/<registry sha256[:16]>/index.json     identity, counts, per species part
    <index root>/<zip sha256>/<registry sha256[:16]>/<slug>.tsv.gz  the species' records (gbif.records)

The version is the zip's sha256 plus the registry's selectors (which taxon, which area, per slug) plus
``INDEX_FORMAT``: a cache is a versioned input, and a changed zip, registry or reader gets a new index
rather than a stale one. ``gbif_raw`` builds missing indexes; the sensor and the observation only read
them. A species part is the download's records of the species' taxon inside its registry area
(``Species.in_area``: the same filter the search request applies), sorted by gbifID.

Memory stays bounded whatever the download's size: records stream out of the zip into per-species spill
files through a bounded buffer, and a part longer than ``SORT_BYTES`` is split into files by id range,
each sorted alone.
The gbifIDs, to refuse a duplicate id wherever it sits, go to bucket files on disk and are checked a bucket
at a time (``_KeyBuckets``); only the row reader, which names the lines of a duplicate, keeps every id and
line number (16 bytes a record). Dagster-free.
"""

from __future__ import annotations

import fcntl
import heapq
import json
import os
import shutil
import tempfile
from array import array
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, BinaryIO

from surveillance_pipeline.core.errors import InputError
from surveillance_pipeline.core.keys import canonical_json, sha256_hex
from surveillance_pipeline.core.lazy_modules import LazyModule
from surveillance_pipeline.core.partition_files import forget_file_stamps, sha256_file_stamped
from surveillance_pipeline.gbif.download_columns import (
    ColumnarUnavailable,
    ColumnBatch,
    line_blocks,
    read_column_batches,
)
from surveillance_pipeline.gbif.downloads import (
    DownloadInfo,
    DownloadRecord,
    describe_download,
    downloads_version,
    list_downloads,
    read_records,
)
from surveillance_pipeline.gbif.records import (
    RECORD_COLUMNS,
    RECORDS_FORMAT,
    RecordsWriter,
    iter_record_lines,
    open_hashed_records,
    record_key,
)
from surveillance_pipeline.gbif.registry import Species

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
else:
    np = LazyModule("numpy")
    pa = LazyModule("pyarrow")
    pc = LazyModule("pyarrow.compute")

# Bump when what an index holds for the same zip and registry changes (the reader's rules, the columns).
# 2: ABSENT records are left out, as search's occurrenceStatus=PRESENT leaves them out.
INDEX_FORMAT = 2
INDEX_FILE = "index.json"
# Lines buffered for all spill files together before they are written out (about 100 bytes a line).
SPILL_LINES = 200_000
# Bytes of one part's spill sorted in memory at a time (about twice that while sorted: the lines and
# their sorted copy); a longer part is split into files by id range, each sorted alone, so the largest
# species costs no more memory than a small one. Indexing 5M records with 24, 32 and 48 MB took 59, 59 and
# 65 s at 702, 737 and 815 MB peak (the lines as Python strings in runs of 200,000: 71 s, 695 MB).
SORT_BYTES = 24 << 20
# A long part's id ranges (_split_by_id_ranges): cut from one id in this many, and at most this many at
# once (each an open file while the spill is split; two parts are split at once).
ID_SAMPLE_EVERY = 32
MAX_ID_RANGES = 256
# _sorted_by_key: bytes compared at once to find line ends; the most digits a gbifID has (int64).
SCAN_BYTES = 4 << 20
# Bytes of a part's lines whose gbifIDs are taken at once (part_key_blocks).
KEY_CHUNK_BYTES = 8 << 20
MAX_ID_DIGITS = 19
NEWLINE, TAB, ZERO = (ord(character) for character in "\n\t0")
# Species parts written at once (_build).
PARTS_AT_ONCE = 2
# gbifIDs held before they are written to their buckets (8 MB), and the buckets (_KeyBuckets).
KEY_BUFFER = 1 << 20
KEY_BUCKETS = 64


@dataclass(frozen=True)
class SpeciesPart:
    records: int
    sha256: str
    path: Path


@dataclass(frozen=True)
class DownloadIndex:
    """What one download version holds: its identity, its quirks, and its records per registry species."""

    info: DownloadInfo
    folder: Path
    counts: dict[str, int]
    licenses: dict[str, int]
    parts: dict[str, SpeciesPart]

    def part(self, slug: str) -> SpeciesPart | None:
        return self.parts.get(slug)


def registry_selectors(registry: Sequence[Species]) -> list[dict[str, Any]]:
    """What decides which records a species gets from a download: its taxon and its area, per slug."""
    return [
        {
            "area": {"country": species.country, "stateProvince": species.state_province},
            "slug": species.slug,
            "taxon": species.taxon_filter(),
        }
        for species in sorted(registry, key=lambda s: s.slug)
    ]


def registry_version(registry: Sequence[Species]) -> str:
    recipe = {"format": INDEX_FORMAT, "records": RECORDS_FORMAT, "selectors": registry_selectors(registry)}
    return sha256_hex(canonical_json(recipe).encode("utf-8"))


def index_folder(root: Path, zip_sha256: str, registry: Sequence[Species]) -> Path:
    return root / zip_sha256 / registry_version(registry)[:16]


def load_index(info: DownloadInfo, root: Path, registry: Sequence[Species]) -> DownloadIndex | None:
    """The download's index if it has been built for this registry; never reads the download."""
    folder = index_folder(root, info.sha256, registry)
    try:
        document = json.loads((folder / INDEX_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return None  # a damaged index is rebuilt, never trusted
    if document.get("format") != INDEX_FORMAT or document.get("sha256") != info.sha256:
        return None
    # The folder's name changes with RECORDS_FORMAT; parts of other columns are never read, whatever it says.
    if document.get("columns") != list(RECORD_COLUMNS):
        return None
    parts = {
        slug: SpeciesPart(int(part["records"]), str(part["sha256"]), folder / f"{slug}.tsv.gz")
        for slug, part in document["species"].items()
    }
    return DownloadIndex(info, folder, dict(document["counts"]), dict(document["licenses"]), parts)


def ensure_index(info: DownloadInfo, root: Path, registry: Sequence[Species]) -> DownloadIndex:
    """The download's index, built in one streaming pass when this version has none yet.

    Builders of the same index wait for each other (a file lock), and an index appears whole or not at
    all (built in a temporary folder, then renamed).
    """
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root / ".lock"):
        index = load_index(info, root, registry)
        if index is not None:
            return index
        folder = index_folder(root, info.sha256, registry)
        folder.parent.mkdir(parents=True, exist_ok=True)
        # Under the lock, any folder still being built was left by a builder that was killed.
        for stale in folder.parent.glob(".building-*"):
            shutil.rmtree(stale, ignore_errors=True)
        building = Path(tempfile.mkdtemp(prefix=".building-", dir=folder.parent))
        try:
            _build(info, registry, building)
            if folder.exists():
                shutil.rmtree(folder)
            os.replace(building, folder)
        finally:
            shutil.rmtree(building, ignore_errors=True)
    index = load_index(info, root, registry)
    if index is None:
        raise RuntimeError(f"{folder}: index missing right after it was built")
    return index


def prune_indexes(root: Path, keep_sha256: Iterable[str], registry: Sequence[Species]) -> list[str]:
    """Delete the indexes of zips no longer in the folder, and those built for another registry; returns
    what was deleted (a removed download's index would otherwise stay on disk for good)."""
    if not root.is_dir():
        return []
    keep = set(keep_sha256)
    current = registry_version(registry)[:16]
    removed: list[str] = []
    with _locked(root / ".lock"):
        for entry in sorted(root.iterdir()):
            if not entry.is_dir() or entry.name.startswith("."):
                continue
            if entry.name not in keep:
                shutil.rmtree(entry)
                removed.append(entry.name)
                continue
            for version in sorted(entry.iterdir()):
                if version.is_dir() and not version.name.startswith(".") and version.name != current:
                    shutil.rmtree(version)
                    removed.append(f"{entry.name}/{version.name}")
    return removed


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class _Matcher:
    """Which registry species a download record belongs to: its taxon, then its area."""

    def __init__(self, registry: Sequence[Species]) -> None:
        self._by_key: dict[int, list[Species]] = defaultdict(list)
        self._by_name: dict[str, list[Species]] = defaultdict(list)
        for species in registry:
            if species.taxon_key is not None:
                self._by_key[species.taxon_key].append(species)
            else:
                self._by_name[species.scientific_name].append(species)

    def slugs(self, record: DownloadRecord) -> list[str]:
        if record.absent:
            return []
        found: list[Species] = []
        for key in record.taxon_keys:
            if key is not None and key in self._by_key:
                found.extend(s for s in self._by_key[key] if s not in found)
        if record.species in self._by_name:
            found.extend(self._by_name[record.species])
        return [s.slug for s in found if s.in_area(record.country or None, record.state_province or None)]


def _build(info: DownloadInfo, registry: Sequence[Species], folder: Path) -> None:
    """Read the download once, with the columnar reader when it takes the file, else row by row."""
    try:
        counts, licenses, spill = _split_by_columns(info, registry, folder)
    except ColumnarUnavailable:
        # Not a layout the columnar reader takes, or a value it refuses: the row reader names the line.
        shutil.rmtree(folder / ".spill", ignore_errors=True)
        shutil.rmtree(folder / ".keys", ignore_errors=True)
        counts, licenses, spill = _split_by_rows(info, registry, folder)

    def write_part(slug: str) -> dict[str, Any]:
        with RecordsWriter(folder / f"{slug}.tsv.gz") as writer:
            for block, rows in _sorted_blocks(spill.path(slug), folder / ".ranges"):
                writer.write_block(block, rows)
            rows = writer.rows
            sha256 = writer.commit()
        return {"records": rows, "sha256": sha256}

    # Two parts at a time: while one part's thread sorts (holding the GIL), the other's compresses, writes
    # and fsyncs (not holding it): the parts of a 600,000-record download took a third less time on 2
    # cores, at twice one sort run's memory.
    slugs = sorted(spill.slugs)
    with ThreadPoolExecutor(max_workers=PARTS_AT_ONCE) as pool:
        parts = dict(zip(slugs, pool.map(write_part, slugs), strict=True))
    for scratch in (".spill", ".ranges", ".keys"):
        shutil.rmtree(folder / scratch, ignore_errors=True)
    names = ("above_species_rank", "no_coordinates", "no_license", "records", "zero_coordinates")
    document = {
        "format": INDEX_FORMAT,
        "columns": list(RECORD_COLUMNS),
        "counts": {name: counts[name] for name in names},
        "download": info.identity(),
        "licenses": dict(sorted(licenses.items())),
        "registry": registry_version(registry),
        "sha256": info.sha256,
        "species": parts,
    }
    (folder / INDEX_FILE).write_text(
        json.dumps(document, sort_keys=True, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )


def _split_by_rows(
    info: DownloadInfo, registry: Sequence[Species], folder: Path
) -> tuple[Counter[str], Counter[str], _Spill]:
    matcher = _Matcher(registry)
    counts: Counter[str] = Counter()
    licenses: Counter[str] = Counter()
    keys, lines = array("q"), array("q")
    spill = _Spill(folder / ".spill")
    for record in read_records(info):
        keys.append(record.key)
        lines.append(record.line)
        counts["records"] += 1
        # GBIF fills ``species`` only for records identified to species rank or below.
        counts["above_species_rank"] += not record.species
        counts["no_license"] += not record.has_license
        counts["no_coordinates"] += not record.has_coordinates
        counts["zero_coordinates"] += record.zero_coordinates
        licenses[record.license or "none"] += 1
        for slug in matcher.slugs(record):
            spill.add_block(slug, record.text.encode("utf-8"), 1)
    spill.flush()
    _refuse_duplicates(info, keys, lines)
    return counts, licenses, spill


def _split_by_columns(
    info: DownloadInfo, registry: Sequence[Species], folder: Path
) -> tuple[Counter[str], Counter[str], _Spill]:
    matcher = _ColumnMatcher(registry)
    counts: Counter[str] = Counter()
    licenses: Counter[str] = Counter()
    keys = _KeyBuckets(folder / ".keys")
    spill = _Spill(folder / ".spill")
    for batch in read_column_batches(info):
        counts.update(batch.counts)
        licenses.update(batch.licenses)
        keys.add(batch.keys.to_numpy())
        found = list(matcher.rows_by_species(batch))
        if not found:
            continue
        # The block's lines of every species at once, species after species: one copy, then a view of it
        # per species (no Python string per line).
        taken = batch.lines.take(np.concatenate([rows for _, rows in found]))
        blocks = line_blocks(taken, (len(rows) for _, rows in found))
        for (species_index, rows), block in zip(found, blocks, strict=True):
            spill.add_block(registry[species_index].slug, block, len(rows))
    spill.flush()
    if keys.any_repeated():
        raise ColumnarUnavailable("a duplicate gbifID: the row reader names its lines")
    return counts, licenses, spill


class _KeyBuckets:
    """Every gbifID of a download, spread over files on disk by its value, to find one given twice without
    holding them all: a repeated id falls twice in one bucket, and the buckets are checked one at a time.

    Holding every id took 8 bytes a record, twice while they were joined: 320 MB at 20M records. This holds
    ``KEY_BUFFER`` ids (8 MB, some five times that for a moment while they are sorted into buckets), then
    one bucket (2.5 MB at 20M records); on disk, 8 bytes a record until the index is built.
    """

    def __init__(self, folder: Path) -> None:
        self._folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self._pending: list[np.ndarray] = []
        self._held = 0

    def add(self, keys: np.ndarray) -> None:
        self._pending.append(keys)
        self._held += len(keys)
        if self._held >= KEY_BUFFER:
            self._write()

    def any_repeated(self) -> bool:
        self._write()
        for path in sorted(self._folder.glob("*.int64")):
            keys = np.fromfile(path, dtype=np.int64)
            keys.sort()
            if keys.size and bool(np.any(keys[1:] == keys[:-1])):
                return True
        return False

    def _write(self) -> None:
        if not self._pending:
            return
        keys = np.concatenate(self._pending)
        self._pending.clear()
        self._held = 0
        buckets = keys % KEY_BUCKETS  # gbifIDs are positive (read_column_batches checks)
        order = np.argsort(buckets, kind="stable")
        keys, buckets = keys[order], buckets[order]
        bounds = np.searchsorted(buckets, np.arange(KEY_BUCKETS + 1))
        for bucket in range(KEY_BUCKETS):
            part = keys[bounds[bucket] : bounds[bucket + 1]]
            if part.size:
                with (self._folder / f"{bucket}.int64").open("ab") as handle:
                    part.tofile(handle)


class _ColumnMatcher:
    """``_Matcher`` for a batch at once: taxon keys and names looked up in the registry by pyarrow, the
    area compared with numpy. Pairs of (record, species) are unique, so a record reached by its taxon key
    and its species key is filed once."""

    def __init__(self, registry: Sequence[Species]) -> None:
        keyed = [(s.taxon_key, i) for i, s in enumerate(registry) if s.taxon_key is not None]
        named = [(s.scientific_name, i) for i, s in enumerate(registry) if s.taxon_key is None]
        self._keys = pa.array([key for key, _ in keyed], pa.int64())
        self._key_species = np.array([i for _, i in keyed], dtype=np.int64)
        self._names = pa.array([name for name, _ in named], pa.string())
        self._name_species = np.array([i for _, i in named], dtype=np.int64)
        self._count = max(len(registry), 1)
        self._country = np.array([s.country for s in registry], dtype=object)
        self._state = np.array([s.state_province.strip().lower() for s in registry], dtype=object)

    def rows_by_species(self, batch: ColumnBatch) -> Iterator[tuple[int, np.ndarray]]:
        found_rows: list[np.ndarray] = []
        found_species: list[np.ndarray] = []
        lookups = [(column, self._keys, self._key_species) for column in batch.taxon_keys]
        lookups.append((batch.species, self._names, self._name_species))
        for column, values, species in lookups:
            if len(values) == 0:
                continue
            index = pc.fill_null(pc.index_in(column, value_set=values), -1).to_numpy()
            hits = np.flatnonzero(index >= 0)
            found_rows.append(hits)
            found_species.append(species[index[hits]])
        if not found_rows:
            return
        pairs = np.unique(np.concatenate(found_rows) * self._count + np.concatenate(found_species))
        rows, species = pairs // self._count, pairs % self._count
        present = ~batch.absent.to_numpy(zero_copy_only=False)[rows]
        rows, species = rows[present], species[present]
        country = batch.country.to_numpy(zero_copy_only=False)[rows]
        state = batch.state_province.to_numpy(zero_copy_only=False)[rows]
        wanted_country, wanted_state = self._country[species], self._state[species]
        inside = ((wanted_country == "") | (country == wanted_country)) & (
            (wanted_state == "") | (state == wanted_state)
        )
        rows, species = rows[inside], species[inside]
        order = np.argsort(species, kind="stable")
        rows, species = rows[order], species[order]
        bounds = np.flatnonzero(np.diff(species)) + 1
        for chunk_rows, chunk_species in zip(np.split(rows, bounds), np.split(species, bounds), strict=True):
            if chunk_rows.size:
                yield int(chunk_species[0]), chunk_rows


def _refuse_duplicates(info: DownloadInfo, keys: array, lines: array) -> None:
    if not keys:
        return
    key_array = np.frombuffer(keys, dtype=np.int64)
    order = np.argsort(key_array, kind="stable")
    ordered = key_array[order]
    repeated = np.flatnonzero(ordered[1:] == ordered[:-1])
    if repeated.size == 0:
        return
    # The duplicate met last in the file among the first repeated id: named at its line, with the first.
    first = int(repeated[0])
    first_line = int(lines[int(order[first])])
    line = int(lines[int(order[first + 1])])
    member = info.layout.member if info.layout else "core"
    raise InputError(
        info.path,
        f"{member} line {line}",
        "gbifID",
        f"duplicate id {int(ordered[first])}, first at line {first_line}",
    )


class _Spill:
    """Per-species spill files written through one bounded buffer (never one open file per species)."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self._buffer: dict[str, list[bytes | memoryview]] = defaultdict(list)
        self._buffered = 0
        self.slugs: set[str] = set()

    def path(self, slug: str) -> Path:
        return self._folder / f"{slug}.tsv"

    def add_block(self, slug: str, block: bytes | memoryview, lines: int) -> None:
        """``lines`` records-file lines in UTF-8, each ending in ``\\n``."""
        self._buffer[slug].append(block)
        self.slugs.add(slug)
        self._buffered += lines
        if self._buffered >= SPILL_LINES:
            self.flush()

    def flush(self) -> None:
        for slug, blocks in self._buffer.items():
            with self.path(slug).open("ab") as handle:
                handle.writelines(blocks)
        self._buffer.clear()
        self._buffered = 0


def _sorted_blocks(
    spill: Path, scratch: Path, *, split: bool = True
) -> Iterator[tuple[bytes | memoryview, int]]:
    """The spill file's lines by gbifID, as blocks of lines (UTF-8, each ending in "\\n") and their count:
    sorted in memory when the file is short, else split into files by id range (``_split_by_id_ranges``),
    each then sorted the same way, in id order. Without ``split``, in memory whatever the length."""
    if not split or spill.stat().st_size <= SORT_BYTES:
        lines = _sorted_by_key(spill.read_bytes())
        yield next(line_blocks(lines, [len(lines)])), len(lines)
        return
    ranges = _split_by_id_ranges(spill, scratch)
    try:
        for part in ranges:
            # A range as long as the spill (ids the sample could not cut) is sorted in memory.
            yield from _sorted_blocks(part, scratch, split=len(ranges) > 1)
            part.unlink()
    finally:
        for part in ranges:
            part.unlink(missing_ok=True)


def _split_by_id_ranges(spill: Path, scratch: Path) -> list[Path]:
    """The spill's lines in files by gbifID range, the files in id order, each line keeping its place among
    its range's; returns the files that got lines.

    The ranges are cut at quantiles of every ``ID_SAMPLE_EVERY``-th id, for about ``SORT_BYTES / 2`` a
    range: the sample's error is a few percent, so a range stays well under ``SORT_BYTES``, and one that
    does not is split again. Two passes over the spill, numpy and pyarrow on every line. Before, the part
    was sorted in runs merged from disk by Python's heapq, a line at a time: 5.4 s of CPU in a py-spy
    profile of a 5M-record download's index, and more per line the more runs a species had; indexed alone,
    that download took 55.0 and 60.2 s so, and 49.5-55.7 s split by id range, with 30 MB less peak.
    """
    sample: list[np.ndarray] = []
    with spill.open("rb") as handle:
        for chunk in _line_chunks(handle, SORT_BYTES):
            sample.append(_lines_and_ids(chunk)[1][::ID_SAMPLE_EVERY].copy())
    ids = np.unique(np.concatenate(sample))
    ranges = min(MAX_ID_RANGES, -(-spill.stat().st_size // (SORT_BYTES // 2)))
    bounds = np.unique(ids[(np.arange(1, ranges) * len(ids)) // ranges])
    scratch.mkdir(parents=True, exist_ok=True)
    files: dict[int, BinaryIO] = {}
    try:
        with spill.open("rb") as handle:
            for chunk in _line_chunks(handle, SORT_BYTES):
                lines, chunk_ids = _lines_and_ids(chunk)
                # A line's range: how many bounds are at or below its id.
                of_line = np.searchsorted(bounds, chunk_ids, side="right")
                counts = np.bincount(of_line, minlength=len(bounds) + 1)
                grouped = lines.take(pa.array(np.argsort(of_line, kind="stable")))
                taken = np.flatnonzero(counts)
                for number, block in zip(taken.tolist(), line_blocks(grouped, counts[taken]), strict=True):
                    if number not in files:
                        files[number] = (scratch / f"{spill.name}.{number}").open("wb")
                    files[number].write(block)
    finally:
        for file in files.values():
            file.close()
    return [scratch / f"{spill.name}.{number}" for number in sorted(files)]


def _line_chunks(handle: IO[bytes], size: int) -> Iterator[bytes]:
    """The file's bytes in chunks of about ``size``, each ending where a line does (a chunk ending inside
    a line gets the rest of it: a line longer than ``size`` makes its chunk longer)."""
    while chunk := handle.read(size):
        if not chunk.endswith(b"\n"):
            chunk += handle.readline()
        yield chunk


def _sorted_by_key(chunk: bytes) -> pa.Array:
    """The lines of ``chunk`` as one string array, sorted by gbifID (stable: equal ids keep their order),
    with no Python object per line (sorting Python strings was most of a part's time)."""
    lines, ids = _lines_and_ids(chunk)
    return lines.take(pa.array(np.argsort(ids, kind="stable")))


def _lines_and_ids(chunk: bytes) -> tuple[pa.Array, np.ndarray]:
    """The lines of ``chunk`` (each ending in "\\n", each starting with its gbifID and a tab) as one string
    array over the chunk's bytes (no copy), and their gbifIDs, parsed by numpy."""
    if not chunk.endswith(b"\n"):
        raise ValueError("a spill chunk ends inside a line")
    data = np.frombuffer(chunk, dtype=np.uint8)
    # Line ends found a slice at a time: one comparison over the whole chunk would hold a byte per byte.
    ends = np.concatenate(
        [
            np.flatnonzero(data[at : at + SCAN_BYTES] == NEWLINE) + at + 1
            for at in range(0, len(data), SCAN_BYTES)
        ]
    )
    starts = np.concatenate(([0], ends[:-1]))
    # Each line starts with its gbifID's digits, then a tab (the columnar and the row reader checked the
    # id): the digits are read place by place, for every line still in its digits at once.
    keys = np.zeros(len(starts), dtype=np.int64)
    reading = np.arange(len(starts))
    for place in range(MAX_ID_DIGITS + 1):
        byte = data[starts[reading] + place]
        digit = byte != TAB
        reading, byte = reading[digit], byte[digit]
        if not reading.size:
            break
        keys[reading] = keys[reading] * 10 + (byte.astype(np.int64) - ZERO)
    else:
        raise ValueError("a spill line does not start with a gbifID and a tab")
    offsets = np.concatenate((starts, [len(data)])).astype(np.int64)
    lines = pa.Array.from_buffers(
        pa.large_string(), len(starts), [None, pa.py_buffer(offsets), pa.py_buffer(chunk)]
    )
    return lines, keys


def part_key_blocks(part: SpeciesPart) -> Iterator[np.ndarray]:
    """A species part's gbifIDs, ascending (a part is sorted by gbifID, each once), a block at a time: no
    Python object per line. Read to its end, the file's sha256 must be the index's (as iter_record_lines
    checks it)."""
    with open_hashed_records(part.path, part.sha256, recorded_by="its index") as unzipped:
        for chunk in _line_chunks(unzipped, KEY_CHUNK_BYTES):
            yield _lines_and_ids(chunk if chunk.endswith(b"\n") else chunk + b"\n")[1]


def keys_missing_from(older: SpeciesPart, newer: SpeciesPart | None) -> int:
    """How many of ``older``'s gbifIDs ``newer`` lacks: both walked once, ascending, in blocks, holding no
    more of ``newer`` than the ids up to the end of ``older``'s current block."""
    later = part_key_blocks(newer) if newer is not None else iter(())
    window = np.empty(0, dtype=np.int64)
    exhausted, missing = False, 0
    for block in part_key_blocks(older):
        if not block.size:
            continue
        last = block[-1]
        while not exhausted and (not window.size or window[-1] < last):
            more = next(later, None)
            if more is None:
                exhausted = True
            else:
                window = np.concatenate((window, more))
        missing += int(block.size - np.count_nonzero(np.isin(block, window, assume_unique=True)))
        window = window[window > last]
    return missing


def _keyed_lines(part: SpeciesPart, rank: int) -> Iterator[tuple[int, int, str]]:
    for line in iter_record_lines(part.path, part.sha256):
        yield record_key(line), rank, line


def merged_species_lines(parts: Sequence[tuple[DownloadInfo, SpeciesPart]]) -> Iterator[str]:
    """One species' records over several downloads, by gbifID; a record in two is taken from the newer.

    ``parts`` come oldest first (``DownloadInfo.recency``). GBIF's interpretation of a record changes
    between downloads, and the newer one is the better reading.
    """
    streams = [_keyed_lines(part, -age) for age, (_, part) in enumerate(parts)]
    previous: int | None = None
    for key, _, line in heapq.merge(*streams):
        if key != previous:
            yield line + "\n"
            previous = key


@dataclass(frozen=True)
class DownloadsFolder:
    """The downloads folder: each zip described (and indexed when asked), plus what was not read."""

    downloads: tuple[DownloadInfo, ...]
    indexes: tuple[DownloadIndex | None, ...]
    ignored: tuple[str, ...]

    @property
    def version(self) -> str:
        return downloads_version((info.path.name, info.sha256) for info in self.downloads)


def open_downloads(
    folder: Path,
    index_root: Path,
    registry: Sequence[Species],
    *,
    build: bool,
    stamps: Path | None = None,
) -> DownloadsFolder:
    """Describe every zip (directory and XML only) and, with ``build``, index the ones not indexed yet.

    Without ``build`` nothing reads a record: indexes are loaded when they exist, else None. The zips'
    sha256 are streamed, unless ``stamps`` (a memo, core.partition_files.sha256_file_stamped) vouches for
    a zip: its device, inode, size, mtime and ctime are those it had when it was last hashed. Every
    no-change ``make run`` hashed every zip before: 3.0 s of a 20M-record download's, more when the zip
    had left the page cache. InputError names a zip that is not a GBIF download.
    """
    listing = list_downloads(folder)
    downloads = tuple(
        describe_download(path, sha256_file_stamped(path, stamps) if stamps is not None else None)
        for path in listing.zips
    )
    if stamps is not None:
        forget_file_stamps(stamps, keep={path.name for path in listing.zips})
    if build:
        indexes: tuple[DownloadIndex | None, ...] = tuple(
            ensure_index(info, index_root, registry) for info in downloads
        )
        prune_indexes(index_root, (info.sha256 for info in downloads), registry)
    else:
        indexes = tuple(load_index(info, index_root, registry) for info in downloads)
    return DownloadsFolder(downloads, indexes, listing.ignored)
