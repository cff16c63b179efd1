"""The judged quality of a replay's images, read by the benchmark where the workers did not read it.

A worker scores an image only when it has its pixels anyway (an eager request, an image-mode cache
entry: workers.kinds.image.generation); otherwise it stores the latent and the decode pool decodes it
on read (LatentBox 4.1), so a hit or a vanilla job carries no `metrics.quality`. Measurement belongs to
the benchmark: after the replay's timed window, it reads each such job's image through the API (decoded
on read, as a client would get it; PNG is lossless, so these are the pixels a worker would have scored)
and scores it with the scorer the workers are configured with (workers.runtime.quality.configured_scorer:
the lab's judge on the lab's models, CLIP score on real ones), filling in `metrics.quality`. The replay's
quality figures then cover every job, whatever the stack scored on its own.
"""

from __future__ import annotations

import asyncio
import io
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final

import httpx
from PIL import Image

from bench.live.pngs import read_png
from core.scoring import Scorer
from core.settings import Settings
from core.vocabulary import Role

if TYPE_CHECKING:
    from bench.live.records import JobRecord

FETCH_CONCURRENCY: Final = 4  # reads at a time: the stack's decode node batches what arrives together


def configured_scorer_of(settings: Settings) -> Scorer | None:
    """The scorer the stack's large workers judge with (None where nothing judges its images)."""
    from workers.runtime.embedders import build_image_embedder
    from workers.runtime.quality import configured_scorer

    return configured_scorer(settings, Role.LARGE, lambda: build_image_embedder(settings))


async def fetch_image(client: httpx.AsyncClient, job_id: str) -> Image.Image | None:
    """A succeeded job's image (bench.live.pngs.read_png); None when it cannot be read."""
    png = await read_png(client, job_id)
    return None if png is None else Image.open(io.BytesIO(png)).convert("RGB")


async def judge_unjudged(
    client: httpx.AsyncClient, scorer: Scorer, jobs: Sequence[Mapping[str, Any] | None]
) -> list[float | None]:
    """Each job's quality: its own `metrics.quality`, else its image read and scored here (None: not
    succeeded, a prompt the scorer cannot read, or an image that could not be read)."""
    slots = asyncio.Semaphore(FETCH_CONCURRENCY)

    async def one(job: Mapping[str, Any] | None) -> float | None:
        if job is None or job.get("status") != "succeeded":
            return None
        known = (job.get("metrics") or {}).get("quality")
        if known is not None:
            return float(known)
        prompt = str((job.get("input") or {}).get("prompt") or "")
        if not scorer.reads(prompt):
            return None
        async with slots:
            image = await fetch_image(client, str(job["id"]))
        return None if image is None else scorer.score([image], [prompt])[0]

    return list(await asyncio.gather(*(one(job) for job in jobs)))


def with_quality(job: Mapping[str, Any], quality: float | None) -> dict[str, Any]:
    """The job object with `metrics.quality` set."""
    return {**job, "metrics": {**(job.get("metrics") or {}), "quality": quality}}


def judge_records(
    records: Sequence[JobRecord], *, base_url: str, api_key: str, scorer: Scorer | None
) -> list[JobRecord]:
    """The records with every succeeded image job's quality known where the scorer reads its prompt;
    what it cost on stderr. Video jobs are left as their workers judged them."""
    if scorer is None:
        return list(records)
    images = [r.job if r.job is not None and r.job.get("kind", "image") == "image" else None for r in records]
    missing = sum(
        1 for job in images if job is not None and (job.get("metrics") or {}).get("quality") is None
    )
    if not missing:
        return list(records)
    started = time.monotonic()

    async def run() -> list[float | None]:
        headers = {"Authorization": f"Bearer {api_key}"}
        async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=60.0) as client:
            return await judge_unjudged(client, scorer, images)

    scores = asyncio.run(run())
    read = sum(
        1
        for job, score in zip(images, scores, strict=True)
        if score is not None and job is not None and (job.get("metrics") or {}).get("quality") is None
    )
    print(
        f"judged {read} of the {missing} images the workers had not (read back through the API, "
        f"{scorer.name}; the others' prompts it cannot read) in {time.monotonic() - started:.1f} s",
        file=sys.stderr,
    )
    return [
        replace(record, job=with_quality(job, score)) if job is not None and score is not None else record
        for record, job, score in zip(records, images, scores, strict=True)
    ]
