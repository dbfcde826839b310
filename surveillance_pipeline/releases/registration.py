"""Register a release with GBIF as a derived dataset (GBIF mints a DOI), never twice for one release.

The idempotency key is the sha256 of the release's manifest, and the source URL names that sha256, so
what the DOI points at never moves. Before any POST, and whenever a call is pending, the account's
derived datasets are listed and one with our source URL is adopted instead of posting again.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import psycopg

from surveillance_pipeline.core.keys import canonical_json, sha256_hex
from surveillance_pipeline.gbif.api import ApiGbifClient, GbifAccountCredentials
from surveillance_pipeline.gbif.raw_snapshots import read_raw_snapshot
from surveillance_pipeline.ledger.external_calls import CallOutcome, call_once
from surveillance_pipeline.releases.exports import MANIFEST

SERVICE = "gbif.derivedDataset"


def release_source_url(base_url: str, manifest_sha256: str) -> str:
    return f"{base_url.rstrip('/')}/{manifest_sha256}"


def related_datasets(raw_files: Iterable[Path], ids: set[int]) -> dict[str, int]:
    """Records per GBIF dataset among ``ids``, read from the raw snapshots they came from (streamed from a
    records file when the species came from a download)."""
    counts: Counter[str] = Counter()
    for path in raw_files:
        for record in read_raw_snapshot(path).iter_records(path):
            if record["key"] in ids and record.get("datasetKey"):
                counts[record["datasetKey"]] += 1
    return dict(sorted(counts.items()))


def registration_body(
    title: str, description: str, source_url: str, related: dict[str, int]
) -> dict[str, Any]:
    return {"title": title, "description": description, "sourceUrl": source_url, "relatedDatasets": related}


def register_release(
    conn: psycopg.Connection,
    client: ApiGbifClient,
    account: GbifAccountCredentials,
    manifest: bytes,
    body: dict[str, Any],
) -> CallOutcome:
    """POST the derived dataset once per manifest; adopt an existing one with the same source URL."""

    def reconcile() -> dict[str, Any] | None:
        return next(
            (d for d in client.derived_datasets_of(account) if d.get("sourceUrl") == body["sourceUrl"]), None
        )

    return call_once(
        conn,
        key=sha256_hex(manifest),
        service=SERVICE,
        fingerprint=sha256_hex(canonical_json(body).encode("utf-8")),
        reconcile=reconcile,
        call=lambda: client.create_derived_dataset(body, account),
    )


def register_export(
    conn: psycopg.Connection,
    client: ApiGbifClient,
    account: GbifAccountCredentials,
    *,
    export_folder: Path,
    raw_folder: Path,
    source_url_base: str,
    title: str,
    description: str,
) -> tuple[CallOutcome, str]:
    """Register the sample export in ``export_folder`` (its manifest and sample.csv); the outcome and the
    source URL, which names the manifest's sha256."""
    manifest = (export_folder / MANIFEST).read_bytes()
    source_url = release_source_url(source_url_base, hashlib.sha256(manifest).hexdigest())
    lines = (export_folder / "sample.csv").read_text(encoding="utf-8").splitlines()[1:]
    sampled_ids = {int(line.split(",", 1)[0]) for line in lines}
    # Sorted: the related datasets' counts do not depend on the order the folder lists its files in.
    raw_files = sorted(path for path in raw_folder.glob("*.json"))
    body = registration_body(title, description, source_url, related_datasets(raw_files, sampled_ids))
    return register_release(conn, client, account, manifest, body), source_url
