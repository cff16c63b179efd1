"""Quality in a replay: the scores the workers recorded, and audits of a sample of hits.

Where the workers judge their images (the lab's models: the lab judge; real models with CLIP weights:
CLIP score), every job carries its score (metrics.quality). A miss is a fresh generation of its
prompt and seed, so its drop is 0 by definition. A hit's drop needs a fresh generation of the same
request: the replay audits a uniform random sample of the judged hits (`audit_sample`, seeded) by
submitting each again to the stack with the cache off (bench.live.audit), and the hit's drop is that
job's score minus the hit's. The drop over all requests, its interval and the by-bin drops are
bench.quality.drops'.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from bench.quality.drops import AUDIT_SEED, INTERVAL_METHOD
from bench.run.outcomes import RequestOutcome

DEFAULT_SAMPLE = 64


def judged_quality(job: Mapping[str, Any] | None) -> float | None:
    quality = ((job or {}).get("metrics") or {}).get("quality")
    return None if quality is None else float(quality)


def audit_sample(
    outcomes: Sequence[RequestOutcome],
    jobs: Sequence[Mapping[str, Any] | None],
    sample: int,
    *,
    seed: int = AUDIT_SEED,
) -> list[int]:
    """Indices of up to `sample` succeeded, judged requests served with less than the full large model
    alone (hits, kept light images, runs with the step cache: RequestOutcome.reduced), drawn uniformly at
    random (seeded), ascending."""
    judged = [
        index
        for index, (outcome, job) in enumerate(zip(outcomes, jobs, strict=True))
        if outcome.succeeded and outcome.reduced and judged_quality(job) is not None
    ]
    if len(judged) <= sample:
        return judged
    chosen = np.random.default_rng(seed).choice(len(judged), size=sample, replace=False)
    return sorted(judged[int(i)] for i in chosen)


def replay_quality(
    outcomes: Sequence[RequestOutcome],
    jobs: Sequence[Mapping[str, Any] | None],
    *,
    audits: Mapping[int, float | None],
) -> tuple[list[RequestOutcome], str | None]:
    """Outcomes with quality (and, for misses and audited hits, fresh_quality); `audits` maps an
    outcome's index to its audit's score (None: the audit failed). Source None when no job was judged."""
    judged: list[RequestOutcome] = []
    for index, (outcome, job) in enumerate(zip(outcomes, jobs, strict=True)):
        quality = judged_quality(job)
        if quality is None:
            judged.append(outcome)
            continue
        fresh = quality if not outcome.reduced else audits.get(index)
        judged.append(replace(outcome, quality=quality, fresh_quality=fresh))
    if all(o.quality is None for o in judged):
        return list(outcomes), None
    done = sum(1 for index, score in audits.items() if score is not None and judged[index].reduced)
    reduced = sum(1 for o in judged if o.reduced and o.quality is not None and o.succeeded)
    source = (
        f"judged with the workers' scorer (by the workers where they decoded the image, else on the image "
        f"read back: bench.live.judging); {done} of {reduced} requests served with less than the full model "
        f"(hits, kept light images, step-cached runs) audited against a fresh generation on the stack (same "
        f"request, every cache off); drop over all requests by stratum, 95% interval: {INTERVAL_METHOD}"
    )
    return judged, source
