"""Register a release with GBIF as a derived dataset (GBIF mints a DOI), never twice for one release.

The idempotency key is the sha256 of the release's manifest, and the source URL names that sha256, so
what the DOI points at never moves. Before any POST, and whenever a call is pending, the account's
derived datasets are listed and one with our source URL is adopted instead of posting again.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import psycopg

from surveillance_pipeline.core.keys import canonical_json, sha256_hex
from surveillance_pipeline.gbif.api import ApiGbifClient, GbifAccountCredentials
from surveillance_pipeline.ledger.external_calls import CallOutcome, call_once

SERVICE = "gbif.derivedDataset"


def release_source_url(base_url: str, manifest_sha256: str) -> str:
    return f"{base_url.rstrip('/')}/{manifest_sha256}"


def related_datasets(raw_files: Iterable[Path], ids: set[int]) -> dict[str, int]:
    """Records per GBIF dataset among ``ids``, read from the raw snapshots they came from."""
    counts: Counter[str] = Counter()
    for path in raw_files:
        for record in json.loads(path.read_bytes())["records"]:
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
