"""The columnar derive: a records file (``gbif.records``) to derived-CSV bytes a block at a time.

A species read from GBIF downloads can hold millions of records, and deriving them one Python dict at a
time (``derive._row``) cost some 35 µs a record: most of gbif_derived and of occurrences' check. Here the
gzip'd TSV is parsed by pyarrow's streaming CSV reader and each block is checked and written as whole
columns. Only what Python must decide exactly is left to Python, once per *distinct* value: a license's
short name (``normalize_license``), a coordinate's shortest round-trip text (``repr(float(text))``) and,
for the few records whose issues mention it, whether ZERO_COORDINATE is one of them.

It writes the bytes the row derive writes, or raises ``ColumnarUnavailable`` (a value it does not take:
a backslash escape, a year out of range, keys out of order, a record of another taxon...): the caller
then derives with the row code, which takes every file and names the record and the field of a bad
value. Dagster-free.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from surveillance_pipeline.core.lazy_modules import LazyModule
from surveillance_pipeline.gbif.download_columns import joined_lines
from surveillance_pipeline.gbif.licenses import normalize_license
from surveillance_pipeline.gbif.records import (
    RECORD_COLUMNS,
    RECORDS_READ_ERRORS,
    HashingReader,
    open_records_stream,
    unescape,
)
from surveillance_pipeline.gbif.registry import TAXON_KEY_FIELDS, Species
from surveillance_pipeline.gbif.rules import COORDINATE_TERMS, YEAR_RANGE, ZERO_COORDINATE

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
READ_BYTES = 1 << 20
_COLUMNS = ("key", "year", *TAXON_KEY_FIELDS, "species", "license", "issues")
_COORDINATES = tuple(term for term, _ in COORDINATE_TERMS)


class ColumnarUnavailable(Exception):
    """This records file (or one of its values) is for the row derive."""


def derived_blocks(
    records_path: Path, expected_sha256: str | None, species: Species, counts: dict[str, int]
) -> Iterator[bytes]:
    """The derived CSV's bytes (header first), block by block; fills ``counts`` (and ``counts["rows"]``)
    as the row derive does. At the end the records file's sha256 must be ``expected_sha256``, else
    ColumnarUnavailable (the row derive then says the file was replaced)."""
    digest = hashlib.sha256()
    try:
        handle = records_path.open("rb")
    except OSError as error:
        raise ColumnarUnavailable(str(error)) from None
    previous = 0
    rows = 0
    with handle:
        hashing = HashingReader(handle, digest)
        try:
            with open_records_stream(hashing) as unzipped:
                reader = pa_csv.open_csv(
                    unzipped,
                    read_options=pa_csv.ReadOptions(
                        column_names=list(RECORD_COLUMNS), block_size=BLOCK_BYTES, use_threads=True
                    ),
                    parse_options=pa_csv.ParseOptions(
                        delimiter="\t", quote_char=False, newlines_in_values=False, ignore_empty_lines=False
                    ),
                    convert_options=pa_csv.ConvertOptions(
                        include_columns=[*_COLUMNS, *_COORDINATES],
                        column_types={name: pa.string() for name in (*_COLUMNS, *_COORDINATES)},
                        strings_can_be_null=False,
                        quoted_strings_can_be_null=False,
                    ),
                )
                yield (b"id,year,longitude,latitude,license\n")
                for batch in reader:
                    if not batch.num_rows:
                        continue
                    block, last = _derived_block(batch, species, counts, previous)
                    previous = last
                    rows += batch.num_rows
                    yield block
        except RECORDS_READ_ERRORS as error:
            raise ColumnarUnavailable(str(error)) from None
        except (pa.ArrowException, ValueError) as error:
            raise ColumnarUnavailable(str(error)) from None
        while data := handle.read(READ_BYTES):
            digest.update(data)
    if expected_sha256 is not None and digest.hexdigest() != expected_sha256:
        raise ColumnarUnavailable("not the records file its raw snapshot names")
    counts["rows"] = rows


def _derived_block(
    batch: pa.RecordBatch, species: Species, counts: dict[str, int], previous: int
) -> tuple[bytes, int]:
    column = {name: batch.column(name) for name in batch.schema.names}
    keys = pc.cast(column["key"], pa.int64()).to_numpy()
    # Strictly increasing from the previous block on (so from 1 up); the cast refuses ids past int64.
    if keys[0] <= previous or not bool(np.all(keys[1:] > keys[:-1])):
        raise ColumnarUnavailable("gbifIDs out of order or repeated")
    _check_taxon(column, species)
    year_text = column["year"]
    year_filled = pc.not_equal(year_text, "")
    years = pc.cast(pc.if_else(year_filled, year_text, pa.scalar(None, pa.string())), pa.int64())
    if not _all(
        pc.fill_null(
            pc.and_(pc.greater_equal(years, YEAR_RANGE[0]), pc.less_equal(years, YEAR_RANGE[1])), True
        )
    ):
        raise ColumnarUnavailable("a year out of range")
    latitude_text, longitude_text = (column[term] for term in _COORDINATES)
    latitude_filled = pc.not_equal(latitude_text, "")
    if not _all(pc.equal(latitude_filled, pc.not_equal(longitude_text, ""))):
        raise ColumnarUnavailable("one coordinate without the other")
    latitude, latitude_repr = _coordinate(latitude_text, COORDINATE_TERMS[0][1])
    longitude, longitude_repr = _coordinate(longitude_text, COORDINATE_TERMS[1][1])
    at_origin = pc.fill_null(pc.and_(pc.equal(latitude, 0.0), pc.equal(longitude, 0.0)), False)
    zero = pc.and_(latitude_filled, pc.or_(at_origin, _flagged_zero(column["issues"])))
    placed = pc.and_(latitude_filled, pc.invert(zero))
    licenses = _licenses(column["license"])
    rows = batch.num_rows
    counts["no_year"] += rows - _sum(year_filled)
    counts["no_coordinates"] += rows - _sum(latitude_filled)
    counts["zero_coordinates"] += _sum(zero)
    counts["no_license"] += _sum(pc.equal(licenses, ""))
    empty = pa.scalar("", pa.string())
    lines = pc.binary_join_element_wise(
        pc.cast(pc.cast(column["key"], pa.int64()), pa.string()),
        pc.fill_null(pc.cast(years, pa.string()), ""),
        pc.if_else(placed, longitude_repr, empty),
        pc.if_else(placed, latitude_repr, empty),
        licenses,
        ",",
    )
    return joined_lines(lines), int(keys[-1])


def _check_taxon(column: dict[str, pa.Array], species: Species) -> None:
    """Every record is of the species' taxon, as ``Species.matches`` says (a backslash: the row derive)."""
    if species.taxon_key is not None:
        match = None
        for name in TAXON_KEY_FIELDS:
            text = column[name]
            if not _all(pc.or_(pc.equal(text, ""), pc.match_substring_regex(text, r"^-?[0-9]{1,18}$"))):
                raise ColumnarUnavailable(f"a {name} that is not a whole number")
            number = pc.cast(pc.if_else(pc.equal(text, ""), pa.scalar(None, pa.string()), text), pa.int64())
            hit = pc.fill_null(pc.equal(number, species.taxon_key), False)
            match = hit if match is None else pc.or_(match, hit)
    else:
        text = column["species"]
        if _any(pc.match_substring(text, "\\")):
            raise ColumnarUnavailable("an escaped species name")
        match = pc.equal(text, species.scientific_name)
    if not _all(match):
        raise ColumnarUnavailable("a record of another taxon")


def _coordinate(text: pa.Array, limit: float) -> tuple[pa.Array, pa.Array]:
    """The coordinate as a double (null when empty) and as Python's shortest round-trip text
    (``repr(float(text))``, as the row derive writes it).

    pyarrow writes the same shortest digits as ``repr`` but spells some numbers otherwise: a whole number
    without its ".0", and under 1e-4 no exponent ("0.00001" for repr's "1e-05"). Those few are written
    by ``repr`` itself; the rest are taken as pyarrow wrote them.
    """
    filled = pc.not_equal(text, "")
    number = pc.cast(pc.if_else(filled, text, pa.scalar(None, pa.string())), pa.float64())
    # NaN compares false and so is refused here too; the row derive then names it.
    if not _all(pc.fill_null(pc.less_equal(pc.abs(number), limit), True)):
        raise ColumnarUnavailable("a coordinate out of range or not finite")
    written = pc.fill_null(pc.cast(number, pa.string()), "")
    plain = pc.and_(
        pc.match_substring_regex(written, r"^-?[0-9]+\.[0-9]+$"),
        pc.greater_equal(pc.abs(number), 1e-4),
    )
    odd = pc.and_(filled, pc.invert(pc.fill_null(plain, False)))
    if _any(odd):
        spelled = [repr(value) for value in pc.filter(number, odd).to_pylist()]
        written = pc.replace_with_mask(written, odd, pa.array(spelled, pa.string()))
    return number, written


def _flagged_zero(issues: pa.Array) -> pa.Array:
    """Whether ZERO_COORDINATE is one of a record's issues, split and trimmed as ``record_from_fields``
    does; only the records whose issues mention it at all are looked at in Python."""
    mentioned = pc.match_substring(issues, ZERO_COORDINATE)
    if not _any(mentioned):
        return mentioned
    flagged = [
        bool(text) and ZERO_COORDINATE in {unescape(issue).strip() for issue in text.split(";")}
        for text in pc.if_else(mentioned, issues, "").to_pylist()
    ]
    return pa.array(flagged, pa.bool_())


def _licenses(text: pa.Array) -> pa.Array:
    """Each record's license as its short name ("" for none), normalized once per distinct value."""
    encoded = pc.dictionary_encode(text)
    names: list[str] = []
    for value in encoded.dictionary.to_pylist():
        try:
            names.append((normalize_license(unescape(value)) if value else None) or "")
        except ValueError:
            raise ColumnarUnavailable("an unknown license") from None
    return pc.take(pa.array(names, pa.string()), encoded.indices)


def _all(mask: Any) -> bool:
    return bool(pc.all(mask).as_py())


def _any(mask: Any) -> bool:
    return bool(pc.any(mask).as_py())


def _sum(mask: pa.Array) -> int:
    return int(pc.sum(pc.cast(mask, pa.int64())).as_py() or 0)
