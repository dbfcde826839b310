"""GBIF downloads: a Darwin Core Archive or a simple-CSV zip, described cheaply and read as a stream.

A user who needs more than occurrence search serves (100,000 records) requests a download from GBIF and
drops the zip in ``data/downloads/``. Downloads run to tens of gigabytes, so nothing here holds a whole
member, a whole record set or the columns nobody reads:

- ``describe_download`` reads only the zip's directory and its small XML members (meta.xml, metadata.xml):
  format, key, DOI, query, creation time. It never reads the records.
- ``read_records`` streams the core file straight out of the zip, line by line, keeps the columns of
  ``records.RECORD_COLUMNS`` and checks each value, naming the zip, the member, the line and the term of
  a bad one. A DwC-A is read by its meta.xml (core file, delimiter, quote character, encoding, header
  lines, the term of every column), so no column position is assumed; a simple CSV is GBIF's
  tab-separated, unquoted UTF-8 file with a header of term names.

Which records a species gets, and the one pass that splits a download by species, live in
``download_index``. Dagster-free.
"""

from __future__ import annotations

import csv
import io
import re
import xml.etree.ElementTree as ElementTree  # noqa: S405 - see _parse_xml for why plain expat is safe here
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, cast

from surveillance_pipeline.core.errors import InputError
from surveillance_pipeline.core.keys import canonical_json, sha256_file_once, sha256_hex
from surveillance_pipeline.gbif.licenses import normalize_license
from surveillance_pipeline.gbif.records import DECIMAL_TERMS, INTEGER_TERMS, TEXT_TERMS, escape
from surveillance_pipeline.gbif.rules import (
    COORDINATE_TERMS,
    DECIMAL_PATTERN,
    coordinate_texts_problem,
    gbif_id_text_problem,
    published_at_zero,
    whole_number_text_problem,
    year_text_problem,
)
from surveillance_pipeline.gbif.zip_inflate import open_inflated

DWCA = "DWCA"
SIMPLE_CSV = "SIMPLE_CSV"
OCCURRENCE_ROW_TYPE = "http://rs.tdwg.org/dwc/terms/Occurrence"
# GBIF download keys: a sequence number and a creation timestamp (yyMMddHHmmss plus three digits).
DOWNLOAD_KEY = re.compile(r"\d{7}-\d{15}")
# meta.xml and metadata.xml are a few tens of kB; anything far larger is not a GBIF download.
MAX_XML_BYTES = 4 << 20
READ_BLOCK = 4 << 20
# Search asks for occurrenceStatus=PRESENT; a download's query may not have, so its ABSENT records (a
# survey saying a species was looked for and not found) are left out of every species, as search would.
ABSENT = "ABSENT"


@dataclass(frozen=True)
class TableLayout:
    """How one delimited file is written, as meta.xml (or GBIF's simple-CSV convention) describes it."""

    member: str
    encoding: str
    delimiter: str
    quote: str | None
    header_lines: int
    # column index -> term name; plus terms with a constant default (meta.xml field without an index)
    columns: dict[int, str]
    defaults: dict[str, str]


@dataclass(frozen=True)
class DownloadInfo:
    """What a download is, read from its zip directory and XML members only."""

    path: Path
    key: str
    format: str
    doi: str | None
    query: str | None
    # When GBIF created it (ISO 8601, UTC), or None when nothing in the zip says; decides which of two
    # downloads holding one record is the newer reading of it.
    created: str | None
    sha256: str
    # The simple CSV's header is part of its core file, so its layout is known only once it is opened.
    layout: TableLayout | None

    def identity(self) -> dict[str, Any]:
        """What a raw snapshot records as the request: which download, of what query, which bytes."""
        return {
            "created": self.created,
            "doi": self.doi,
            "format": self.format,
            "key": self.key,
            "query": self.query,
            "sha256": self.sha256,
        }

    def recency(self) -> tuple[str, str]:
        """Sorts downloads oldest first: by creation time, then by file name."""
        return (self.created or "", self.path.name)


@dataclass(frozen=True)
class FolderListing:
    """The downloads folder as seen without reading any zip: the zips, and what else lies there."""

    zips: tuple[Path, ...]
    ignored: tuple[str, ...]


def list_downloads(folder: Path) -> FolderListing:
    """The zips in the downloads folder, by name, and the names of anything else (reported, not read).

    Hidden entries (a dot in front: an editor's or a copier's temporary file) are neither.
    """
    if not folder.is_dir():
        return FolderListing((), ())
    entries = sorted(path for path in folder.iterdir() if not path.name.startswith("."))
    zips = tuple(path for path in entries if path.suffix.lower() == ".zip" and path.is_file())
    return FolderListing(zips, tuple(path.name for path in entries if path not in zips))


def downloads_version(files: Iterable[tuple[str, str]]) -> str:
    """One sha256 for the folder's downloads: their (name, sha256) pairs, by name."""
    return sha256_hex(canonical_json(sorted(files)).encode("utf-8"))


def describe_download(path: Path, sha256: str | None = None) -> DownloadInfo:
    """Format, key, DOI, query and creation time of a DwC-A or simple-CSV zip, without reading records.

    ``sha256`` is the zip's, when the caller has hashed it already (it is streamed otherwise).
    """
    archive = _open_zip(path)
    with archive:
        names = archive.namelist()
        # Remembered in this process: make run observes the folder, then gbif_raw reads it (the zip is
        # hashed once, not once per run of the process).
        file_sha256 = sha256 or sha256_file_once(path)
        if "meta.xml" in names:
            layout = core_layout(path, _parse_xml(path, archive, "meta.xml"))
            key, doi, query, created = _key_from_name(path), None, None, None
            if "metadata.xml" in names:
                key, doi, query, created = _describe(path, _parse_xml(path, archive, "metadata.xml"), key)
            return DownloadInfo(
                path, key, DWCA, doi, query, created or _created_fallback(archive, key), file_sha256, layout
            )
        csv_members = [name for name in names if name.endswith(".csv")]
        if len(csv_members) == 1:
            key = _key_from_name(path)
            layout = TableLayout(csv_members[0], "utf-8", "\t", None, 1, {}, {})
            return DownloadInfo(
                path, key, SIMPLE_CSV, None, None, _created_fallback(archive, key), file_sha256, layout
            )
        raise InputError(
            path,
            "file",
            None,
            "neither a Darwin Core Archive (no meta.xml) nor a simple-CSV download (one .csv member); "
            f"members: {', '.join(names[:5]) or 'none'}",
        )


def _open_zip(path: Path) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as error:
        raise InputError(path, "file", None, f"not a readable zip: {error}") from None


def _parse_xml(path: Path, archive: zipfile.ZipFile, member: str) -> ElementTree.Element:
    # Python 3.11's bundled expat never fetches external entities and refuses billion-laughs style
    # expansion; with the size cap that is enough for a file the user downloaded from GBIF.
    info = archive.getinfo(member)
    if info.file_size > MAX_XML_BYTES:
        raise InputError(path, member, None, f"{info.file_size} bytes; a GBIF {member} is far smaller")
    try:
        data = archive.read(member)
    except (zipfile.BadZipFile, zlib.error, OSError) as error:
        raise InputError(path, member, None, f"corrupt zip member: {error}") from None
    try:
        return ElementTree.fromstring(data)  # noqa: S314
    except ElementTree.ParseError as error:
        line, column = error.position
        raise InputError(
            path, f"{member} line {line} column {column}", None, f"malformed XML: {error}"
        ) from None


def _local(tag_or_term: str) -> str:
    """``{namespace}core`` → ``core``; ``http://rs.tdwg.org/dwc/terms/year`` → ``year``."""
    return re.split(r"[}/#]", tag_or_term)[-1]


def _unescape(value: str) -> str:
    """meta.xml writes control characters as escapes: ``\\t`` for a tab."""
    return value.replace("\\t", "\t").replace("\\n", "\n").replace("\\r", "\r")


def core_layout(path: Path, meta: ElementTree.Element) -> TableLayout:
    core = next((child for child in meta if _local(child.tag) == "core"), None)
    if core is None:
        raise InputError(path, "meta.xml", "core", "no <core> element")
    row_type = core.get("rowType", "")
    if row_type != OCCURRENCE_ROW_TYPE:
        raise InputError(path, "meta.xml", "rowType", f"core is {row_type!r}, not {OCCURRENCE_ROW_TYPE}")
    location = next((el.text for el in core.iter() if _local(el.tag) == "location" and el.text), None)
    if location is None:
        raise InputError(path, "meta.xml", "location", "the core names no file")
    columns: dict[int, str] = {}
    defaults: dict[str, str] = {}
    for field in (el for el in core if _local(el.tag) == "field"):
        # The core's <id> column is skipped: GBIF also lists it as the gbifID field, which is what we read.
        index = field.get("index")
        term = field.get("term")
        if term is None:
            raise InputError(path, "meta.xml", "field", f"a field without a term (index {index})")
        if index is None:
            defaults[_local(term)] = field.get("default", "")
        elif not index.isdigit():
            raise InputError(path, "meta.xml", _local(term), f"index {index!r} is not a column number")
        else:
            columns[int(index)] = _local(term)
    try:
        header_lines = int(core.get("ignoreHeaderLines", "0"))
    except ValueError:
        raise InputError(path, "meta.xml", "ignoreHeaderLines", "not a whole number") from None
    delimiter = _unescape(core.get("fieldsTerminatedBy", ","))
    quote = _unescape(core.get("fieldsEnclosedBy", '"')) or None
    if len(delimiter) != 1 or (quote is not None and len(quote) != 1):
        raise InputError(path, "meta.xml", "fieldsTerminatedBy", "delimiter and quote must be one character")
    return TableLayout(
        member=location,
        encoding=core.get("encoding", "UTF-8"),
        delimiter=delimiter,
        quote=quote,
        header_lines=header_lines,
        columns=columns,
        defaults=defaults,
    )


def _describe(
    path: Path, metadata: ElementTree.Element, key: str
) -> tuple[str, str | None, str | None, str | None]:
    """Download key, DOI, query and creation time from the EML GBIF writes as metadata.xml.

    GBIF has written these in several places over the years: the key in ``<citation identifier>`` (2014)
    or ``<alternateIdentifier>`` (2020 on); the DOI in the root's ``packageId`` and in ``<citation
    identifier>`` (2020 on) or an ``<alternateIdentifier>``. Each is taken from wherever it is.
    """
    texts: list[str] = [metadata.get("packageId", "")]
    created: str | None = None
    for element in metadata.iter():
        name = _local(element.tag)
        if name == "citation":
            texts.append(element.get("identifier", ""))
        elif name == "alternateIdentifier":
            texts.append((element.text or "").strip())
        elif name == "dateStamp" and created is None:
            created = _iso_utc((element.text or "").strip())
    for text in texts:
        if match := DOWNLOAD_KEY.fullmatch(text.strip()):
            key = match.group(0)
            break
    doi = next((_doi(text) for text in texts if _doi(text)), None)
    abstract = " ".join(
        "".join(element.itertext()) for element in metadata.iter() if _local(element.tag) == "abstract"
    )
    # GBIF's abstract: "... matching the query: {…}<br/>The dataset includes records from ..." (2014),
    # or the same without the <br/> (2020): the query ends where the list of constituent datasets begins.
    match = re.search(
        r"matching the query:\s*(.*?)\s*(?:<br\s*/?>|The dataset includes records|$)", abstract, re.DOTALL
    )
    query = (match.group(1).strip() or None) if match else None
    return key, doi, query, created or _created_from_key(key)


def _doi(text: str) -> str | None:
    text = text.strip()
    for prefix in (
        "https://doi.org/",
        "http://doi.org/",
        "http://dx.doi.org/",
        "https://dx.doi.org/",
        "doi:",
    ):
        text = text.removeprefix(prefix)
    return text if re.fullmatch(r"10\.\d{4,9}/\S+", text) else None


def _iso_utc(text: str) -> str | None:
    """An ISO 8601 date or date-time as ``YYYY-MM-DDTHH:MM:SSZ`` (UTC); None when it is neither."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _created_from_key(key: str) -> str | None:
    """When GBIF created the download, read off its key (``0009886-250127130748423``: 2025-01-27
    13:07:48 UTC); None for a name that is not GBIF's key."""
    if DOWNLOAD_KEY.fullmatch(key) is None:
        return None
    try:
        created = datetime.strptime(key.split("-")[1][:12], "%y%m%d%H%M%S").replace(tzinfo=UTC)
    except ValueError:
        return None
    return created.isoformat().replace("+00:00", "Z")


def _created_fallback(archive: zipfile.ZipFile, key: str) -> str | None:
    """The key's time, else the newest member's time in the zip's directory: never the clock, so the
    same download gives the same raw snapshot in any folder, on any day."""
    if created := _created_from_key(key):
        return created
    stamps = [info.date_time for info in archive.infolist()]
    if not stamps:
        return None
    return datetime(*max(stamps), tzinfo=UTC).isoformat().replace("+00:00", "Z")


def _key_from_name(path: Path) -> str:
    match = DOWNLOAD_KEY.search(path.stem)
    return match.group(0) if match else path.stem


# --- reading the records -------------------------------------------------------------------------------


@dataclass(frozen=True)
class DownloadRecord:
    """One checked record: its gbifID, the line it started on, its records-file line and what the index
    needs to file it under a species and count its quirks."""

    key: int
    line: int
    text: str
    taxon_keys: tuple[int | None, int | None, int | None]
    species: str
    country: str
    state_province: str
    absent: bool
    has_license: bool
    has_coordinates: bool
    zero_coordinates: bool
    license: str | None


@contextmanager
def open_member(info: DownloadInfo) -> Iterator[IO[bytes]]:
    """The download's core file, opened as a stream straight out of the zip."""
    if info.layout is None:
        raise InputError(info.path, "file", None, "no core file")
    archive = _open_zip(info.path)
    with archive:
        try:
            entry = archive.getinfo(info.layout.member)
        except KeyError:
            raise InputError(
                info.path, info.layout.member, None, "the file meta.xml names is not in the zip"
            ) from None
        # ISA-L's inflate when the member is plainly deflated (GBIF's are): the same bytes, checked the
        # same way, in less than half zipfile's CPU (zip_inflate says how much).
        inflated = open_inflated(info.path, entry)
        with inflated if inflated is not None else archive.open(entry) as member:
            yield cast(IO[bytes], member)  # both are binary streams read with read(n)


def read_records(info: DownloadInfo) -> Iterator[DownloadRecord]:
    """The download's records in file order, streamed from the zip; InputError names the zip, member,
    line and term of the first bad value (and the line reached when the zip's data itself is corrupt)."""
    layout = info.layout
    if layout is None:
        raise InputError(info.path, "file", None, "no core file")
    with open_member(info) as member:
        line = 0  # the last line read, named when the zip's data turns out corrupt
        encoding = layout.encoding.lower().replace("-", "")
        try:
            # utf-8-sig: a byte-order mark is an encoding artefact, not part of the first column's name.
            text = io.TextIOWrapper(
                io.BufferedReader(cast(io.RawIOBase, member), READ_BLOCK),
                encoding="utf-8-sig" if encoding == "utf8" else layout.encoding,
                newline="",
            )
        except LookupError:
            raise InputError(
                info.path, layout.member, "encoding", f"unknown encoding {layout.encoding!r}"
            ) from None
        positions = None if info.format == SIMPLE_CSV else _positions(info.path, layout)
        try:
            for line, row in _rows(info.path, text, layout):
                if positions is None:
                    # A simple CSV's first line names its columns.
                    layout = _with_header(layout, row)
                    positions = _positions(info.path, layout)
                    continue
                if line <= layout.header_lines or row == [] or row == [""]:
                    continue
                yield _checked(info.path, layout, positions, line, row)
        except (zipfile.BadZipFile, zlib.error, EOFError) as error:
            raise InputError(
                info.path, f"{layout.member} line {line + 1}", None, f"corrupt zip data: {error}"
            ) from None
        except UnicodeDecodeError as error:
            raise InputError(
                info.path,
                f"{layout.member} line {line + 1}",
                None,
                f"not valid {layout.encoding}: {error.reason}",
            ) from None


def _with_header(layout: TableLayout, header: list[str]) -> TableLayout:
    return TableLayout(layout.member, layout.encoding, layout.delimiter, None, 1, dict(enumerate(header)), {})


def _rows(path: Path, text: io.TextIOWrapper, layout: TableLayout) -> Iterator[tuple[int, list[str]]]:
    """(line number where the row starts, fields) for each row."""
    if layout.quote is None:
        # GBIF's own files: no quoting at all, so a row is a line and a split is exact (and fast).
        delimiter = layout.delimiter
        for number, line in enumerate(text, start=1):
            if "\x00" in line:
                raise InputError(path, f"{layout.member} line {number}", None, "NUL byte in a text file")
            yield number, line.rstrip("\r\n").split(delimiter)
        return
    reader = csv.reader(
        _no_nul(path, text, layout.member),
        delimiter=layout.delimiter,
        quotechar=layout.quote,
        quoting=csv.QUOTE_MINIMAL,
        strict=True,
    )
    start = 1
    try:
        for row in reader:
            yield start, row
            start = reader.line_num + 1
    except csv.Error as error:
        raise InputError(path, f"{layout.member} line {reader.line_num}", None, f"bad CSV: {error}") from None


def _no_nul(path: Path, text: Iterable[str], member: str) -> Iterator[str]:
    for number, line in enumerate(text, start=1):
        if "\x00" in line:
            raise InputError(path, f"{member} line {number}", None, "NUL byte in a text file")
        yield line


_KEPT = (
    "gbifID",
    *TEXT_TERMS,
    *INTEGER_TERMS,
    *(term for term, _ in COORDINATE_TERMS),
    *DECIMAL_TERMS,
    "issue",
)
# A count of individuals: a whole number, no sign, within bigint.
COUNT_TERM = "individualCount"
COUNT_PATTERN = r"[0-9]{1,18}"
# Text is trimmed, and so are the quality numbers (a space around a count or an uncertainty is no reason to
# refuse a download); the ids, years and coordinates, which decide where a record goes, are checked as they
# stand, by the rules every other reader applies.
_TRIMMED = frozenset((*TEXT_TERMS, COUNT_TERM, *DECIMAL_TERMS, "issue"))
_COUNT_TEXT = re.compile(COUNT_PATTERN)
_DECIMAL_TEXT = re.compile(DECIMAL_PATTERN)


def count_text_problem(text: str) -> str | None:
    """An optional count written as text: empty, or a whole number of at least 0."""
    if not text or _COUNT_TEXT.fullmatch(text):
        return None
    return f"expected a whole number >= 0, got {text[:40]!r}"


def measure_text_problem(text: str) -> str | None:
    """An optional decimal of ``DECIMAL_TERMS`` written as text: empty, or a number of at least 0, in the
    notation Python and PostgreSQL read alike (which keeps it finite)."""
    if not text or (_DECIMAL_TEXT.fullmatch(text) and float(text) >= 0):
        return None
    return f"expected a decimal number >= 0, got {text[:40]!r}"


@dataclass(frozen=True)
class _Positions:
    """Where each kept term sits in a row (None: not a column; meta.xml's default, if any, applies), and
    whether it is trimmed."""

    width: int
    terms: tuple[tuple[str, int | None, bool], ...]
    defaults: dict[str, str]


def _positions(path: Path, layout: TableLayout) -> _Positions:
    by_term: dict[str, int] = {}
    for index, term in sorted(layout.columns.items()):
        by_term.setdefault(term, index)
    if "gbifID" not in by_term:
        raise InputError(path, layout.member, "gbifID", "no gbifID column")
    return _Positions(
        width=max(layout.columns, default=-1) + 1,
        terms=tuple((term, by_term.get(term), term in _TRIMMED) for term in _KEPT),
        defaults={term: value.strip() for term, value in layout.defaults.items()},
    )


def _checked(
    path: Path, layout: TableLayout, positions: _Positions, line: int, row: list[str]
) -> DownloadRecord:
    """One row as a records-file line, refusing what derive would refuse later, by line and term."""
    if len(row) < positions.width:
        raise InputError(
            path,
            f"{layout.member} line {line}",
            None,
            f"{len(row)} fields, the layout names {positions.width}",
        )
    defaults = positions.defaults
    values = {
        term: (row[index].strip() if trimmed else row[index]) if index is not None else defaults.get(term, "")
        for term, index, trimmed in positions.terms
    }

    def fail(term: str, problem: str) -> InputError:
        return InputError(path, f"{layout.member} line {line}", term, problem)

    gbif_id = values["gbifID"]
    problem = gbif_id_text_problem(gbif_id)
    if problem:
        raise fail("gbifID", problem)
    key = int(gbif_id)
    fields = [str(key)]
    fields.extend(escape(values[term]) for term in TEXT_TERMS)
    integers: list[int | None] = []
    for term in INTEGER_TERMS:
        value = values[term]
        # The year's range is derive's to check: it refuses the species holding the record, not the download.
        if term == "year":
            problem = year_text_problem(value, in_range=False)
        elif term == COUNT_TERM:
            problem = count_text_problem(value)
        else:
            problem = whole_number_text_problem(value)
        if problem:
            raise fail(term, problem)
        integers.append(int(value) if value else None)
        fields.append(str(int(value)) if value else "")
    found = coordinate_texts_problem((term, values[term], limit) for term, limit in COORDINATE_TERMS)
    if found:
        raise fail(*found)
    numbers: list[float | None] = []
    for term, _ in COORDINATE_TERMS:
        value = values[term]
        number = float(value) if value else None
        numbers.append(number)
        fields.append("" if number is None else repr(number))
    for term in DECIMAL_TERMS:
        value = values[term]
        problem = measure_text_problem(value)
        if problem:
            raise fail(term, problem)
        fields.append(repr(float(value)) if value else "")
    issues = sorted(issue.strip() for issue in values["issue"].split(";") if issue.strip())
    fields.append(";".join(escape(issue) for issue in issues))
    license_name: str | None = None
    if values["license"]:
        try:
            license_name = normalize_license(values["license"])
        except ValueError as error:
            raise fail("license", str(error)) from None
    latitude, longitude = numbers
    return DownloadRecord(
        key=key,
        line=line,
        text="\t".join(fields) + "\n",
        taxon_keys=(integers[1], integers[2], integers[3]),
        species=values["species"],
        country=values["countryCode"],
        state_province=values["stateProvince"],
        absent=values["occurrenceStatus"].upper() == ABSENT,
        has_license=bool(values["license"]),
        has_coordinates=latitude is not None,
        zero_coordinates=published_at_zero(latitude, longitude, issues),
        license=license_name,
    )
