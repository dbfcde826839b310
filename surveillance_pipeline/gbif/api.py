"""The live GBIF client: occurrence search and species match over GBIF's v1 HTTP API.

Retries 429 and 5xx answers (and dropped connections) with exponential backoff, honouring ``Retry-After``;
any other 4xx fails at once with GBIF's own message. Every request names the project in its User-Agent.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from surveillance_pipeline.gbif.client import API_SOURCE

DEFAULT_BASE_URL = "https://api.gbif.org/v1"
USER_AGENT = "surveillance_pipeline/0.1 (GBIF occurrences into PostGIS)"
RETRYABLE = {429, 500, 502, 503, 504}


class GbifRequestError(RuntimeError):
    """GBIF refused a request (a 4xx other than 429), or kept failing after every retry."""

    def __init__(self, url: str, status: int | None, message: str) -> None:
        self.url = url
        self.status = status
        super().__init__(f"GBIF answered {status or 'nothing'} for {url}: {message}")


@dataclass(frozen=True)
class GbifAccountCredentials:
    """A GBIF account, for the calls that need one. Its repr hides the password."""

    user: str
    password: str = field(repr=False)

    def basic_header(self) -> str:
        token = base64.b64encode(f"{self.user}:{self.password}".encode()).decode("ascii")
        return f"Basic {token}"


class ApiGbifClient:
    """GBIF's occurrence search and species match, with timeouts, retries and backoff."""

    source = API_SOURCE
    snapshot_retrieved: str | None = None  # live answers: the retrieval time is the clock's

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        *,
        timeout: float = 30.0,
        max_attempts: int = 5,
        backoff_seconds: float = 1.0,
        max_backoff_seconds: float = 60.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if urllib.parse.urlsplit(base_url).scheme not in ("http", "https"):
            raise ValueError(f"GBIF base URL must be http(s), got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.max_attempts = max_attempts
        self.backoff_seconds = backoff_seconds
        self.max_backoff_seconds = max_backoff_seconds
        self.sleep = sleep

    def search_occurrences(self, params: Mapping[str, Any], *, offset: int, limit: int) -> dict[str, Any]:
        return self.get_json("occurrence/search", {**params, "offset": offset, "limit": limit})

    def answer_version(self, params: Mapping[str, Any]) -> str | None:
        """None: GBIF's occurrence search says nothing of its answer's version, so every ingest fetches it."""
        return None

    def species_match(self, name: str) -> dict[str, Any]:
        """GBIF's backbone match for a scientific name (strict: no fuzzy guesses)."""
        return self.get_json("species/match", {"name": name, "strict": "true"})

    def derived_datasets_of(
        self, account: GbifAccountCredentials, page_size: int = 100
    ) -> Iterator[dict[str, Any]]:
        """Every derived dataset the account registered (GBIF's paged listing, followed to the end)."""
        offset = 0
        while True:
            page = self.get_json(
                f"derivedDataset/user/{urllib.parse.quote(account.user)}",
                {"limit": page_size, "offset": offset},
                auth=account,
            )
            results = page.get("results") or []
            yield from results
            if page.get("endOfRecords", True) or not results:
                return
            offset += len(results)

    def create_derived_dataset(
        self, body: Mapping[str, Any], account: GbifAccountCredentials
    ) -> dict[str, Any]:
        """POST a derived dataset: GBIF mints a DOI. Sent once, never retried: a lost answer is reconciled
        from the account's listing by the caller, not by posting again."""
        return self.get_json("derivedDataset", {}, auth=account, body=body, attempts=1)

    def get_json(
        self,
        path: str,
        params: Mapping[str, Any],
        *,
        auth: GbifAccountCredentials | None = None,
        body: Mapping[str, Any] | None = None,
        attempts: int | None = None,
    ) -> dict[str, Any]:
        """GET (or, with ``body``, POST) a GBIF endpoint and return its JSON answer."""
        query = urllib.parse.urlencode(sorted((k, str(v)) for k, v in params.items()))
        url = f"{self.base_url}/{path}" + (f"?{query}" if query else "")
        data = json.dumps(body).encode("utf-8") if body is not None else None
        headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if auth is not None:
            headers["Authorization"] = auth.basic_header()
        max_attempts = attempts or self.max_attempts
        for attempt in range(1, max_attempts + 1):
            request = urllib.request.Request(url, data=data, headers=headers)  # noqa: S310 (scheme checked)
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310 (as above)
                    return json.loads(response.read())
            except urllib.error.HTTPError as error:
                answer = error.read().decode("utf-8", "replace")
                if error.code not in RETRYABLE:
                    raise GbifRequestError(url, error.code, _gbif_message(answer)) from None
                if attempt == max_attempts:
                    raise GbifRequestError(
                        url, error.code, f"still failing after {attempt} attempts"
                    ) from None
                self.sleep(self._delay(attempt, error.headers.get("Retry-After")))
            except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
                if attempt == max_attempts:
                    raise GbifRequestError(url, None, f"{error} (after {attempt} attempts)") from None
                self.sleep(self._delay(attempt, None))
        raise AssertionError("unreachable")

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        if retry_after and retry_after.strip().isdigit():
            return min(float(retry_after), self.max_backoff_seconds)
        return min(self.backoff_seconds * 2 ** (attempt - 1), self.max_backoff_seconds)


def _gbif_message(body: str) -> str:
    """GBIF's error text: a JSON ``message`` when there is one, else the body itself (shortened)."""
    try:
        document = json.loads(body)
    except json.JSONDecodeError:
        return body.strip()[:500] or "(empty body)"
    if isinstance(document, dict):
        return str(document.get("message") or document.get("error") or document)[:500]
    return str(document)[:500]
