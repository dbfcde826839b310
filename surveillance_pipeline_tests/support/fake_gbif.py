"""A local HTTP server shaped like GBIF's v1 API: scripted answers per path, every request recorded.

Besides scripted GET answers it keeps a store of derived datasets: POST /v1/derivedDataset adds one (and
answers 201, or, in "drop" mode, closes the connection unanswered, as a crash between GBIF's create and
our receipt would), and GET /v1/derivedDataset/user/<user> lists them in GBIF's paged form.
"""

from __future__ import annotations

import json
import socket
import threading
from collections import defaultdict, deque
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from surveillance_pipeline.lab.gbif_client import LabGbifClient, species_for_params


class FakeGbif:
    """Answers ``GET <path>`` from queues of (status, headers, body); the last answer of a queue repeats."""

    def __init__(self) -> None:
        self.answers: dict[tuple[str, str], deque] = defaultdict(deque)
        self.requests: list[dict] = []
        self.derived_datasets: list[dict] = []
        self.create_mode = "created"
        # Set by serve_lab_occurrences: occurrence searches answered from the lab data, per species edited.
        self.lab_edits: dict[str, Callable[[list[dict]], list[dict]]] | None = None
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _record(self, query: dict, body: bytes | None = None) -> None:
                fake.requests.append(
                    {
                        "method": self.command,
                        "path": urlsplit(self.path).path,
                        "query": query,
                        "user_agent": self.headers["User-Agent"],
                        "authorization": self.headers["Authorization"],
                        "body": json.loads(body) if body else None,
                    }
                )

            def _send(self, status: int, headers: dict, body: object) -> None:
                self.send_response(status)
                for name, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body if isinstance(body, bytes) else json.dumps(body).encode())

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers["Content-Length"]))
                self._record({}, body)
                created = {**json.loads(body), "doi": f"10.15468/dd.fake{len(fake.derived_datasets) + 1:03d}"}
                fake.derived_datasets.append(created)
                if fake.create_mode == "drop":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self._send(201, {}, created)

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                parts = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(parts.query).items()}
                self._record(query)
                if parts.path == "/v1/occurrence/search" and fake.lab_edits is not None:
                    self._send(200, {}, fake.lab_search(query))
                    return
                if parts.path.startswith("/v1/derivedDataset/user/"):
                    offset, limit = int(query["offset"]), int(query["limit"])
                    page = fake.derived_datasets[offset : offset + limit]
                    end = offset + len(page) >= len(fake.derived_datasets)
                    listing = {"offset": offset, "limit": limit, "endOfRecords": end, "results": page}
                    self._send(200, {}, {**listing, "count": len(fake.derived_datasets)})
                    return
                queue = fake.answers[(parts.path, query.get("offset", ""))] or fake.answers[(parts.path, "*")]
                status, headers, body = queue.popleft() if len(queue) > 1 else queue[0]
                self._send(status, headers, body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def serve_lab_occurrences(self) -> None:
        """Answer every occurrence search from the lab data (GBIF as the lab sees it), until edited."""
        self.lab_edits = {}

    def edit_species(self, slug: str, edit: Callable[[list[dict]], list[dict]]) -> None:
        """GBIF's records of one species change: its searches answer ``edit(records)`` from now on."""
        assert self.lab_edits is not None, "serve_lab_occurrences first"
        self.lab_edits[slug] = edit

    def lab_search(self, query: dict[str, str]) -> dict:
        offset, limit = int(query.pop("offset", 0)), int(query.pop("limit", 300))
        everything = LabGbifClient().search_occurrences(query, offset=0, limit=10**9)
        records = list(everything["results"])
        species = species_for_params(query)
        if species is not None and self.lab_edits and species.slug in self.lab_edits:
            records = self.lab_edits[species.slug](records)
        page = records[offset : offset + limit]
        end = offset + len(page) >= len(records)
        return {
            **everything,
            "count": len(records),
            "offset": offset,
            "limit": limit,
            "results": page,
            "endOfRecords": end,
        }

    def answer(self, path: str, *answers, offset: str = "*") -> None:
        """Queue answers for ``GET /v1/<path>`` (for one ``offset``, or any)."""
        self.answers[(f"/v1/{path}", offset)].extend(answers)

    def posts(self) -> list[dict]:
        return [r for r in self.requests if r["method"] == "POST"]

    def __enter__(self) -> FakeGbif:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
