"""/metrics on a listener of its own (REPRISE_METRICS_PORT), so that a public API port need not
expose them. Started by `reprise api` in its own process; with several API processes it reads them
all through prometheus_client's multiprocess directory (api.exposition).

prometheus_client's WSGI app and threading server do the serving (content negotiation, compression,
`name[]` filters); its `start_http_server` answers the metrics on every path, so the app is wrapped to
answer only /metrics and 404 elsewhere, as this listener always has: a scanner finds nothing else here."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from api.exposition import Exposition, StoreCollector
from core.settings import Settings
from db.engine import session_scope
from jobs.broker import broker_client

METRICS_PATH = "/metrics"
WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # scrapes every few seconds: not worth a log line each


def only_metrics(app: WSGIApp) -> WSGIApp:
    """`app` at /metrics; 404 on any other path."""

    def serve(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != METRICS_PATH:
            start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"not found: metrics are at /metrics\n"]
        return app(environ, start_response)

    return serve


def start_metrics_server(settings: Settings, *, port: int, address: str) -> WSGIServer:
    """Serve GET /metrics on address:port from a daemon thread; returns the server (shutdown() stops it)."""
    broker = broker_client(settings, socket_timeout=1.0, socket_connect_timeout=1.0)
    stores = StoreCollector(settings, broker, sessions=lambda: session_scope(settings))
    app = only_metrics(make_wsgi_app(Exposition(stores)))
    server = make_server(address, port, app, ThreadingWSGIServer, handler_class=QuietHandler)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
