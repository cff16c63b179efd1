"""The PNG sizes of a replay's images (png_bytes): a few succeeded jobs' images read as PNG, decoded on
read by the stack."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

import httpx

if TYPE_CHECKING:
    from bench.live.records import JobRecord
    from bench.live.replay import ReplayOptions


async def fetch_png_sizes(options: ReplayOptions, records: Sequence[JobRecord], count: int) -> list[int]:
    """Sizes of the PNGs of the first `count` succeeded jobs (decoded on read by the stack)."""
    sizes: list[int] = []
    headers = {"Authorization": f"Bearer {options.api_key}"}
    async with httpx.AsyncClient(
        base_url=options.base_url, headers=headers, timeout=options.http_timeout_s
    ) as client:
        for record in records:
            if len(sizes) >= count:
                break
            if record.job is None or record.job.get("status") != "succeeded":
                continue
            for _ in range(3):
                response = await client.get(
                    f"/v1/generations/{record.job['id']}/image", params={"format": "png"}
                )
                if response.status_code == 200:
                    sizes.append(len(response.content))
                    break
                if response.status_code != 503:
                    break
                await asyncio.sleep(float(response.headers.get("Retry-After", "1")))
    return sizes
