"""Audits of hits on a running stack: the same request generated afresh, with the cache off.

Each audited job's request (prompt, negative prompt, seed, steps, size, guidance, from the job object's
`input`) is POSTed again with `cache: off`, so the stack neither looks it up nor caches it, and served
as it serves any miss; the score of its image (its workers', else read and scored here by
bench.live.judging) is the fresh quality the hit is compared with (bench.run.replayed). Audits run
after the replay, so they change none of its timings, and a few at a time (AUDIT_CONCURRENCY), as the
replay's clients do.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

import httpx

from bench.live.judging import judge_unjudged
from bench.run.outcomes import RequestOutcome
from bench.run.replayed import audit_sample
from core.scoring import Scorer

AUDIT_CONCURRENCY: Final = 4  # the replay's default clients (bench.run.options)
REQUEST_FIELDS: Final = ("prompt", "negative_prompt", "seed", "steps", "width", "height", "guidance")
VIDEO_FIELDS: Final = ("frames", "fps", "noise_window")  # a video job's input besides an image job's
TERMINAL: Final = frozenset({"succeeded", "failed", "canceled"})


def audit_body(job: Mapping[str, Any]) -> dict[str, Any]:
    """The job's request again, with the cache off (None fields left to the server's defaults)."""
    given = job.get("input") or {}
    fields = REQUEST_FIELDS + (VIDEO_FIELDS if job.get("kind") == "video" else ())
    body: dict[str, Any] = {name: given[name] for name in fields if given.get(name) is not None}
    if job.get("kind") == "video":
        body["kind"] = "video"
    if "guidance" in body:
        body["guidance"] = float(body["guidance"])
    return body | {"cache": "off"}


async def _audit_one(
    client: httpx.AsyncClient,
    job: Mapping[str, Any],
    slots: asyncio.Semaphore,
    timeout_s: float,
    scorer: Scorer | None,
) -> float | None:
    async with slots:
        try:
            return await _audit_request(client, job, timeout_s, scorer)
        except httpx.HTTPError:
            return None


async def _audit_request(
    client: httpx.AsyncClient, job: Mapping[str, Any], timeout_s: float, scorer: Scorer | None
) -> float | None:
    deadline = time.monotonic() + timeout_s
    response = await client.post("/v1/generations", json=audit_body(job))
    while response.status_code in (429, 503) and time.monotonic() < deadline:  # wait as the server asks
        await asyncio.sleep(float(response.headers.get("Retry-After", "1")))
        response = await client.post("/v1/generations", json=audit_body(job))
    if response.status_code not in (200, 202):
        return None
    fresh: dict[str, Any] = response.json()
    while fresh.get("status") not in TERMINAL and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        polled = await client.get(f"/v1/generations/{fresh['id']}")
        if polled.status_code == 200:
            fresh = polled.json()
    if fresh.get("status") != "succeeded":
        return None
    if scorer is not None:  # its own score, else its image read and scored here (bench.live.judging)
        return (await judge_unjudged(client, scorer, [fresh]))[0]
    quality = (fresh.get("metrics") or {}).get("quality")
    return None if quality is None else float(quality)


async def _audit_all(
    base_url: str, api_key: str, jobs: Sequence[Mapping[str, Any]], timeout_s: float, scorer: Scorer | None
) -> list[float | None]:
    slots = asyncio.Semaphore(AUDIT_CONCURRENCY)
    headers = {"Authorization": f"Bearer {api_key}"}
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=30.0) as client:
        tasks = [_audit_one(client, job, slots, timeout_s, scorer) for job in jobs]
        return list(await asyncio.gather(*tasks, return_exceptions=False))


def audit_hits(
    base_url: str,
    api_key: str,
    replayed: Sequence[tuple[RequestOutcome, Mapping[str, Any] | None]],
    sample: int,
    *,
    scorer: Scorer | None = None,
) -> dict[int, float | None]:
    """Index -> the judged quality of a fresh, cache-off generation of its request, for up to `sample`
    judged hits drawn at random (bench.run.replayed.audit_sample); its cost on stderr."""
    picked = audit_sample([o for o, _ in replayed], [job for _, job in replayed], sample)
    if not picked:
        return {}
    started = time.monotonic()
    scores = audit_jobs(base_url, api_key, [replayed[i][1] or {} for i in picked], scorer=scorer)
    print(
        f"audited {sum(s is not None for s in scores)} of {len(picked)} sampled hits afresh (cache off) "
        f"in {time.monotonic() - started:.1f} s",
        file=sys.stderr,
    )
    return dict(zip(picked, scores, strict=True))


def audit_jobs(
    base_url: str,
    api_key: str,
    jobs: Sequence[Mapping[str, Any]],
    *,
    timeout_s: float = 600.0,
    scorer: Scorer | None = None,
) -> list[float | None]:
    """The judged quality of a fresh, cache-off generation of each job's request (None: not judged,
    failed, or not done within `timeout_s`), in the jobs' order; `scorer` reads the images the workers
    did not judge (bench.live.judging)."""
    if not jobs:
        return []
    return asyncio.run(_audit_all(base_url, api_key, jobs, timeout_s, scorer))
