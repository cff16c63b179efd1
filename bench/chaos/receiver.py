"""The chaos benchmark's webhook receiver: records every delivery by webhook-id; during an outage it
answers 503, as a receiver that is down behind its load balancer would."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Receiver:
    url: str
    outage: bool = False
    delivered: Counter[str] = field(default_factory=Counter)  # webhook-id -> 2xx answers given
    refused: Counter[str] = field(default_factory=Counter)  # webhook-id -> 503 answers given
    job_of: dict[str, str] = field(default_factory=dict)  # webhook-id -> job id
    delivered_at: dict[str, float] = field(default_factory=dict)  # webhook-id -> first 2xx (time.time)
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = field(default=None, repr=False)

    def record(self, headers: dict[str, str], body: bytes) -> int:
        message = headers.get("webhook-id", "")
        with self.lock:
            if self.outage:
                self.refused[message] += 1
                return 503
            self.delivered[message] += 1
            self.delivered_at.setdefault(message, time.time())
            with contextlib.suppress(ValueError, KeyError, TypeError):
                self.job_of[message] = str(json.loads(body)["data"]["id"])
        return 200

    def duplicated(self) -> int:
        """Events a 2xx was answered to more than once (a delivery after a success)."""
        with self.lock:
            return sum(1 for count in self.delivered.values() if count > 1)

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


def start_receiver(port: int = 0) -> Receiver:
    """A receiver on 127.0.0.1 (a free port unless given), serving from a daemon thread."""
    holder: dict[str, Receiver] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            status = holder["receiver"].record({k.lower(): v for k, v in self.headers.items()}, body)
            self.send_response(status)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    receiver = Receiver(url=f"http://127.0.0.1:{server.server_address[1]}/hook", server=server)
    holder["receiver"] = receiver
    threading.Thread(target=server.serve_forever, name="chaos-receiver", daemon=True).start()
    return receiver
