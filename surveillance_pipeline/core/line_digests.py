"""What a partition was made from, line by line: a digest of each record's line, kept beside the data so
that the next load reads in only the records whose line changed. Dagster-free.

A record-level delta (record_delta.py) must find the records that changed since the held rows were made.
Copying every record in and comparing it with its held row costs a full reload's reading; for some
10,000 changed records of the bench's 1M-record download a month later, `occurrence_quality` spent 2.9 s
of COPY and 4.9 s of comparison in PostgreSQL's log (2026-12-07). So a load keeps, in a memo, every
record's gbifID and a 64-bit BLAKE2b digest of its line (a records file's or a derived file's line, or a
search answer's record as canonical JSON), with the sha256 of the file the lines came from. The next load
digests its own lines, reads in only those whose digest the memo lacks, and names the records whose line
went.

A memo is used only where the file it names is the one the held rows' key names: then it lists exactly
the lines those rows were made from. One missing, damaged, or made from another file costs the comparison
of every record, never a wrong row; ``make repair`` trusts none.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from surveillance_pipeline.core.partition_files import replace_file

if TYPE_CHECKING:
    import numpy as np
# numpy is imported where it is used: loading the definitions must not import it (test_lazy_modules.py).

# Bump when what a line's digest covers changes: a memo of another version is not read.
LINE_DIGESTS_VERSION = 1
# What the lines are: a records file's lines as they are, a search answer's records as canonical JSON, a
# derived file's CSV lines (the same record digests differently in each, so a memo of one kind says
# nothing of another).
RECORDS_FILE_LINES = "records_file"
SEARCH_RECORDS = "search"
DERIVED_CSV_LINES = "derived_csv"
DIGEST_BYTES = 8


@dataclass(frozen=True)
class KeptLines:
    """The records of one file: gbifIDs and their lines' digests, in the file's order."""

    source_sha256: str
    kind: str
    ids: np.ndarray  # int64
    digests: np.ndarray  # uint64

    def ids_unique(self) -> bool:
        """Whether no gbifID is on two lines. A line's digest names its record only when its id is on no
        other: a file with an id twice is never read by its changed lines alone (a full reload refuses
        it at the partition's primary key), nor kept. (Asked by the writer and the load alike: sorted
        once.)"""
        return self._ids_unique

    @cached_property
    def _ids_unique(self) -> bool:
        import numpy as np

        return len(np.unique(self.ids)) == len(self.ids)

    def gone_ids(self, later: KeptLines) -> np.ndarray:
        """The records these lines hold that ``later``'s lack."""
        import numpy as np

        gone: np.ndarray = self.ids[~np.isin(self.ids, later.ids)]
        return gone


class LineDigests:
    """Digests gathered line by line (bytes), then frozen into KeptLines."""

    def __init__(self) -> None:
        self._ids: list[int] = []
        self._digests: list[bytes] = []

    def add(self, record_id: int, line: bytes) -> bytes:
        digest = hashlib.blake2b(line, digest_size=DIGEST_BYTES).digest()
        self._ids.append(record_id)
        self._digests.append(digest)
        return digest

    def add_lines(self, lines: list[bytes], separator: bytes = b"\t") -> np.ndarray:
        """Lines that start with their gbifID, up to ``separator``: their digests, as uint64."""
        import numpy as np

        blake2b = hashlib.blake2b
        digests = b"".join([blake2b(line, digest_size=DIGEST_BYTES).digest() for line in lines])
        self._ids.extend(int(line[: line.index(separator)]) for line in lines)
        self._digests.append(digests)
        return np.frombuffer(digests, dtype="<u8")

    def lines(self, source_sha256: str, kind: str) -> KeptLines:
        import numpy as np

        return KeptLines(
            source_sha256,
            kind,
            np.array(self._ids, dtype=np.int64),
            np.frombuffer(b"".join(self._digests), dtype="<u8"),
        )


def search_line(row: Iterable[str | None]) -> bytes:
    """A search answer's record, as the fields copied, in a form whose digest names them unambiguously."""
    return json.dumps(list(row), separators=(",", ":"), ensure_ascii=False).encode()


def lines_of_block(block: bytes, carried: bytes) -> tuple[list[bytes], bytes]:
    """The whole lines of ``carried`` + ``block`` (without their newlines), and what follows the last."""
    lines = (carried + block).split(b"\n")
    return lines[:-1], lines[-1]


class KeptDigests:
    """The digests a memo holds, sorted, to tell a line copied before from a changed one."""

    def __init__(self, kept: KeptLines) -> None:
        import numpy as np

        self._sorted = np.sort(kept.digests)

    def unseen(self, digests: np.ndarray) -> np.ndarray:
        """Per digest, whether the kept lines lack it."""
        import numpy as np

        if len(self._sorted) == 0:
            return np.ones(len(digests), dtype=bool)
        at = np.searchsorted(self._sorted, digests)
        found: np.ndarray = self._sorted[np.minimum(at, len(self._sorted) - 1)] == digests
        return ~found

    def unseen_one(self, digest: bytes) -> bool:
        """Whether the kept lines lack this one digest (8 bytes)."""
        import numpy as np

        return bool(self.unseen(np.frombuffer(digest, dtype="<u8"))[0])


def read_kept_lines(path: Path, *, source_sha256: str, kind: str) -> KeptLines | None:
    """The lines kept at ``path`` when they are of ``kind`` and were made from the file ``source_sha256``;
    None when missing, damaged, or of another file or kind."""
    import numpy as np

    try:
        data = path.read_bytes()
        line, _, body = data.partition(b"\n")
        header = json.loads(line)
        expected = {"version": LINE_DIGESTS_VERSION, "kind": kind, "source_sha256": source_sha256}
        if not isinstance(header, dict) or any(header.get(name) != value for name, value in expected.items()):
            return None
        if hashlib.sha256(body).hexdigest() != header.get("sha256"):
            return None
        records = int(header["records"])
        ids = np.frombuffer(body, dtype="<i8", count=records)
        digests = np.frombuffer(body, dtype="<u8", offset=8 * records, count=records)
    except (OSError, ValueError, TypeError, KeyError):
        return None
    kept = KeptLines(source_sha256, kind, ids, digests)
    return kept if kept.ids_unique() else None


def write_kept_lines(path: Path, lines: KeptLines) -> None:
    """Keep ``lines`` at ``path`` for the next load; lines with a gbifID twice are not kept (any memo
    there goes: it names another file)."""
    if not lines.ids_unique():
        path.unlink(missing_ok=True)
        return
    body = lines.ids.astype("<i8").tobytes() + lines.digests.astype("<u8").tobytes()
    header = {
        "version": LINE_DIGESTS_VERSION,
        "kind": lines.kind,
        "source_sha256": lines.source_sha256,
        "records": len(lines.ids),
        "sha256": hashlib.sha256(body).hexdigest(),
    }
    replace_file(path, json.dumps(header, sort_keys=True).encode() + b"\n" + body)


def changed_rows(
    rows: Iterator[list[str | None]], digests: LineDigests, kept: KeptDigests | None
) -> Iterator[list[str | None]]:
    """A search answer's rows (gbifID first) whose line the kept ones lack (every row without ``kept``),
    each digested into ``digests`` on the way."""
    for row in rows:
        digest = digests.add(int(str(row[0])), search_line(row))
        if kept is None or kept.unseen_one(digest):
            yield row
