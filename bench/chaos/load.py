"""Intake load: many submissions from concurrent clients; submit throughput and latency.

Used by `reprise bench chaos --scenarios load` and by the other scenarios to submit their jobs.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx


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
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    for body in bodies:
        queue.put_nowait(body)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)

    async def client_loop(client: httpx.AsyncClient) -> None:
        while not queue.empty():
            body = queue.get_nowait()
            started = time.perf_counter()
            try:
                response = await client.post("/v1/generations", json=body, headers=headers)
            except httpx.HTTPError as error:
                result.errors[type(error).__name__] += 1
                continue
            result.latencies_ms.append((time.perf_counter() - started) * 1e3)
            result.statuses[response.status_code] += 1
            if response.status_code in (200, 202):
                result.job_ids.append(response.json()["id"])

    async with httpx.AsyncClient(base_url=base_url, timeout=timeout_s, limits=limits) as client:
        started = time.perf_counter()
        await asyncio.gather(*(client_loop(client) for _ in range(concurrency)))
        result.seconds = time.perf_counter() - started
    return result
