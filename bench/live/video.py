"""A replay of video jobs through the stack: FlexCache's figures read from the jobs themselves,
so that a cached run and a vanilla run (`--profile vanilla`: the cache off) of the same trace compare."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any


def video_summary(
    jobs: Iterable[Mapping[str, Any] | None], *, elapsed_s: float | None = None
) -> dict[str, Any]:
    """Hits by kind (whole prompt, decoupled), denoiser evaluations against T per job (the vanilla run's
    work), and jobs per second over the replay when `elapsed_s` is given."""
    done = [job for job in jobs if job is not None and job.get("status") == "succeeded"]
    kinds: Counter[str] = Counter()
    evaluations = requested = 0
    for job in done:
        metrics = job.get("metrics") or {}
        if metrics.get("route") == "hit":
            kinds[str(metrics.get("video_hit") or "whole")] += 1
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
    }
