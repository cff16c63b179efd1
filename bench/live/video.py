"""A replay of video jobs through the stack: FlexCache's figures read from the jobs themselves,
so that a cached run and a vanilla run (`--profile vanilla`: the cache off) of the same trace compare.

Where the workers judge their videos (lab:video: the lab's video judge, metrics.quality), the judged
quality of misses, whole-prompt hits and decoupled (stitched) hits, and, for the hits the replay audited
(the same request generated afresh with the cache off, bench.live.audit), each kind's drop: the fresh
video's quality less the hit's, with a 95% bootstrap interval of its mean (bench.quality.video).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from bench.quality.video import interval

KINDS = ("miss", "whole", "decoupled")


def video_summary(
    jobs: Iterable[Mapping[str, Any] | None],
    *,
    elapsed_s: float | None = None,
    fresh: Sequence[float | None] = (),
) -> dict[str, Any]:
    """Hits by kind (whole prompt, decoupled), denoiser evaluations against T per job (the vanilla run's
    work), jobs per second over the replay when `elapsed_s` is given, and the judged quality by kind
    (module doc; `fresh[i]`: the audit's score of jobs[i], None where it was not audited)."""
    listed = list(jobs)
    audits = list(fresh) + [None] * (len(listed) - len(fresh))
    done = [
        (job, audit)
        for job, audit in zip(listed, audits, strict=True)
        if job is not None and job.get("status") == "succeeded"
    ]
    kinds: Counter[str] = Counter()
    evaluations = requested = 0
    judged: dict[str, list[tuple[float, float | None]]] = {kind: [] for kind in KINDS}
    for job, audit in done:
        metrics = job.get("metrics") or {}
        kind = str(metrics.get("video_hit") or "whole") if metrics.get("route") == "hit" else "miss"
        if kind != "miss":
            kinds[kind] += 1
        if metrics.get("quality") is not None:
            judged[kind].append((float(metrics["quality"]), audit))
        evaluations += sum(int(count) for count in (metrics.get("denoiser_evaluations") or {}).values())
        requested += int((job.get("input") or {}).get("steps") or 0)
    hits = sum(kinds.values())
    return {
        "jobs": len(done),
        "hits": {"whole": kinds.get("whole", 0), "decoupled": kinds.get("decoupled", 0)},
        "hit_rate": round(hits / len(done), 4) if done else None,
        "denoiser_evaluations": evaluations,
        "vanilla_evaluations": requested,
        "compute_saved": round(1.0 - evaluations / requested, 4) if requested else None,
        "throughput_rps": round(len(done) / elapsed_s, 4) if elapsed_s and done else None,
        "quality": _quality(judged) if any(judged.values()) else None,
    }


def _quality(judged: Mapping[str, list[tuple[float, float | None]]]) -> dict[str, Any]:
    """Per kind: videos judged, their mean, and (hits) the audited ones' drop and its interval."""
    by_kind: dict[str, Any] = {}
    for kind, pairs in judged.items():
        row: dict[str, Any] = {"judged": len(pairs), "mean": _mean([score for score, _ in pairs])}
        if kind != "miss":
            drops = [audit - score for score, audit in pairs if audit is not None]
            span = [round(bound, 4) for bound in interval(drops)] if drops else None
            row |= {"audited": len(drops), "drop_mean": _mean(drops), "drop_ci95": span}
        by_kind[kind] = row
    return by_kind


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None
