"""Intake load: many submissions from concurrent clients; submit throughput and latency.

Used by `reprise bench chaos --scenarios load` and by the other scenarios to submit their jobs.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit


@dataclass
class LoadResult:
    """What the clients saw: accepted job ids, HTTP statuses, per-request latency."""

    job_ids: list[str] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    latencies_ms: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)  # transport errors, by kind
    seconds: float = 0.0

    @property
    def submit_rps(self) -> float:
        return len(self.latencies_ms) / self.seconds if self.seconds > 0 else 0.0

    def percentile_ms(self, q: float) -> float | None:
        if not self.latencies_ms:
            return None
        ordered = sorted(self.latencies_ms)
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)

    @property
    def five_xx(self) -> int:
        return sum(count for status, count in self.statuses.items() if status >= 500)


def submit_all(
    base_url: str,
    headers: dict[str, str],
    bodies: Sequence[dict[str, Any]],
    *,
    concurrency: int,
    timeout_s: float = 30.0,
) -> LoadResult:
    """POST every body to /v1/generations from `concurrency` clients; blocks until all answered."""
    return asyncio.run(_submit_all(base_url, headers, bodies, concurrency=concurrency, timeout_s=timeout_s))


async def _submit_all(
    base_url: str,
    headers: dict[str, str],
    bodies: Sequence[dict[str, Any]],
    *,
    concurrency: int,
    timeout_s: float,
) -> LoadResult:
    result = LoadResult()
    url = urlsplit(base_url)
    host, port = url.hostname or "127.0.0.1", url.port or 80
    fixed = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    head = f"POST /v1/generations HTTP/1.1\r\nHost: {url.netloc}\r\n{fixed}Content-Type: application/json\r\n"
    requests = deque(
        (head + f"Content-Length: {len(raw)}\r\n\r\n").encode() + raw for raw in _encoded(bodies)
    )

    async def client_loop() -> None:
        connection: Connection | None = None
        while requests:
            request = requests.popleft()
            started = time.perf_counter()
            try:
                if connection is None:
                    connection = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
                status, body, keep = await asyncio.wait_for(_exchange(connection, request), timeout_s)
            except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError) as error:
                result.errors[type(error).__name__] += 1
                connection = _close(connection)
                continue
            result.latencies_ms.append((time.perf_counter() - started) * 1e3)
            result.statuses[status] += 1
            if status in (200, 202):
                result.job_ids.append(json.loads(body)["id"])
            if not keep:
                connection = _close(connection)
        _close(connection)

    started = time.perf_counter()
    await asyncio.gather(*(client_loop() for _ in range(concurrency)))
    result.seconds = time.perf_counter() - started
    return result


# The load's HTTP client: HTTP/1.1 over kept-alive connections, each request's bytes built before the
# clock starts. httpx spends about 2.6 ms of CPU per request on a 2-core machine, several times what the
# API spends on a submission, so that with it the bench measured itself.
Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


def _encoded(bodies: Sequence[dict[str, Any]]) -> list[bytes]:
    return [json.dumps(body, separators=(",", ":")).encode() for body in bodies]


async def _exchange(connection: Connection, request: bytes) -> tuple[int, bytes, bool]:
    """Send one request; (status, body, whether the connection stays open). Content-Length bodies only
    (what the API sends); ValueError for anything else."""
    reader, writer = connection
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    fields = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        fields[name.strip().lower()] = value.strip()
    if "content-length" not in fields:
        raise ValueError("an answer without Content-Length")
    body = await reader.readexactly(int(fields["content-length"]))
    return status, body, fields.get("connection", "").lower() != "close"


def _close(connection: Connection | None) -> Connection | None:
    """Close it; None, the connection a client holds after."""
    if connection is not None:
        connection[1].close()
    return None
