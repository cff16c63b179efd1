"""The chaos bench's TCP fault proxy, against a real echo server: bytes pass untouched, a fault adds latency
and cuts connections, and after it a client reconnects."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections.abc import Iterator

import pytest

from bench.chaos.proxy import FaultProxy, NetworkFault


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data)


@pytest.fixture
def echo() -> Iterator[tuple[str, int]]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield "127.0.0.1", int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def _round_trip(port: int, payload: bytes) -> tuple[bytes, float]:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        started = time.monotonic()
        sock.sendall(payload)
        got = b""
        while len(got) < len(payload):
            chunk = sock.recv(65536)
            if not chunk:
                break
            got += chunk
        return got, time.monotonic() - started


def test_bytes_pass_untouched_and_a_fault_adds_latency_each_way(echo: tuple[str, int]) -> None:
    payload = bytes(range(256)) * 2000  # 512 kB: several chunks, whose order must hold
    with FaultProxy({"echo": echo}) as proxy:
        got, quiet_s = _round_trip(proxy.port("echo"), payload)
        assert got == payload
        proxy.start_fault(
            NetworkFault(latency_s=0.3, jitter_s=0.05, drop_per_s=0, reset_per_s=0, reset_on_connect=0)
        )
        got, slow_s = _round_trip(proxy.port("echo"), payload)
        proxy.end_fault()
        assert got == payload
        assert slow_s >= 0.6 > quiet_s  # 0.3 s there and 0.3 s back
        assert proxy.counts.by_kind["echo:connections"] == 2


def test_a_fault_resets_connections_and_clients_reconnect_after_it(echo: tuple[str, int]) -> None:
    with FaultProxy({"echo": echo}) as proxy:
        held = socket.create_connection(("127.0.0.1", proxy.port("echo")), timeout=5)
        held.sendall(b"ping")
        assert held.recv(16) == b"ping"
        proxy.start_fault(
            NetworkFault(latency_s=0, jitter_s=0, drop_per_s=0, reset_per_s=1.0, reset_on_connect=1.0)
        )
        with pytest.raises(ConnectionResetError):
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                held.sendall(b"ping")
                if not held.recv(16):
                    break
                time.sleep(0.1)
        held.close()
        with pytest.raises((ConnectionResetError, ConnectionAbortedError)):
            _round_trip(proxy.port("echo"), b"refused")
        proxy.end_fault()
        assert _round_trip(proxy.port("echo"), b"back")[0] == b"back"
        assert proxy.counts.by_kind["echo:resets"] >= 1 and proxy.counts.by_kind["echo:refused"] >= 1
