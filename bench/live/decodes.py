"""The replay's decode figures (LatentBox 4.1): VAE decodes per job, from each job's
metrics, and per image read, from the stack's /v1/stats counters over the replay's window."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import httpx

from bench.run.report import Decodes

MIN_WINDOW_S = 60  # the shortest window /v1/stats accepts


def stack_decode_counters(
    base_url: str, api_key: str, *, window_s: float, timeout_s: float
) -> Mapping[str, Any]:
    """/v1/stats' `decodes` over the last `window_s` seconds (whole statistics intervals); {} when it
    cannot be read (an older stack, or the API down)."""
    try:
        response = httpx.get(
            f"{base_url.rstrip('/')}/v1/stats",
            params={"window_s": max(MIN_WINDOW_S, math.ceil(window_s))},
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=timeout_s,
        )
        body = response.json() if response.status_code == 200 else {}
    except (httpx.HTTPError, ValueError):
        return {}
    counters = body.get("decodes") if isinstance(body, dict) else None
    return counters if isinstance(counters, dict) else {}


def decode_figures(jobs: Iterable[Mapping[str, Any] | None], counters: Mapping[str, Any]) -> Decodes:
    """Decodes per succeeded job (metrics.vae_decodes) and per read (the stack's counters)."""
    done = [job for job in jobs if job is not None and job.get("status") == "succeeded"]
    decodes = sum(int((job.get("metrics") or {}).get("vae_decodes") or 0) for job in done)
    reads = counters.get("image_reads")
    read_decodes = counters.get("read_decodes")
    return Decodes(
        jobs=len(done),
        generation_decodes=decodes,
        reads=int(reads) if isinstance(reads, int) else None,
        read_decodes=int(read_decodes) if isinstance(read_decodes, int) else None,
    )
