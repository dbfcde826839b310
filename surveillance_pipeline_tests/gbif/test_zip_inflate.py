"""ISA-L's inflate gives a zip member's bytes exactly as zipfile does, and fails where zipfile fails."""

from __future__ import annotations

import io
import random
import zipfile
from pathlib import Path

import pytest

from surveillance_pipeline.gbif import zip_inflate
from surveillance_pipeline.gbif.zip_inflate import open_inflated


def member_bytes(seed: int, size: int, run: int = 3 << 20) -> bytes:
    """GBIF-like lines, plus a long run of one byte: it inflates far past one read, so the stream has to
    keep what it did not yet give out."""
    rng = random.Random(seed)  # seeded: the same member every run
    lines = [
        f"{rng.randrange(10**9, 10**10)}\tSarcophilus harrisii\t{rng.uniform(-44, -40):.6f}\t\t\tCC_BY_4_0\n"
        for _ in range(size)
    ]
    return "".join(lines).encode("utf-8") + b"\t" * run + "Ωmega\n".encode()


def write_zip(path: Path, members: dict[str, bytes], compression: int = zipfile.ZIP_DEFLATED) -> Path:
    with zipfile.ZipFile(path, "w", compression=compression) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def read_all(stream: io.RawIOBase, size: int) -> bytes:
    pieces = []
    while piece := stream.read(size):
        pieces.append(piece)
    return b"".join(pieces)


# -1: the whole member in one read(), as read() with no size gives it.
@pytest.mark.parametrize("read_size", [1, 4096, 1 << 20, 4 << 20, -1])
def test_a_deflated_member_reads_as_zipfile_reads_it(tmp_path, monkeypatch, read_size):
    # Small compressed reads, so that a member spans many of them even in a test.
    monkeypatch.setattr(zip_inflate, "READ_COMPRESSED", 8192)
    data = member_bytes(1, 500, run=20_000) if read_size == 1 else member_bytes(1, 20_000)
    path = write_zip(tmp_path / "d.zip", {"meta.xml": b"<archive/>", "occurrence.txt": data})
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("occurrence.txt")
        expected = archive.read(info)
    assert expected == data
    with open_inflated(path, info) as stream:
        assert read_all(stream, read_size) == expected
        assert stream.read(10) == b""


def test_a_buffered_text_reader_over_it_gives_zipfiles_lines(tmp_path):
    data = member_bytes(2, 5_000)
    path = write_zip(tmp_path / "d.zip", {"occurrence.txt": data})
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("occurrence.txt")
        with archive.open(info) as member:
            expected = io.TextIOWrapper(member, encoding="utf-8", newline="").readlines()
    with open_inflated(path, info) as stream:
        text = io.TextIOWrapper(io.BufferedReader(stream, 1 << 16), encoding="utf-8", newline="")
        assert text.readlines() == expected
    assert stream.closed


def test_a_stored_member_is_left_to_zipfile(tmp_path):
    path = write_zip(tmp_path / "s.zip", {"occurrence.txt": b"1\t2\n"}, compression=zipfile.ZIP_STORED)
    with zipfile.ZipFile(path) as archive:
        assert open_inflated(path, archive.getinfo("occurrence.txt")) is None


def _corrupted(tmp_path: Path, change) -> tuple[Path, zipfile.ZipInfo]:
    path = write_zip(tmp_path / "c.zip", {"occurrence.txt": member_bytes(3, 20_000)})
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("occurrence.txt")
    data = bytearray(path.read_bytes())
    start = info.header_offset + 30 + len(info.filename)
    change(data, start, info)
    path.write_bytes(bytes(data))
    return path, info


def test_bad_deflate_data_fails_as_zipfile_fails(tmp_path):
    def zero_the_middle(data, start, info):
        data[start + info.compress_size // 2 : start + info.compress_size // 2 + 64] = bytes(64)

    path, info = _corrupted(tmp_path, zero_the_middle)
    with zipfile.ZipFile(path) as archive, pytest.raises((zipfile.BadZipFile, EOFError, OSError)):
        archive.read(info)  # what zipfile says, for comparison: it must fail too
    with open_inflated(path, info) as stream, pytest.raises((zipfile.BadZipFile, EOFError)):
        read_all(stream, 1 << 16)


def test_a_wrong_crc_in_the_directory_is_refused_at_the_end(tmp_path):
    path = write_zip(tmp_path / "c.zip", {"occurrence.txt": member_bytes(4, 2_000)})
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("occurrence.txt")
    info.CRC ^= 1  # as a directory whose CRC does not match the data would say
    with open_inflated(path, info) as stream, pytest.raises(zipfile.BadZipFile, match="Bad CRC-32"):
        read_all(stream, 1 << 16)


def test_a_member_cut_short_is_an_eof_error(tmp_path):
    path = write_zip(tmp_path / "c.zip", {"occurrence.txt": member_bytes(5, 20_000)})
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("occurrence.txt")
    info.compress_size //= 2  # the stream ends before its last block
    with open_inflated(path, info) as stream, pytest.raises(EOFError):
        read_all(stream, 1 << 16)


def test_a_directory_that_points_at_another_members_header_is_refused(tmp_path):
    path = write_zip(tmp_path / "two.zip", {"meta.xml": b"<archive/>" * 100, "occurrence.txt": b"1\n" * 100})
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("occurrence.txt")
        info.header_offset = archive.getinfo("meta.xml").header_offset
    with pytest.raises(zipfile.BadZipFile, match="differ"):
        open_inflated(path, info)
