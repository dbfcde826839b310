"""The GBIF client interface that ingest talks to, and the paging loop every client shares."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

# The sources a GbifSource can name: GBIF's API, GBIF downloads in data/downloads/, the built-in lab data.
API_SOURCE = "api"
DOWNLOAD_SOURCE = "download"
LAB_SOURCE = "lab"
SOURCES = (LAB_SOURCE, API_SOURCE, DOWNLOAD_SOURCE)

# GBIF's occurrence search serves at most 300 records a page, and no record past offset 100,000.
PAGE_LIMIT = 300
SEARCH_LIMIT = 100_000


class SearchLimitError(RuntimeError):
    """More records than occurrence search can page through: the user needs a GBIF download."""


class GbifClient(Protocol):
    """What ingest needs from GBIF: one page of occurrence search at a time."""

    source: str
    # When the source is a fixed snapshot (the lab data), the time it stands for; None: ask the clock.
    # A fixed time makes a fresh data folder give the same raw bytes, and so the same keys downstream.
    snapshot_retrieved: str | None

    def search_occurrences(self, params: Mapping[str, Any], *, offset: int, limit: int) -> dict[str, Any]:
        """One occurrence-search page: ``offset``, ``limit``, ``endOfRecords``, ``count``, ``results``."""
        ...

    def answer_version(self, params: Mapping[str, Any]) -> str | None:
        """A version of the whole answer to these params, when the source can tell it without serving the
        answer (the lab: its generator and the species' entry); None when only the answer tells (GBIF's
        API). Ingest keeps a stored snapshot whose answer had this version without fetching it again."""
        ...


def fetch_all_occurrences(client: GbifClient, params: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Page through an occurrence search until GBIF says ``endOfRecords``."""
    records: list[dict[str, Any]] = []
    offset = 0
    while True:
        page = client.search_occurrences(params, offset=offset, limit=PAGE_LIMIT)
        count = page.get("count") or 0
        if count > SEARCH_LIMIT:
            raise SearchLimitError(
                f"GBIF counts {count:,} records for {dict(params)}; occurrence search pages through at most "
                f"{SEARCH_LIMIT:,}. Request a GBIF download for this query and drop it in data/downloads/."
            )
        results = page.get("results") or []
        records.extend(results)
        if page.get("endOfRecords", True) or not results:
            return records
        offset += len(results)
