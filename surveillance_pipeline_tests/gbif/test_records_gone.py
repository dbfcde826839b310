"""records_gone: the records of an older download of a query that the newer one lacks, counted by a walk
over both parts' gbifIDs in blocks, as the merge of their lines counts them."""

from __future__ import annotations

import random

import pytest

from surveillance_pipeline.core.errors import StaleInputError
from surveillance_pipeline.gbif import download_index
from surveillance_pipeline.gbif.download_index import SpeciesPart, keys_missing_from
from surveillance_pipeline.gbif.records import RecordsWriter


def _part(path, keys) -> SpeciesPart:
    with RecordsWriter(path) as writer:
        writer.write_lines(f"{key}\tSarcophilus harrisii\t{key % 97}\n" for key in sorted(keys))
        sha256 = writer.commit()
    return SpeciesPart(len(keys), sha256, path)


def test_the_ids_an_older_part_has_and_the_newer_lacks_are_counted_across_blocks(tmp_path, monkeypatch):
    # Blocks of about 40 lines: ids gone, kept and new fall on both sides of every block's end.
    monkeypatch.setattr(download_index, "KEY_CHUNK_BYTES", 1024)
    draw = random.Random(20261206)
    older = set(draw.sample(range(1, 10**12), 5000))
    gone = set(draw.sample(sorted(older), 137))
    newer = (older - gone) | set(draw.sample(range(10**12, 2 * 10**12), 211))
    older_part, newer_part = _part(tmp_path / "older.gz", older), _part(tmp_path / "newer.gz", newer)
    assert keys_missing_from(older_part, newer_part) == len(gone)
    assert keys_missing_from(newer_part, older_part) == 211
    assert keys_missing_from(older_part, None) == 5000  # the species vanished from the newer download
    assert keys_missing_from(older_part, _part(tmp_path / "same.gz", older)) == 0


def test_a_part_edited_since_its_index_is_refused(tmp_path):
    part = _part(tmp_path / "older.gz", {1, 2, 3})
    edited = SpeciesPart(part.records, "0" * 64, part.path)
    with pytest.raises(StaleInputError, match="its index recorded"):
        keys_missing_from(edited, part)
