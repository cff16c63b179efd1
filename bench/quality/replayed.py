"""Quality in a replay: the judge's scores the workers recorded, and a sample of fresh generations.

Where the lab's models run, every job carries the judge's score of its image (metrics.quality). A
miss is a fresh generation of its prompt and seed by the large model, so its drop is 0 by
definition; for a sample of hits (the first `sample` in request order) this process generates the
same prompt, seed, steps and guidance afresh with the large lab model (bench.quality.sampler, the
runtime's steps) and judges it: the hit's drop is that fresh score minus the hit's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from bench.run.outcomes import RequestOutcome
from core.settings import Settings

DEFAULT_SAMPLE = 64


def replay_quality(
    outcomes: Sequence[RequestOutcome],
    jobs: Sequence[Mapping[str, Any] | None],
    *,
    settings: Settings,
    sample: int = DEFAULT_SAMPLE,
) -> tuple[list[RequestOutcome], str | None]:
    """Outcomes with quality (and, for misses and sampled hits, fresh_quality); source None when no
    job was judged (models other than the lab's)."""
    judged: list[RequestOutcome] = []
    for outcome, job in zip(outcomes, jobs, strict=True):
        quality = ((job or {}).get("metrics") or {}).get("quality")
        if quality is None:
            judged.append(outcome)
            continue
        fresh = float(quality) if not outcome.hit else None
        judged.append(replace(outcome, quality=float(quality), fresh_quality=fresh))
    if all(o.quality is None for o in judged):
        return list(outcomes), None
    picked = [i for i, o in enumerate(judged) if o.hit and o.quality is not None][:sample]
    large = settings.model_source("large")
    if picked and large.startswith("lab:"):
        scores = fresh_scores(settings, large, [jobs[i] or {} for i in picked])
        for index, score in zip(picked, scores, strict=True):
            judged[index] = replace(judged[index], fresh_quality=score)
    source = f"judged by the workers; fresh generations of {len(picked)} sampled hits on {large}"
    return judged, source


def fresh_scores(settings: Settings, large: str, jobs: Sequence[Mapping[str, Any]]) -> list[float]:
    """The judge's score of a fresh large-model generation of each job's prompt, seed and steps."""
    from bench.quality.sampler import Sampler
    from lab.judge import Judge
    from lab.models import ensure_lab_models
    from workers.runtime.loading import builtin_path

    judge = Judge.load(ensure_lab_models(settings).judge)
    scores: list[float] = []
    samplers: dict[tuple[int, float], Sampler] = {}
    for job in jobs:
        given = job.get("input") or {}
        key = (int(given.get("steps", settings.steps)), float(given.get("guidance", 7.5)))
        if key not in samplers:
            samplers[key] = Sampler(builtin_path(settings, large), steps=key[0], guidance=key[1])
        sampler = samplers[key]
        prompt, seed = str(given.get("prompt", "")), int(given.get("seed", 0))
        images = sampler.images(sampler.generate([prompt], [seed]).latents)
        score = judge.score(images, [prompt])[0]
        scores.append(0.0 if score is None else score)
    return scores
