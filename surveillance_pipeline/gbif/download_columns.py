"""The columnar reader: a GBIF core file streamed through pyarrow's CSV reader, checked a batch at a time.

GBIF writes its own downloads without quoting (tab-separated, ``fieldsEnclosedBy=""``) in UTF-8. Such a
file is read here in blocks by pyarrow's streaming CSV reader, which parses only the columns we keep and
does it in C++ on every core: about ten times faster than splitting each line in Python. Each batch is
checked as a whole against the same rules as the row reader in ``downloads`` (gbifID, whole numbers,
coordinates and other decimals, licenses), and turned into the records-file lines the row reader writes,
byte for byte, without a Python loop per record.

Whatever this reader does not take (a quoted file, another encoding, a row of another width) or any
value that fails a check raises ``ColumnarUnavailable``: the caller then reads the download with the row
reader, which takes every layout and names the line and the term of the first bad value. A bad download
is therefore read twice, and a good one once, quickly. Dagster-free.
"""

from __future__ import annotations

import zipfile
import zlib
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from surveillance_pipeline.core.lazy_modules import LazyModule
from surveillance_pipeline.gbif.downloads import (
    ABSENT,
    COUNT_PATTERN,
    COUNT_TERM,
    DownloadInfo,
    TableLayout,
    open_member,
)
from surveillance_pipeline.gbif.licenses import normalize_license
from surveillance_pipeline.gbif.records import (
    COORDINATE_TERMS,
    DECIMAL_TERMS,
    INTEGER_TERMS,
    RECORD_COLUMNS,
    TEXT_TERMS,
)
from surveillance_pipeline.gbif.rules import (
    DECIMAL_PATTERN,
    GBIF_ID_PATTERN,
    WHOLE_NUMBER_PATTERN,
    YEAR_PATTERN,
    anchored,
)

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pa_csv
else:
    np = LazyModule("numpy")
    pa = LazyModule("pyarrow")
    pc = LazyModule("pyarrow.compute")
    pa_csv = LazyModule("pyarrow.csv")

BLOCK_BYTES = 4 << 20
# Blocks checked at once (read_column_batches); one more waits, parsed, for a thread: some 3 blocks of
# parsed columns held.
CHECK_THREADS = 2
# What a kept column may hold, beyond the empty string: the row reader's rules (gbif/rules.py, and the
# count's in downloads), matched over a whole column. A value one refuses, the other refuses too; it is
# the row reader that names it.
_GBIF_ID = anchored(GBIF_ID_PATTERN)
_PATTERNS = {
    **{term: anchored(WHOLE_NUMBER_PATTERN) for term in INTEGER_TERMS},
    "year": anchored(YEAR_PATTERN),
    COUNT_TERM: anchored(COUNT_PATTERN),
}
_DECIMAL = anchored(DECIMAL_PATTERN)
_ZERO_ISSUE = r"(^|;)\s*ZERO_COORDINATE\s*(;|$)"
_COLUMN_TERMS = (
    "gbifID",
    *TEXT_TERMS,
    *INTEGER_TERMS,
    *(term for term, _ in COORDINATE_TERMS),
    *DECIMAL_TERMS,
    "issue",
)
# Trimmed as the row reader trims them: text and the quality numbers; the others are checked as they stand.
_TRIMMED = frozenset((*TEXT_TERMS, COUNT_TERM, *DECIMAL_TERMS, "issue"))
# A whole number the pattern takes that int() writes otherwise: a leading zero ("007", "-0").
_NOT_AS_INT_WRITES = r"^-?0[0-9]|^-0$"
# A decimal already written as repr(float(text)) writes it: fixed notation in repr's range (1e-4 up to
# 1e16), no trailing zero but the one of ".0", and at most 16 characters, so at most 15 digits. No other
# text of 15 digits or fewer reads as the same double (DBL_DIG), so no shorter one round-trips: repr
# gives these digits, in this notation. GBIF rounds coordinates to 5 decimals: nearly all are of this form.
_AS_REPR_WRITES = anchored(r"-?(?:[1-9][0-9]*\.(?:0|[0-9]*[1-9])|0\.(?:0|0{0,3}[1-9](?:[0-9]*[1-9])?))")
_AS_REPR_LENGTH = 16


class ColumnarUnavailable(Exception):
    """This download (or one of its values) is for the row reader."""


@dataclass(frozen=True)
class ColumnBatch:
    """One block of records: gbifIDs, the records-file lines, and what the index files and counts."""

    keys: pa.Array  # int64
    lines: pa.Array  # string, each ending in "\n"
    taxon_keys: tuple[pa.Array, pa.Array, pa.Array]  # int64 or null: taxonKey, speciesKey, acceptedTaxonKey
    species: pa.Array  # string
    country: pa.Array  # string
    state_province: pa.Array  # string, lower case
    absent: pa.Array  # bool: occurrenceStatus ABSENT, which search's occurrenceStatus=PRESENT leaves out
    counts: dict[str, int]
    licenses: dict[str, int]


def read_column_batches(info: DownloadInfo) -> Iterator[ColumnBatch]:
    layout = info.layout
    if layout is None or layout.quote is not None or layout.encoding.lower().replace("-", "") != "utf8":
        raise ColumnarUnavailable("quoted or not UTF-8")
    with open_member(info) as member:
        names, positions, skip = _columns(info, layout, member)
        try:
            reader = pa_csv.open_csv(
                member,
                read_options=pa_csv.ReadOptions(
                    column_names=names, skip_rows=skip, block_size=BLOCK_BYTES, use_threads=True
                ),
                parse_options=pa_csv.ParseOptions(
                    delimiter=layout.delimiter, quote_char=False, newlines_in_values=False
                ),
                convert_options=pa_csv.ConvertOptions(
                    include_columns=sorted(set(positions.values())),
                    column_types={name: pa.string() for name in set(positions.values())},
                    strings_can_be_null=False,
                    quoted_strings_can_be_null=False,
                ),
            )
            # Blocks are checked on CHECK_THREADS threads, in order: pyarrow's compute functions let go of
            # the GIL, and the checks, on this thread alone, kept one core busy while the parser waited.
            with ThreadPoolExecutor(max_workers=CHECK_THREADS) as pool:
                checking: deque[Future[ColumnBatch]] = deque()
                for batch in reader:
                    if batch.num_rows:  # an empty block's checks would be empty, not true
                        checking.append(pool.submit(_checked_batch, batch, positions, layout))
                    if len(checking) > CHECK_THREADS:
                        yield checking.popleft().result()
                while checking:
                    yield checking.popleft().result()
        except (
            pa.ArrowException,
            OSError,
            EOFError,
            UnicodeDecodeError,
            zipfile.BadZipFile,
            zlib.error,
        ) as error:
            # A row of another width, bad UTF-8, a corrupt zip member: the row reader says where.
            raise ColumnarUnavailable(str(error)) from None


def _columns(info: DownloadInfo, layout: TableLayout, member: Any) -> tuple[list[str], dict[str, str], int]:
    """Column names for every column of the file, which column holds each kept term, and the lines to
    skip. A simple CSV's header is read here (its layout comes from it); a DwC-A's comes from meta.xml."""
    columns = dict(layout.columns)
    skip = layout.header_lines
    if not columns:
        header = member.readline().decode("utf-8-sig").rstrip("\r\n")
        columns = dict(enumerate(header.split(layout.delimiter)))
        skip = 0
    if layout.defaults:
        raise ColumnarUnavailable("meta.xml gives constant defaults")
    width = max(columns, default=-1) + 1
    names = [f"c{index}" for index in range(width)]
    by_term: dict[str, str] = {}
    for index, term in sorted(columns.items()):
        by_term.setdefault(term, names[index])
    if "gbifID" not in by_term:
        raise ColumnarUnavailable("no gbifID column")
    positions = {term: by_term[term] for term in _COLUMN_TERMS if term in by_term}
    return names, positions, skip


def _checked_batch(batch: pa.RecordBatch, positions: dict[str, str], layout: TableLayout) -> ColumnBatch:
    rows = batch.num_rows
    empty = pa.array([""] * rows, pa.string())
    values: dict[str, pa.Array] = {}
    for term in _COLUMN_TERMS:
        if term in positions:
            column = batch.column(positions[term])
            if term in _TRIMMED:
                column = pc.utf8_trim_whitespace(column)
            values[term] = column
        else:
            values[term] = empty
    gbif_id = values["gbifID"]
    _require(pc.all(pc.match_substring_regex(gbif_id, _GBIF_ID)), "gbifID")
    keys = pc.cast(gbif_id, pa.int64())  # raises ArrowInvalid past int64: the row reader names it
    _require(pc.all(pc.greater(keys, 0)), "gbifID")
    integers = {}
    texts: dict[str, pa.Array] = {}
    for term in INTEGER_TERMS:
        column = values[term]
        filled = pc.not_equal(column, "")
        _require(pc.all(pc.or_(pc.invert(filled), pc.match_substring_regex(column, _PATTERNS[term]))), term)
        integers[term] = pc.cast(pc.if_else(filled, column, pa.scalar(None, pa.string())), pa.int64())
        texts[term] = column
        if pc.any(pc.match_substring_regex(column, _NOT_AS_INT_WRITES)).as_py():
            texts[term] = pc.if_else(filled, pc.cast(integers[term], pa.string()), "")
    # Both coordinates or neither, as coordinate_texts_problem says.
    latitude_filled, longitude_filled = (pc.not_equal(values[term], "") for term, _ in COORDINATE_TERMS)
    _require(pc.all(pc.equal(latitude_filled, longitude_filled)), "decimalLatitude")
    numbers = {}
    for term, limit in COORDINATE_TERMS:
        column = values[term]
        filled = latitude_filled  # and longitude_filled: the same, as just checked
        _require(pc.all(pc.or_(pc.invert(filled), pc.match_substring_regex(column, _DECIMAL))), term)
        number = pc.cast(pc.if_else(filled, column, pa.scalar(None, pa.string())), pa.float64())
        # The pattern keeps every number finite; the range is coordinate_problem's.
        _require(pc.all(pc.fill_null(pc.less_equal(pc.abs(number), limit), True)), term)
        numbers[term] = number
        texts[term] = _as_repr_writes(column, filled)
    for term in DECIMAL_TERMS:
        column = values[term]
        filled = pc.not_equal(column, "")
        _require(pc.all(pc.or_(pc.invert(filled), pc.match_substring_regex(column, _DECIMAL))), term)
        number = pc.cast(pc.if_else(filled, column, pa.scalar(None, pa.string())), pa.float64())
        _require(pc.all(pc.fill_null(pc.greater_equal(number, 0.0), True)), term)
        texts[term] = _as_repr_writes(column, filled)
    licenses = _licenses(values["license"])
    latitude, longitude = numbers["decimalLatitude"], numbers["decimalLongitude"]
    at_origin = pc.fill_null(pc.and_(pc.equal(latitude, 0.0), pc.equal(longitude, 0.0)), False)
    zero = pc.or_(at_origin, pc.match_substring_regex(values["issue"], _ZERO_ISSUE))
    counts = {
        "records": rows,
        "above_species_rank": _count(pc.equal(values["species"], "")),
        "no_license": _count(pc.equal(values["license"], "")),
        "no_coordinates": _count(pc.equal(values["decimalLatitude"], "")),
        "zero_coordinates": _count(zero),
    }
    # The records file's columns, in order.
    parts = [values["gbifID"]]
    parts += [values[term] for term in TEXT_TERMS]
    parts += [texts[term] for term in INTEGER_TERMS]
    parts += [texts[term] for term, _ in COORDINATE_TERMS]
    parts += [texts[term] for term in DECIMAL_TERMS]
    # The last column with the line's end, so that the lines need no pass of their own to get it.
    parts.append(pc.binary_join_element_wise(values["issue"], empty, "\n"))
    if len(parts) != len(RECORD_COLUMNS):
        raise AssertionError("records columns and the columnar reader disagree")
    # A NUL byte and a backslash are looked for once in the joined lines' bytes rather than column by
    # column (17 scans each: a third of this function's time), and not string by string (_bytes_found).
    # Every kept column is in the line, and only text can hold a backslash (gbifID, the whole numbers and
    # the decimals passed their patterns above), so escaping the line escapes exactly the text, as the
    # records file wants.
    lines = pc.binary_join_element_wise(*parts, "\t")
    nul, backslash = _bytes_found(lines, (0, ord("\\")))
    if nul:
        raise ColumnarUnavailable("NUL byte")
    if backslash:
        lines = pc.replace_substring(lines, "\\", "\\\\")
    return ColumnBatch(
        keys=keys,
        lines=lines,
        taxon_keys=(integers["taxonKey"], integers["speciesKey"], integers["acceptedTaxonKey"]),
        species=values["species"],
        country=values["countryCode"],
        state_province=pc.utf8_lower(values["stateProvince"]),
        absent=pc.equal(pc.utf8_upper(values["occurrenceStatus"]), ABSENT),
        counts=counts,
        licenses=licenses,
    )


def _as_repr_writes(column: pa.Array, filled: pa.Array) -> pa.Array:
    """Each filled decimal text of ``column`` as the row reader writes it, ``repr(float(text))``; the
    empty ones stay empty. Texts already in that form are kept; the others (a whole number, a trailing
    zero, Java's "1.0E-4") are written by Python itself, once per distinct text, so the two readers' lines
    agree byte for byte without a Python call per record."""
    kept = pc.or_(
        pc.invert(filled),
        pc.and_(
            pc.match_substring_regex(column, _AS_REPR_WRITES),
            pc.less_equal(pc.utf8_length(column), _AS_REPR_LENGTH),
        ),
    )
    if pc.all(kept).as_py():
        return column
    distinct = pc.unique(pc.filter(column, pc.invert(kept)))
    written = pa.array([repr(float(text)) for text in distinct.to_pylist()], pa.string())
    return pc.if_else(kept, column, pc.take(written, pc.index_in(column, value_set=distinct)))


def _bytes_found(lines: pa.Array, wanted: tuple[int, ...]) -> list[bool]:
    """Whether any of ``lines`` holds each byte of ``wanted``, from one look at their joined bytes.

    pc.match_substring looked string by string: two scans took 0.97 of the 2.4 s of CPU the checks spent
    on a 600,000-record download. The lines' bytes are one buffer, compared here as a whole.
    """
    if lines.null_count:
        raise ValueError("a null line")
    [block] = line_blocks(lines, [len(lines)])
    data = np.frombuffer(block, dtype=np.uint8)
    return [bool(np.any(data == byte)) for byte in wanted]


def _require(check: pa.Scalar, term: str) -> None:
    if not check.as_py():
        raise ColumnarUnavailable(f"a value of {term} fails its check")


def _count(mask: pa.Array) -> int:
    return int(pc.sum(pc.cast(mask, pa.int64())).as_py() or 0)


def _licenses(column: pa.Array) -> dict[str, int]:
    """Records per published license name ("none" for an empty one); an unknown license goes to the row
    reader, which names its line."""
    counts: dict[str, int] = {}
    for entry in pc.value_counts(column).to_pylist():
        value, count = entry["values"], entry["counts"]
        try:
            name = normalize_license(value) or "none"
        except ValueError:
            raise ColumnarUnavailable("unknown license") from None
        counts[name] = counts.get(name, 0) + count
    return counts


def line_blocks(lines: pa.Array, counts: Iterable[int]) -> Iterator[memoryview]:
    """``lines`` (strings each ending in "\\n") cut into consecutive blocks of ``counts`` lines, each a
    view of pyarrow's buffer: no copy, and no Python string per line."""
    if lines.null_count:
        raise ValueError("a null line")
    offset_type = np.int64 if lines.type == pa.large_string() else np.int32
    offsets = np.frombuffer(lines.buffers()[1], dtype=offset_type)[
        lines.offset : lines.offset + len(lines) + 1
    ]
    data = memoryview(lines.buffers()[2] or b"")
    first = 0
    for count in counts:
        yield data[int(offsets[first]) : int(offsets[first + count])]
        first += count


def joined_lines(lines: pa.Array) -> bytes:
    """The strings of ``lines``, each followed by "\\n", as one bytes object: one copy out of pyarrow's
    buffer instead of a Python string per line."""
    ended = pc.binary_join_element_wise(lines, pa.scalar("", pa.string()), "\n")
    return bytes(next(line_blocks(ended, [len(ended)])))
