"""Geocoders behind one interface: a Nominatim-style HTTP search here, the lab's fixed gazetteer in lab/.

Both answer one normalized locality text with a point or "not found". Neither returns the address text
it matched (Nominatim's ``display_name``): what the ledger keeps is a point, never an address.
"""

from __future__ import annotations

import hmac
import json
import re
import threading
import time
import unicodedata
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from hashlib import sha256
from typing import Protocol

LAB_GEOCODER = "lab"
HTTP_GEOCODER = "http"
DEFAULT_GEOCODER_URL = "https://nominatim.openstreetmap.org"
# Nominatim's usage policy: at most one request per second, and a User-Agent that names the application.
DEFAULT_REQUESTS_PER_SECOND = 1.0
USER_AGENT = "surveillance_pipeline/0.1 (GBIF occurrences into PostGIS; locality geocoding)"
FOUND = "found"
NOT_FOUND = "not_found"


class GeocoderError(RuntimeError):
    """The geocoder gave no usable answer (refused, failed or timed out): nothing is recorded for it."""


@dataclass(frozen=True)
class GeocodeAnswer:
    status: str  # FOUND or NOT_FOUND
    longitude: float | None = None
    latitude: float | None = None


def normalize_locality(text: str) -> str:
    """One spelling per locality: Unicode NFKC, case-folded, whitespace collapsed, trimmed.

    Two texts with the same normal form share one ledger entry and one paid call.
    """
    return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text).casefold()).strip()


def ledger_key(salt: str, normalized: str) -> str:
    """HMAC-SHA256(salt, normalized locality), hex: the ledger's idempotency key.

    Keyed with a secret, so the ledger cannot be read back into addresses by hashing a list of candidates.
    """
    if not salt:
        raise ValueError("the geocoder ledger salt is empty: set GEOCODER_LEDGER_SALT (make run writes one)")
    return hmac.new(salt.encode("utf-8"), normalized.encode("utf-8"), sha256).hexdigest()


class Geocoder(Protocol):
    """What geocoded_localities needs: one answer per normalized locality."""

    # Names the service whose answers the ledger keeps; another service's answers are not reused.
    service: str

    def geocode(self, normalized: str) -> GeocodeAnswer: ...


class OneCallAtATime:
    """``geocoder``, its calls made one at a time whichever thread asks: a step may geocode species side
    by side (report_partitions), and a service's client and rate limit are the process's, not a thread's."""

    def __init__(self, geocoder: Geocoder):
        self._geocoder = geocoder
        self._lock = threading.Lock()
        self.service = geocoder.service

    def geocode(self, normalized: str) -> GeocodeAnswer:
        with self._lock:
            return self._geocoder.geocode(normalized)


class HttpGeocoder:
    """A Nominatim-style ``/search?q=…&format=jsonv2&limit=1``, rate limited, with a timeout per request.

    Not retried: a failure raises at once, and the run resumes later from the ledger with the calls that
    are still missing. The rate limit holds between requests of one geocoder object (one run's step).
    """

    def __init__(
        self,
        base_url: str = DEFAULT_GEOCODER_URL,
        *,
        requests_per_second: float = DEFAULT_REQUESTS_PER_SECOND,
        timeout: float = 30.0,
        user_agent: str = USER_AGENT,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if urllib.parse.urlsplit(base_url).scheme not in ("http", "https"):
            raise ValueError(f"geocoder base URL must be http(s), got {base_url!r}")
        if requests_per_second <= 0:
            raise ValueError(f"geocoder requests_per_second must be positive, got {requests_per_second}")
        self.base_url = base_url.rstrip("/")
        self.service = f"nominatim:{self.base_url}"
        self.interval = 1.0 / requests_per_second
        self.timeout = timeout
        self.user_agent = user_agent
        self.clock = clock
        self.sleep = sleep
        self._last_request: float | None = None

    def geocode(self, normalized: str) -> GeocodeAnswer:
        self._wait_for_slot()
        query = urllib.parse.urlencode({"q": normalized, "format": "jsonv2", "limit": 1})
        url = f"{self.base_url}/search?{query}"
        request = urllib.request.Request(  # noqa: S310 (scheme checked in __init__)
            url, headers={"User-Agent": self.user_agent, "Accept": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310 (as above)
                answer = json.loads(response.read())
        except urllib.error.HTTPError as error:
            raise GeocoderError(f"geocoder answered {error.code} for {self.base_url}/search") from None
        except (urllib.error.URLError, TimeoutError, ConnectionError, json.JSONDecodeError) as error:
            raise GeocoderError(f"geocoder at {self.base_url} failed: {error}") from None
        # The query text stays out of the messages above: it is an address, and errors end up in logs.
        if not isinstance(answer, list):
            raise GeocoderError(f"geocoder at {self.base_url} answered {type(answer).__name__}, not a list")
        if not answer:
            return GeocodeAnswer(NOT_FOUND)
        try:
            return GeocodeAnswer(FOUND, longitude=float(answer[0]["lon"]), latitude=float(answer[0]["lat"]))
        except (KeyError, TypeError, ValueError):
            raise GeocoderError(f"geocoder at {self.base_url} answered without lat/lon") from None

    def _wait_for_slot(self) -> None:
        now = self.clock()
        if self._last_request is not None:
            wait = self._last_request + self.interval - now
            if wait > 0:
                self.sleep(wait)
                now = self.clock()
        self._last_request = now
