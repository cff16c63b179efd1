"""A replay's images read back through the API as PNG, decoded on read by the stack: their sizes
(png_bytes), and the one read both that and the benchmark's own judging (bench.live.judging) go through."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

import httpx

if TYPE_CHECKING:
    from bench.live.records import JobRecord

READ_RETRIES: Final = 5  # a 503 (the decode pool busy) is retried after its Retry-After


async def read_png(client: httpx.AsyncClient, job_id: str, *, retries: int = READ_RETRIES) -> bytes | None:
    """A succeeded job's image as PNG bytes; None when it cannot be read (a 503 is waited out up to
    `retries` times, as the server asks)."""
    for _ in range(retries):
        response = await client.get(f"/v1/generations/{job_id}/image", params={"format": "png"})
        if response.status_code == 200:
            return response.content
        if response.status_code != 503:
            return None
        await asyncio.sleep(float(response.headers.get("Retry-After", "1")))
    return None


async def fetch_png_sizes(
    base_url: str, api_key: str, timeout_s: float, records: Sequence[JobRecord], count: int
) -> list[int]:
    """Sizes of the PNGs of the first `count` succeeded jobs (decoded on read by the stack)."""
    sizes: list[int] = []
    headers = {"Authorization": f"Bearer {api_key}"}
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=timeout_s) as client:
        for record in records:
            if len(sizes) >= count:
                break
            if record.job is None or record.job.get("status") != "succeeded":
                continue
            png = await read_png(client, str(record.job["id"]), retries=3)
            if png is not None:
                sizes.append(len(png))
    return sizes
