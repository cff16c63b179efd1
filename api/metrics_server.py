"""/metrics on a listener of its own (REPRISE_METRICS_PORT), so that a public API port need not
expose them. Started by `reprise api` in its own process; with several API processes it
reads them all through prometheus_client's multiprocess directory."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST

from api.metrics import exposition
from api.quality_guard import refresh_guard_gauges
from api.read_metrics import refresh_read_gauges
from api.store_metrics import refresh_store_gauges
from core.settings import Settings
from db.engine import session_scope
from jobs.broker import broker_client


def start_metrics_server(settings: Settings, *, port: int, address: str) -> ThreadingHTTPServer:
    """Serve GET /metrics on address:port from a daemon thread; returns the server (shutdown() stops it)."""

    broker = broker_client(settings, socket_timeout=1.0, socket_connect_timeout=1.0)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] != "/metrics":
                self.send_error(404)
                return
            with session_scope(settings) as session:

                def reads() -> None:
                    refresh_read_gauges(broker, session, heartbeat_s=settings.read_heartbeat_s)
                    refresh_store_gauges(broker, session)
                    refresh_guard_gauges(session, settings)

                body = exposition(session, reads=reads)
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE_LATEST)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # scrapes every few seconds: not worth a log line each

    server = ThreadingHTTPServer((address, port), Handler)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
