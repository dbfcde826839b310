"""GBIF downloads: a Darwin Core Archive or a simple-CSV zip, read into records shaped like search results.

A user who needs more than occurrence search serves (100,000 records) requests a download from GBIF and
drops the zip in ``data/downloads/``. Its records then take the same road as searched ones: a raw snapshot
per species, the same derive rules, the same ``occurrences`` table. What differs is only how the file is read:

- a DwC-A names its core file, delimiter, quote character, encoding, header lines and the term of every
  column in ``meta.xml``; nothing here assumes a column position;
- a simple CSV is one tab-separated UTF-8 file with a header of term names and no quoting.

Records become dicts with occurrence search's field names and types (``key``, ``year`` as int, coordinates as
floats, ``issues`` as a list), so derive cannot tell a download from a search. Bad values are refused here,
naming the zip, the member file, the line and the term. Dagster-free.
"""

from __future__ import annotations

import csv
import io
import math
import re
import xml.etree.ElementTree as ElementTree  # noqa: S405 - see _parse_xml for why plain expat is safe here
import zipfile
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import Any

from surveillance_pipeline.core.errors import InputError
from surveillance_pipeline.core.keys import canonical_json, sha256_file, sha256_hex
from surveillance_pipeline.gbif.registry import DOWNLOAD_ENDPOINT, TAXON_KEY_FIELDS, Species
from surveillance_pipeline.occurrences.derive import MAX_GBIF_ID, ZERO_COORDINATE
from surveillance_pipeline.occurrences.licenses import normalize_license

DOWNLOAD_SOURCE = "download"
DWCA = "DWCA"
SIMPLE_CSV = "SIMPLE_CSV"
OCCURRENCE_ROW_TYPE = "http://rs.tdwg.org/dwc/terms/Occurrence"
# GBIF download keys: a sequence number and a creation timestamp, so they sort by age.
DOWNLOAD_KEY = re.compile(r"\d{7}-\d{15}")
# meta.xml and metadata.xml are a few tens of kB; anything far larger is not a GBIF download.
MAX_XML_BYTES = 4 << 20

# The occurrence-search fields a record keeps, by type. Everything else in a download is left out: derive
# reads only these, and a smaller raw snapshot is cheaper to hash and compare.
TEXT_TERMS = (
    "basisOfRecord",
    "countryCode",
    "datasetKey",
    "eventDate",
    "license",
    "locality",
    "occurrenceStatus",
    "scientificName",
    "species",
    "stateProvince",
    "taxonRank",
)
INTEGER_TERMS = ("year", "taxonKey", "speciesKey", "acceptedTaxonKey")
COORDINATE_TERMS = (("decimalLatitude", 90.0), ("decimalLongitude", 180.0))


@dataclass(frozen=True)
class GbifDownload:
    """One download zip: what GBIF says it is, its sha256, and its records sorted by gbifID."""

    path: Path
    key: str
    format: str
    doi: str | None
    query: str | None
    sha256: str
    records: tuple[dict[str, Any], ...]

    def identity(self) -> dict[str, Any]:
        """What a raw snapshot records as the request: which download, of what query, which bytes."""
        return {
            "doi": self.doi,
            "format": self.format,
            "key": self.key,
            "query": self.query,
            "sha256": self.sha256,
        }

    def created(self) -> str | None:
        """When GBIF created the download, read off its key (``0009886-250127130748423``: 2025-01-27
        13:07:48 UTC); None for a file whose key is not GBIF's."""
        match = DOWNLOAD_KEY.fullmatch(self.key)
        if match is None:
            return None
        stamp = self.key.split("-")[1][:12]
        try:
            created = datetime.strptime(stamp, "%y%m%d%H%M%S").replace(tzinfo=UTC)
        except ValueError:
            return None
        return created.isoformat().replace("+00:00", "Z")

    def records_of(self, species: Species) -> list[dict[str, Any]]:
        """The records of one registry species, in key order (through an index built once per download:
        ingest asks for every species, and a download can hold millions of records)."""
        if species.taxon_key is not None:
            found = {
                r["key"]: r
                for name in TAXON_KEY_FIELDS
                for r in self._by_key.get((name, species.taxon_key), ())
            }
            return [found[key] for key in sorted(found)]
        return list(self._by_key.get(("species", species.scientific_name), ()))

    @cached_property
    def _by_key(self) -> dict[tuple[str, Any], list[dict[str, Any]]]:
        index: dict[tuple[str, Any], list[dict[str, Any]]] = defaultdict(list)
        for record in self.records:
            for name in (*TAXON_KEY_FIELDS, "species"):
                if name in record:
                    index[name, record[name]].append(record)
        return index

    def counts(self) -> dict[str, int]:
        """The quirks a user should see before trusting a download (reported when it is observed)."""
        counts = Counter[str]()
        for record in self.records:
            counts["records"] += 1
            # GBIF fills ``species`` only for records identified to species rank or below.
            counts["above_species_rank"] += "species" not in record
            counts["no_license"] += "license" not in record
            counts["no_coordinates"] += "decimalLatitude" not in record
            counts["zero_coordinates"] += _is_zero(record)
        return {name: counts[name] for name in sorted(counts)}

    def licenses(self) -> dict[str, int]:
        counts = Counter(normalize_license(record.get("license")) or "none" for record in self.records)
        return dict(sorted(counts.items()))


def _is_zero(record: dict[str, Any]) -> bool:
    at_origin = record.get("decimalLatitude") == 0 and record.get("decimalLongitude") == 0
    return at_origin or ZERO_COORDINATE in record.get("issues", ())


def download_files(folder: Path) -> list[Path]:
    """The zips in the downloads folder, by name. Anything else there is ignored (a README, say)."""
    if not folder.is_dir():
        return []
    return sorted(path for path in folder.iterdir() if path.suffix == ".zip" and path.is_file())


def read_downloads(folder: Path) -> tuple[GbifDownload, ...]:
    """Every download in the folder, oldest GBIF key first."""
    downloads = [read_download(path) for path in download_files(folder)]
    return tuple(sorted(downloads, key=lambda download: download.key))


def downloads_version(downloads: Iterable[GbifDownload]) -> str:
    """One sha256 for the folder's downloads: their names and bytes, by name."""
    listing = sorted((download.path.name, download.sha256) for download in downloads)
    return sha256_hex(canonical_json(listing).encode("utf-8"))


def read_download(path: Path) -> GbifDownload:
    """Read a DwC-A or simple-CSV zip; InputError names the zip, member, line and term of a bad value."""
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as error:
        raise InputError(path, "file", None, f"not a readable zip: {error}") from None
    with archive:
        names = archive.namelist()
        if "meta.xml" in names:
            return _read_dwca(path, archive)
        csv_members = [name for name in names if name.endswith(".csv")]
        if len(csv_members) == 1:
            return _read_simple_csv(path, archive, csv_members[0])
        raise InputError(
            path,
            "file",
            None,
            "neither a Darwin Core Archive (no meta.xml) nor a simple-CSV download (one .csv member); "
            f"members: {', '.join(names[:5]) or 'none'}",
        )


@dataclass(frozen=True)
class _TableLayout:
    """How one delimited file is written, as meta.xml describes it."""

    member: str
    encoding: str
    delimiter: str
    quote: str | None
    header_lines: int
    # column index -> term name; plus terms with a constant default (meta.xml field without an index)
    columns: dict[int, str]
    defaults: dict[str, str]


def _read_simple_csv(path: Path, archive: zipfile.ZipFile, member: str) -> GbifDownload:
    # GBIF's simple CSV: tab-separated, UTF-8, one header line of term names, no quoting at all.
    text = _member_text(path, archive, member, "utf-8")
    header = text.split("\n", 1)[0].rstrip("\r")
    layout = _TableLayout(
        member=member,
        encoding="utf-8",
        delimiter="\t",
        quote=None,
        header_lines=1,
        columns=dict(enumerate(header.split("\t"))),
        defaults={},
    )
    records = _parse_records(path, text, layout)
    return GbifDownload(path, _key_from_name(path), SIMPLE_CSV, None, None, sha256_file(path), records)


def _read_dwca(path: Path, archive: zipfile.ZipFile) -> GbifDownload:
    layout = _core_layout(path, _parse_xml(path, archive, "meta.xml"))
    key, doi, query = _key_from_name(path), None, None
    if "metadata.xml" in archive.namelist():
        key, doi, query = _describe(path, _parse_xml(path, archive, "metadata.xml"), key)
    records = _parse_records(path, _member_text(path, archive, layout.member, layout.encoding), layout)
    return GbifDownload(path, key, DWCA, doi, query, sha256_file(path), records)


def _parse_xml(path: Path, archive: zipfile.ZipFile, member: str) -> ElementTree.Element:
    # Python 3.11's bundled expat never fetches external entities and refuses billion-laughs style
    # expansion; with the size cap that is enough for a file the user downloaded from GBIF.
    info = archive.getinfo(member)
    if info.file_size > MAX_XML_BYTES:
        raise InputError(path, member, None, f"{info.file_size} bytes; a GBIF {member} is far smaller")
    try:
        return ElementTree.fromstring(archive.read(member))  # noqa: S314
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


def _core_layout(path: Path, meta: ElementTree.Element) -> _TableLayout:
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
    for field in (el for el in core if _local(el.tag) in ("field", "id")):
        index = field.get("index")
        term = field.get("term")
        if _local(field.tag) == "id":
            # The core id column; GBIF also lists it as the gbifID field, which is what we read.
            continue
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
    return _TableLayout(
        member=location,
        encoding=core.get("encoding", "UTF-8"),
        delimiter=delimiter,
        quote=quote,
        header_lines=header_lines,
        columns=columns,
        defaults=defaults,
    )


def _describe(path: Path, metadata: ElementTree.Element, key: str) -> tuple[str, str | None, str | None]:
    """Download key, DOI and query from the EML GBIF writes as metadata.xml."""
    for element in metadata.iter():
        name = _local(element.tag)
        if name == "citation" and DOWNLOAD_KEY.fullmatch(element.get("identifier", "")):
            key = element.get("identifier", key)
    doi = next(
        (
            text.strip().removeprefix("https://doi.org/").removeprefix("doi:")
            for element in metadata.iter()
            if _local(element.tag) == "alternateIdentifier" and (text := element.text or "").strip()
            if "10." in text
        ),
        None,
    )
    abstract = " ".join(
        "".join(element.itertext()) for element in metadata.iter() if _local(element.tag) == "abstract"
    )
    # GBIF's abstract: "... matching the query: {…}<br/>The dataset includes records from ..."
    match = re.search(r"matching the query:\s*(.*?)\s*(?:<br\s*/?>|$)", abstract, re.DOTALL)
    return key, doi, (match.group(1).strip() or None) if match else None


def _key_from_name(path: Path) -> str:
    match = DOWNLOAD_KEY.search(path.stem)
    return match.group(0) if match else path.stem


def _member_text(path: Path, archive: zipfile.ZipFile, member: str, encoding: str) -> str:
    try:
        data = archive.read(member)
    except KeyError:
        raise InputError(path, member, None, "the file meta.xml names is not in the zip") from None
    try:
        # utf-8-sig: a byte-order mark is an encoding artefact, not part of the first column's name.
        return data.decode("utf-8-sig" if encoding.lower().replace("-", "") == "utf8" else encoding)
    except LookupError:
        raise InputError(path, member, "encoding", f"unknown encoding {encoding!r}") from None
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise InputError(
            path, f"{member} line {line}", None, f"not valid {encoding}: {error.reason}"
        ) from None


def _parse_records(path: Path, text: str, layout: _TableLayout) -> tuple[dict[str, Any], ...]:
    if "\x00" in text:
        line = text[: text.index("\x00")].count("\n") + 1
        raise InputError(path, f"{layout.member} line {line}", None, "NUL byte in a text file")
    reader = csv.reader(
        io.StringIO(text, newline=""),
        delimiter=layout.delimiter,
        quotechar=layout.quote or '"',
        quoting=csv.QUOTE_MINIMAL if layout.quote else csv.QUOTE_NONE,
        strict=True,
    )
    width = max(layout.columns, default=-1) + 1
    if "gbifID" not in layout.columns.values():
        raise InputError(path, layout.member, "gbifID", "no gbifID column")
    records: dict[int, dict[str, Any]] = {}
    first_line: dict[int, int] = {}
    line = 0
    try:
        for row_number, row in enumerate(reader):
            start, line = line + 1, reader.line_num
            if row_number < layout.header_lines or row == []:
                continue
            where = f"{layout.member} line {start}"
            if len(row) < width:
                raise InputError(path, where, None, f"{len(row)} fields, the layout names {width}")
            values = dict(layout.defaults)
            values.update((term, row[index]) for index, term in layout.columns.items())
            record = _record(values, path, where)
            key = record["key"]
            if key in records:
                raise InputError(
                    path, where, "gbifID", f"duplicate id {key}, first at line {first_line[key]}"
                )
            records[key], first_line[key] = record, start
    except csv.Error as error:
        raise InputError(path, f"{layout.member} line {reader.line_num}", None, f"bad CSV: {error}") from None
    return tuple(records[key] for key in sorted(records))


def _record(values: dict[str, str], path: Path, where: str) -> dict[str, Any]:
    """One row as an occurrence-search record; empty fields are left out, as the API leaves them out."""
    gbif_id = values.get("gbifID", "").strip()
    if not gbif_id.isdigit() or not 0 < int(gbif_id) <= MAX_GBIF_ID:
        raise InputError(path, where, "gbifID", f"expected an id in 1..{MAX_GBIF_ID}, got {gbif_id[:40]!r}")
    record: dict[str, Any] = {"key": int(gbif_id)}
    for term in TEXT_TERMS:
        if value := values.get(term, "").strip():
            record[term] = value
    for term in INTEGER_TERMS:
        if value := values.get(term, "").strip():
            if not re.fullmatch(r"-?\d{1,18}", value):
                raise InputError(path, where, term, f"expected a whole number, got {value[:40]!r}")
            record[term] = int(value)
    for term, limit in COORDINATE_TERMS:
        if value := values.get(term, "").strip():
            try:
                number = float(value)
            except ValueError:
                raise InputError(path, where, term, f"expected a number, got {value[:40]!r}") from None
            if not math.isfinite(number) or not -limit <= number <= limit:
                raise InputError(
                    path, where, term, f"{value[:40]!r} is not a number in -{limit:g}..{limit:g}"
                )
            record[term] = number
    if issues := [issue for issue in values.get("issue", "").split(";") if issue.strip()]:
        record["issues"] = sorted(issue.strip() for issue in issues)
    if "license" in record:
        try:
            normalize_license(record["license"])
        except ValueError as error:
            raise InputError(path, where, "license", str(error)) from None
    return record


def species_records(
    downloads: Iterable[GbifDownload], species: Species
) -> tuple[list[dict[str, Any]], list[GbifDownload]]:
    """The species' records over all downloads, and the downloads that held any.

    A record in two downloads is taken from the newer one (GBIF keys sort by creation time): GBIF's
    interpretation of a record changes between downloads and the newer one is the better reading.
    """
    chosen: dict[int, dict[str, Any]] = {}
    sources: list[GbifDownload] = []
    for download in sorted(downloads, key=lambda download: download.key):
        matching = download.records_of(species)
        if matching:
            sources.append(download)
        chosen.update((record["key"], record) for record in matching)
    return [chosen[key] for key in sorted(chosen)], sources


def download_request(species: Species, sources: Iterable[GbifDownload]) -> dict[str, Any]:
    """The raw snapshot's request for a species read from downloads: which downloads, which taxon."""
    return {
        "endpoint": DOWNLOAD_ENDPOINT,
        "downloads": [download.identity() for download in sources],
        "taxon": species.taxon_filter(),
    }
