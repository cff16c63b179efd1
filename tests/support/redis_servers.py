"""Redis servers of a test's own: a plain one (the embedded server's code) and a Sentinel watching it,
each on a free port under a temporary directory, stopped on exit."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from reprise.services.redis import EmbeddedRedis, redis_server_binary


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def scratch_redis(root: Path) -> Iterator[EmbeddedRedis]:
    """A redis-server of this test's own, as `reprise services up` starts one."""
    server = EmbeddedRedis(root=root, port=free_port())
    server.up()
    try:
        yield server
    finally:
        server.down()


@contextmanager
def sentinel_watching(master: EmbeddedRedis, root: Path, *, master_name: str) -> Iterator[int]:
    """A Redis Sentinel (`redis-server --sentinel`) monitoring master under master_name; yields its port
    once it names the master's address."""
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config = root / "sentinel.conf"  # Sentinel rewrites its config file: one of its own, writable
    config.write_text(
        f"port {port}\nbind 127.0.0.1\ndir {root.resolve()}\n"
        f"sentinel monitor {master_name} 127.0.0.1 {master.port} 1\n"
        f"sentinel down-after-milliseconds {master_name} 5000\n"
    )
    log = (root / "sentinel.log").open("ab")
    process = subprocess.Popen([redis_server_binary(), str(config), "--sentinel"], stdout=log, stderr=log)
    try:
        client = redis.Redis(port=port, socket_timeout=1, decode_responses=True)
        deadline = time.monotonic() + 15
        while True:
            try:
                if client.sentinel_get_master_addr_by_name(master_name) == ("127.0.0.1", master.port):
                    break
            except redis.ConnectionError:
                pass
            if time.monotonic() > deadline or process.poll() is not None:
                raise AssertionError(f"the sentinel did not come up; see {root / 'sentinel.log'}")
            time.sleep(0.1)
        yield port
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()
