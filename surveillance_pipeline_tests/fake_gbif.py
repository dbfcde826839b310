"""A local HTTP server shaped like GBIF's v1 API: scripted answers per path, every request recorded."""

from __future__ import annotations

import json
import threading
from collections import defaultdict, deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


class FakeGbif:
    """Answers ``GET <path>`` from queues of (status, headers, body); the last answer of a queue repeats."""

    def __init__(self) -> None:
        self.answers: dict[tuple[str, str], deque] = defaultdict(deque)
        self.requests: list[dict] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                parts = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(parts.query).items()}
                fake.requests.append(
                    {"path": parts.path, "query": query, "user_agent": self.headers["User-Agent"]}
                )
                queue = fake.answers[(parts.path, query.get("offset", ""))] or fake.answers[(parts.path, "*")]
                status, headers, body = queue.popleft() if len(queue) > 1 else queue[0]
                self.send_response(status)
                for name, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body if isinstance(body, bytes) else json.dumps(body).encode())

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def answer(self, path: str, *answers, offset: str = "*") -> None:
        """Queue answers for ``/v1/<path>`` (for one ``offset``, or any)."""
        self.answers[(f"/v1/{path}", offset)].extend(answers)

    def __enter__(self) -> FakeGbif:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
