"""Where a replay's jobs spent their time, from each job object's `metrics.stages_ms` (workers.stages).

    stages                {"hit": {STAGE: {"median_ms", "total_s", "jobs"}}, "miss": {...}}: per route, a
                          stage's median over the succeeded jobs that ran it, and its seconds summed
    device_s_per_request  the jobs' model calls (encode_prompt, denoise, vae_decode, vae_encode) summed,
                          over the requests that succeeded: what a GPU would spend on each request

`queue` is waiting, not work: it is summarized like the others and never counted as a cost.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from typing import Any

from core.vocabulary import device_ms


def _succeeded(jobs: Iterable[Mapping[str, Any] | None]) -> list[Mapping[str, Any]]:
    return [job for job in jobs if job is not None and job.get("status") == "succeeded"]


def stage_summary(jobs: Iterable[Mapping[str, Any] | None]) -> dict[str, dict[str, dict[str, float]]]:
    """Per route (hit, miss), per stage: median ms, total seconds and the jobs that ran it."""
    samples: dict[str, dict[str, list[float]]] = {}
    for job in _succeeded(jobs):
        metrics = job.get("metrics") or {}
        route = str(metrics.get("route") or "miss")
        for name, ms in (metrics.get("stages_ms") or {}).items():
            samples.setdefault(route, {}).setdefault(str(name), []).append(float(ms))
    return {
        route: {
            name: {
                "median_ms": round(statistics.median(values), 3),
                "total_s": round(sum(values) / 1e3, 3),
                "jobs": len(values),
            }
            for name, values in by_stage.items()
        }
        for route, by_stage in sorted(samples.items())
    }


def device_s_per_request(jobs: Iterable[Mapping[str, Any] | None]) -> float | None:
    """Mean device seconds a succeeded request took (its model calls); None when no job recorded stages."""
    per_job = [
        device_ms(stages) / 1e3
        for job in _succeeded(jobs)
        if (stages := (job.get("metrics") or {}).get("stages_ms"))
    ]
    return round(statistics.fmean(per_job), 5) if per_job else None


def stages_text(summary: Mapping[str, Mapping[str, Mapping[str, float]]]) -> str:
    """One line per route: each stage's median ms, in the jobs' order."""
    lines = []
    for route, by_stage in summary.items():
        parts = ", ".join(f"{name} {figures['median_ms']:.1f}" for name, figures in by_stage.items())
        lines.append(f"{route}: {parts}")
    return "; ".join(lines)
