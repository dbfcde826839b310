"""Records files: a species' records from GBIF downloads as sorted, gzip-compressed TSV.

A download can hold millions of records of one species, so its raw snapshot cannot be one JSON document
that every reader parses whole. The records go into ``<slug>.records.tsv.gz`` beside the snapshot's small
JSON header instead: one line per record, the columns of ``RECORD_COLUMNS`` in that order, sorted by
gbifID, written with fixed gzip settings (no name, no time, one compression level), so the same records
give the same bytes. Readers stream it and check its sha256 against the one the header recorded.

Values are the text the download held, already checked (the reader in ``downloads`` refuses bad ones);
whole numbers are written as ``int`` writes them, coordinates and the other decimals in Python's shortest
round-trip form of the float they parse to, so a record read back is exactly the occurrence-search record
a JSON snapshot would hold. Tabs, newlines and backslashes inside a value (possible in a quoted DwC-A) are
escaped as ``\\t``, ``\\n``, ``\\r``, ``\\\\``.
Dagster-free.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import itertools
import os
import re
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, cast

from isal import igzip, isal_zlib

from surveillance_pipeline.core.errors import InputError, StaleInputError
from surveillance_pipeline.core.partition_files import staging_file
from surveillance_pipeline.gbif.rules import COORDINATE_TERMS

# The occurrence-search fields a record keeps, by type. Everything else in a download is left out: derive
# and geocoded_localities read the place, time, taxon and license; the quality terms (establishmentMeans,
# institutionCode, individualCount, the coordinates' uncertainty and precision) are kept so that a record
# from a download can be judged fit for use as one from a search answer can.
TEXT_TERMS = (
    "basisOfRecord",
    "countryCode",
    "datasetKey",
    "establishmentMeans",
    "eventDate",
    "institutionCode",
    "license",
    "locality",
    "occurrenceStatus",
    "scientificName",
    "species",
    "stateProvince",
    "taxonRank",
)
INTEGER_TERMS = ("year", "taxonKey", "speciesKey", "acceptedTaxonKey", "individualCount")
# Decimals other than the coordinates: in meters, and in degrees (GBIF's JSON gives both as floats).
DECIMAL_TERMS = ("coordinatePrecision", "coordinateUncertaintyInMeters")
RECORD_COLUMNS = (
    "key",
    *TEXT_TERMS,
    *INTEGER_TERMS,
    *(name for name, _ in COORDINATE_TERMS),
    *DECIMAL_TERMS,
    "issues",
)
# Bump when the columns or the way a value is written change: the download index's version includes it,
# so every index (and the records files copied from it) is built again, and a raw snapshot's header naming
# other columns is refused (raw_snapshots) rather than read by the wrong positions.
# 2: establishmentMeans, institutionCode, individualCount and DECIMAL_TERMS.
RECORDS_FORMAT = 2
# Level 1: a records file is written once per download version and read by derive; a stronger level
# would cost several times the time for a third less disk.
GZIP_LEVEL = 1
# Lines joined into one write (RecordsWriter.write_lines): some 1 MB of text.
WRITE_BLOCK_LINES = 8192
GZIP_BLOCK = 1 << 20

_ESCAPES = (("\\", "\\\\"), ("\t", "\\t"), ("\n", "\\n"), ("\r", "\\r"))
_UNESCAPES = {"\\\\": "\\", "\\t": "\t", "\\n": "\n", "\\r": "\r"}


def escape(value: str) -> str:
    if "\\" in value or "\t" in value or "\n" in value or "\r" in value:
        for plain, escaped in _ESCAPES:
            value = value.replace(plain, escaped)
    return value


def unescape(value: str) -> str:
    if "\\" not in value:
        return value
    out: list[str] = []
    index = 0
    while index < len(value):
        pair = value[index : index + 2]
        if pair in _UNESCAPES:
            out.append(_UNESCAPES[pair])
            index += 2
        else:
            out.append(value[index])
            index += 1
    return "".join(out)


def record_key(line: str) -> int:
    """The gbifID a records line starts with."""
    return int(line[: line.index("\t")])


def record_from_fields(fields: list[str]) -> dict[str, Any]:
    """One records-file line (split on tabs) as the occurrence-search record it stands for."""
    record: dict[str, Any] = {"key": int(fields[0])}
    position = 1
    for term in TEXT_TERMS:
        if value := fields[position]:
            record[term] = unescape(value)
        position += 1
    for term in INTEGER_TERMS:
        if value := fields[position]:
            record[term] = int(value)
        position += 1
    for term in (*(name for name, _ in COORDINATE_TERMS), *DECIMAL_TERMS):
        if value := fields[position]:
            record[term] = float(value)
        position += 1
    if value := fields[position]:
        # Sorted and stripped here, so a records file may hold GBIF's issue text as it came.
        issues = sorted(unescape(issue).strip() for issue in value.split(";") if issue.strip())
        if issues:
            record["issues"] = issues
    return record


class RecordsWriter:
    """Writes records lines into a deterministic gzip file, hashing the compressed bytes as they go.

    The file is written beside ``path`` and renamed over it by ``commit``, so a reader never sees half
    of one; ``abort`` (or leaving the ``with`` block by an exception) deletes the partial file.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows = 0
        self._partial = staging_file(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._raw = _HashingFile(self._partial.open("wb"))
        # filename="" and mtime=0: the gzip header then holds nothing but the fixed flags.
        self._gzip = gzip.GzipFile(
            filename="", mode="wb", fileobj=self._raw, compresslevel=GZIP_LEVEL, mtime=0
        )

    def write_lines(self, lines: Iterable[str]) -> None:
        """Lines already ending in ``\\n``, handed on joined a block at a time (a write per line was half
        the cost of writing an index part)."""
        stream = iter(lines)
        while block := list(itertools.islice(stream, WRITE_BLOCK_LINES)):
            self.write_block("".join(block).encode("utf-8"), len(block))

    def write_block(self, block: bytes | memoryview, rows: int) -> None:
        """``rows`` lines in UTF-8, each ending in ``\\n``. The gzip bytes do not depend on how the
        text is cut into blocks: deflate without a flush waits for more input rather than emit early (a
        flush writes a sync marker: only ``commit`` flushes)."""
        self._gzip.write(block)
        self.rows += rows

    def commit(self) -> str:
        """Close, rename over the target, and return the file's sha256."""
        # A sync flush, then the end of the stream: the bytes every records file has had since the text
        # went through a TextIOWrapper, whose close flushed the GzipFile before closing it. Without it
        # the same lines would make another file, and every raw snapshot naming one a new key.
        self._gzip.flush()
        self._gzip.close()  # GzipFile leaves the file it was given open
        self._raw.close()  # flushed and fsynced before the rename makes it the records file
        os.replace(self._partial, self.path)
        return self._raw.digest.hexdigest()

    def abort(self) -> None:
        try:
            self._gzip.close()
            self._raw.close()
        finally:
            self._partial.unlink(missing_ok=True)

    def __enter__(self) -> RecordsWriter:
        return self

    def __exit__(self, kind: object, error: object, trace: object) -> None:
        if kind is not None:
            self.abort()


class _HashingFile(io.RawIOBase):
    """A write-only file that hashes what passes through it."""

    def __init__(self, target: IO[bytes]) -> None:
        self._target = target
        self.digest = hashlib.sha256()

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data)
        self.digest.update(view)
        self._target.write(view)
        return len(view)

    def close(self) -> None:
        if not self.closed:
            self._target.flush()
            os.fsync(self._target.fileno())
            self._target.close()
        super().close()


def copy_records(source: Path, target: Path, expected_sha256: str) -> str:
    """Copy a records file (beside the target, then renamed over it), checking it is the one expected."""
    partial = staging_file(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    try:
        with source.open("rb") as reader, partial.open("wb") as writer:
            while block := reader.read(GZIP_BLOCK):
                digest.update(block)
                writer.write(block)
            writer.flush()
            os.fsync(writer.fileno())
        if digest.hexdigest() != expected_sha256:
            raise StaleInputError(f"{source}: not the records its download index recorded; rebuild the index")
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return digest.hexdigest()


# What reading a damaged records file raises: a cut or bad gzip stream, corrupt deflate data (ISA-L's
# error, and zlib's), bytes that are not UTF-8.
RECORDS_READ_ERRORS: tuple[type[Exception], ...] = (
    OSError,
    EOFError,
    UnicodeDecodeError,
    cast(type[Exception], isal_zlib.error),
    zlib.error,
)


def open_records_stream(fileobj: io.RawIOBase) -> IO[bytes]:
    """A records file's lines as bytes, inflated by ISA-L: the bytes gzip gives, in less than half its
    CPU (0.32 s against 0.72-0.82 s for the 71 files of a 1M-record download)."""
    return cast(IO[bytes], igzip.GzipFile(fileobj=fileobj, mode="rb"))


@contextmanager
def open_hashed_records(
    path: Path, expected_sha256: str | None, recorded_by: str = "its raw snapshot"
) -> Iterator[IO[bytes]]:
    """A records file's inflated bytes, hashed as they are read. Leaving the block, the rest of the file is
    hashed too and its sha256 must be ``expected_sha256`` (what ``recorded_by`` recorded), else
    StaleInputError: the file was replaced or edited since. A missing or unreadable file is an InputError
    naming it."""
    digest = hashlib.sha256()
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        raise InputError(path, "file", None, "records file is missing: materialize gbif_raw again") from None
    with handle:
        try:
            with open_records_stream(HashingReader(handle, digest)) as unzipped:
                yield unzipped
        except RECORDS_READ_ERRORS as error:
            raise InputError(path, "file", None, f"not a readable records file: {error}") from None
        # Whatever gzip did not need to read still belongs to the file's bytes.
        while block := handle.read(GZIP_BLOCK):
            digest.update(block)
    if expected_sha256 is not None and digest.hexdigest() != expected_sha256:
        raise StaleInputError(
            f"{path}: sha256 {digest.hexdigest()[:12]}… is not the {expected_sha256[:12]}… {recorded_by} "
            "recorded (edited or replaced since): materialize gbif_raw again"
        )


def iter_record_lines(path: Path, expected_sha256: str | None = None) -> Iterator[str]:
    """The lines of a records file (without their ``\\n``), streamed; at the end, the file's sha256 must
    be ``expected_sha256`` (what the raw snapshot recorded), else StaleInputError: the file was replaced
    or edited after the snapshot named it."""
    with open_hashed_records(path, expected_sha256) as unzipped:
        for line in io.TextIOWrapper(unzipped, encoding="utf-8", newline="\n"):
            yield line[:-1] if line.endswith("\n") else line


def _line_without_coordinates_pattern() -> re.Pattern[bytes]:
    """A records line whose decimalLatitude and decimalLongitude are both empty, from the tab before the
    first to the line's end: three tabs in a row, then exactly the fields that follow the two."""
    latitude, longitude = RECORD_COLUMNS.index("decimalLatitude"), RECORD_COLUMNS.index("decimalLongitude")
    if longitude != latitude + 1 or latitude == 0:
        raise RuntimeError("the pattern reads decimalLatitude and decimalLongitude as neighbours, not first")
    after = len(RECORD_COLUMNS) - longitude - 1
    return re.compile(b"\t\t\t" + b"[^\t\n]*\t" * (after - 1) + b"[^\t\n]*\n")


_LINE_WITHOUT_COORDINATES = _line_without_coordinates_pattern()


def iter_records_without_coordinates(
    path: Path, expected_sha256: str | None = None
) -> Iterator[dict[str, Any]]:
    """The records of a records file that have neither coordinate, in the file's order; the file's sha256
    checked as iter_record_lines checks it. Most lines of a big species have coordinates: the others are
    found by a pattern over the inflated blocks, so those are never decoded nor split (the 71 files of
    the bench's 1M-record download, 49,735 such records: 0.94 s, of which 0.34 s inflating and hashing,
    against 1.70 s line by line; the same records; 2026-12-07 at 3bf8602). A line the pattern finds that is
    not a record (a damaged file inflates to anything before its checksum fails) is an InputError naming
    the file and the line."""
    with open_hashed_records(path, expected_sha256) as unzipped:
        lines_before = 0  # the lines of the file before the current block's position ``counted``
        for block in whole_line_blocks(iter(lambda: unzipped.read(GZIP_BLOCK), b"")):
            if not block.endswith(b"\n"):
                block += b"\n"  # a last line without its newline
            counted = 0
            for found in _LINE_WITHOUT_COORDINATES.finditer(block):
                start = block.rfind(b"\n", 0, found.start()) + 1
                lines_before += block.count(b"\n", counted, start)
                counted = start
                yield _record_of_line(path, lines_before + 1, block[start : found.end() - 1])
            lines_before += block.count(b"\n", counted)


def whole_line_blocks(blocks: Iterable[bytes]) -> Iterator[bytes]:
    """``blocks`` regrouped to end where a line ends: a line cut between two blocks goes whole into the
    later one; a last line without its newline comes last, as it is."""
    rest = b""
    for block in blocks:
        block = rest + block
        end = block.rfind(b"\n") + 1
        rest = block[end:]
        if end:
            yield block[:end]
    if rest:
        yield rest


def _record_of_line(path: Path, number: int, line: bytes) -> dict[str, Any]:
    try:
        return record_from_fields(line.decode("utf-8").split("\t"))
    except (ValueError, IndexError) as error:  # a UnicodeDecodeError is a ValueError
        raise InputError(path, f"line {number}", None, f"not a readable records file: {error}") from None


class HashingReader(io.RawIOBase):
    """A read-only file that hashes what passes through it (gzip reads a records file through it)."""

    def __init__(self, source: IO[bytes], digest: Any) -> None:
        self._source = source
        self._digest = digest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._source.read(len(buffer))
        self._digest.update(data)
        buffer[: len(data)] = data
        return len(data)


def iter_records(path: Path, expected_sha256: str | None = None) -> Iterator[dict[str, Any]]:
    """The records of a records file as occurrence-search records, in gbifID order."""
    for line in iter_record_lines(path, expected_sha256):
        yield record_from_fields(line.split("\t"))
