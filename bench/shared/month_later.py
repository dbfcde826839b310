"""The same GBIF query downloaded again a month later: a few records edited, a few gone, a few new.

``write_month_later(base, path, edited, gone, added)`` streams the base download's ``occurrence.txt`` and
writes a newer zip of the same query (its ``metadata.xml`` names the same predicate byte for byte, with a
later key, DOI and creation time), in which each record is, by a digest of its gbifID and the change's
seed (never Python's ``hash()``, never an unseeded draw):

- gone, with probability ``gone``;
- edited, with probability ``edited``: its latitude moved by 0.001° (a coordinate corrected), or, for a
  record without coordinates, its coordinateUncertaintyInMeters set, so the edit reaches the tables;
- kept byte for byte otherwise; and after a kept record, with probability ``added``, a new record: the
  kept one's copy with a new gbifID (above every generated one) and its latitude moved by 0.002°.

``vanished`` names species (slugs) of which every record is gone: GBIF has none of them any more.
``cached_without(cache, base, species)`` is the base itself without those species, under the base's own key
and time: a first download in which the month-later one's records of them appear.

So the newer zip holds ``(1 - gone + added)`` of the base's records, in the base's order, and what changed is
known exactly (``MonthLater`` counts it per species). Deterministic for (base, shares, seed).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import re
import time
import zipfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.shared.gbif_download import (
    COLUMNS,
    GeneratedDownload,
    _entry,
    _write_streamed,
    download_identity,
)
from surveillance_pipeline.gbif.registry import load_registry

# The newer download was created a month after the base (the key's stamp and the EML's dateStamp).
MONTH_LATER = "261230"
NEW_GBIF_IDS = 9_000_000_000
SPECIES_NAME = COLUMNS.index("species")
GBIF_ID = COLUMNS.index("gbifID")
LATITUDE = COLUMNS.index("decimalLatitude")
UNCERTAINTY = COLUMNS.index("coordinateUncertaintyInMeters")
LINES_PER_BLOCK = 20_000
# The shares of a month's changes (a month of a real query's changes, as the issue describes them).
EDITED, GONE, ADDED = 0.0075, 0.0025, 0.0025


@dataclass(frozen=True)
class MonthLater:
    """The newer zip and what changed in it against its base, per species slug."""

    path: Path
    key: str
    base_key: str
    records: int
    edited: dict[str, int]
    gone: dict[str, int]
    added: dict[str, int]
    seconds: float
    vanished: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "path": str(self.path), "seconds": round(self.seconds, 3)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MonthLater:
        return cls(**{**data, "path": Path(data["path"]), "vanished": tuple(data.get("vanished", ()))})


def _share(seed: int, gbif_id: bytes) -> float:
    digest = hashlib.blake2b(b"%d|" % seed + gbif_id, digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def _moved(value: bytes, by: float) -> bytes:
    if not value or float(value) == 0.0:
        return value
    return b"%.6f" % (float(value) + by)


def month_later_identity(base_key: str, seed: int) -> tuple[str, str]:
    """The newer download's key (the base's sequence moved on, a month-later stamp) and DOI."""
    key, doi = download_identity(int(base_key.split("-")[0]), 10_000 + seed)
    sequence = (int(base_key.split("-")[0]) + 1 + seed) % 10_000_000
    return f"{sequence:07d}-{MONTH_LATER}{key.split('-')[1][6:]}", doi


def write_month_later(
    base: GeneratedDownload,
    path: Path,
    *,
    edited: float = EDITED,
    gone: float = GONE,
    added: float = ADDED,
    seed: int = 1,
    vanished: tuple[str, ...] = (),
    identity: tuple[str, str] | None = None,
) -> MonthLater:
    """Write the month-later zip of ``base`` to ``path`` (replaced atomically); ``identity``: its key and
    DOI, when not a month later's (the base's own: the same download with records taken out)."""
    started = time.perf_counter()
    key, doi = identity or month_later_identity(base.key, seed)
    slugs = {species.scientific_name: species.slug for species in load_registry()}
    counts: dict[str, Counter[str]] = {"edited": Counter(), "gone": Counter(), "added": Counter()}
    records = 0
    new_ids = NEW_GBIF_IDS

    def blocks(source: io.BufferedIOBase) -> Any:
        nonlocal records, new_ids
        yield source.readline()
        lines: list[bytes] = []
        for line in source:
            fields = line.rstrip(b"\n").split(b"\t")
            share = _share(seed, fields[GBIF_ID])
            slug = slugs.get(fields[SPECIES_NAME].decode(), fields[SPECIES_NAME].decode())
            if share < gone or slug in vanished:
                counts["gone"][slug] += 1
                continue
            if share < gone + edited:
                counts["edited"][slug] += 1
                if fields[LATITUDE] and float(fields[LATITUDE]) != 0.0:
                    fields[LATITUDE] = _moved(fields[LATITUDE], 0.001)
                else:
                    fields[UNCERTAINTY] = b"250.0"
                lines.append(b"\t".join(fields) + b"\n")
            else:
                lines.append(line)
            records += 1
            if _share(seed + 1, fields[GBIF_ID]) < added and slug not in vanished:
                counts["added"][slug] += 1
                copy = list(fields)
                copy[GBIF_ID] = b"%d" % new_ids
                new_ids += 1
                copy[LATITUDE] = _moved(copy[LATITUDE], 0.002)
                lines.append(b"\t".join(copy) + b"\n")
                records += 1
            if len(lines) >= LINES_PER_BLOCK:
                yield b"".join(lines)
                lines = []
        if lines:
            yield b"".join(lines)

    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.staging")
    with zipfile.ZipFile(base.path) as source_zip, zipfile.ZipFile(staging, "w") as archive:
        with source_zip.open("occurrence.txt") as source:
            with archive.open(_entry("occurrence.txt"), "w", force_zip64=True) as member:
                _write_streamed(member.write, blocks(source))  # type: ignore[arg-type]
        for name in source_zip.namelist():
            if name == "occurrence.txt":
                continue
            text = source_zip.read(name).decode("utf-8")
            if name == "metadata.xml" and key != base.key:
                text = _newer_metadata(text, base, key, doi)
            else:
                text = text.replace(base.key, key).replace(base.doi, doi)
            with archive.open(_entry(name), "w") as member:
                member.write(text.encode("utf-8"))
    staging.replace(path)
    return MonthLater(
        path=path,
        key=key,
        base_key=base.key,
        records=records,
        edited=dict(sorted(counts["edited"].items())),
        gone=dict(sorted(counts["gone"].items())),
        added=dict(sorted(counts["added"].items())),
        seconds=time.perf_counter() - started,
        vanished=vanished,
    )


def _newer_metadata(text: str, base: GeneratedDownload, key: str, doi: str) -> str:
    """The base's EML with the newer key, DOI and creation time; the query (in the abstract) unchanged."""
    stamp = key.split("-")[1]
    day = f"20{stamp[:2]}-{stamp[2:4]}-{stamp[4:6]}"
    created = f"{day}T{stamp[6:8]}:{stamp[8:10]}:{stamp[10:12]}.{stamp[12:]}+00:00"
    text = re.sub(r"<dateStamp>[^<]*</dateStamp>", f"<dateStamp>{created}</dateStamp>", text)
    return text.replace(base.key, key).replace(base.doi, doi).replace("30 November 2026", "30 December 2026")


def cached_month_later(
    cache: Path,
    base: GeneratedDownload,
    seed: int = 1,
    vanished: tuple[str, ...] = (),
    *,
    edited: float | None = None,
    gone: float | None = None,
    added: float | None = None,
) -> MonthLater:
    """The month-later zip of ``base`` under ``cache``, written only when missing; a share not given is
    write_month_later's default."""
    given = {"added": added, "edited": edited, "gone": gone}
    shares = {name: value for name, value in given.items() if value is not None}
    label = "-".join(f"{name}{value}" for name, value in shares.items()) or "default"
    if vanished:
        label += "-vanished-" + "+".join(vanished)
    folder = cache / f"r{base.records}-s{base.seed}-v{base.version}-later{seed}-{label}"
    key, _ = month_later_identity(base.key, seed)
    return _cached(
        folder,
        lambda: write_month_later(
            base,
            folder / f"{key}.zip",
            seed=seed,
            vanished=vanished,
            edited=EDITED if edited is None else edited,
            gone=GONE if gone is None else gone,
            added=ADDED if added is None else added,
        ),
    )


def _cached(folder: Path, write: Callable[[], MonthLater]) -> MonthLater:
    """The zip ``folder``'s sidecar describes, when it is there; else ``write`` it and keep the sidecar."""
    sidecar = folder / "month_later.json"
    if sidecar.exists():
        kept = MonthLater.from_dict(json.loads(sidecar.read_text(encoding="utf-8")))
        if kept.path.exists():
            return kept
    written = write()
    sidecar.write_text(json.dumps(written.as_dict(), indent=1) + "\n", encoding="utf-8")
    return written


def cached_without(cache: Path, base: GeneratedDownload, species: tuple[str, ...]) -> MonthLater:
    """``base`` without every record of ``species`` (slugs), under its own key, DOI and creation time; kept
    under ``cache``, written only when missing. Its ``gone`` counts what was taken out."""
    folder = cache / f"r{base.records}-s{base.seed}-v{base.version}-without-{'+'.join(species)}"
    return _cached(
        folder,
        lambda: write_month_later(
            base,
            folder / base.path.name,
            edited=0.0,
            gone=0.0,
            added=0.0,
            vanished=species,
            identity=(base.key, base.doi),
        ),
    )
