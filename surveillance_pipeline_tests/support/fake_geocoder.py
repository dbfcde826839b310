"""A local Nominatim-style geocoder: ``GET /search?q=…&format=jsonv2&limit=1`` from a small gazetteer.

Counts every request and every answered (paid) one; after ``fail_after`` answers it fails each request
with a 500, as a provider does when it breaks mid-run.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from surveillance_pipeline.geocoding.service import normalize_locality
from surveillance_pipeline.lab.gazetteer import LAB_GAZETTEER


class FakeGeocoder:
    def __init__(self) -> None:
        self.places = {normalize_locality(n): p for n, p in LAB_GAZETTEER.items()}
        self.requests: list[dict] = []
        self.answered: list[str] = []  # the q of every request answered with 200: the calls paid for
        self.fail_after: int | None = None
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                parts = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(parts.query).items()}
                with fake.lock:
                    fake.requests.append(
                        {"path": parts.path, "query": query, "ua": self.headers["User-Agent"]}
                    )
                    failing = fake.fail_after is not None and len(fake.answered) >= fake.fail_after
                    if not failing:
                        fake.answered.append(query.get("q", ""))
                if failing:
                    self._send(500, {"error": "geocoder is down"})
                    return
                point = fake.places.get(query.get("q", ""))
                if point is None:
                    self._send(200, [])
                    return
                lon, lat = point
                # Nominatim answers lat/lon as strings, with the matched address we must not keep.
                self._send(
                    200, [{"lat": str(lat), "lon": str(lon), "display_name": f"{query['q']}, Tasmania"}]
                )

            def _send(self, status: int, body: object) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeGeocoder:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
