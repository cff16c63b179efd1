"""bench.live.video: FlexCache's figures from a replay's video jobs."""

from __future__ import annotations

from typing import Any

from bench.live.video import video_summary


def job(
    route: str, evaluations: int, video_hit: str | None = None, status: str = "succeeded"
) -> dict[str, Any]:
    metrics = {"route": route, "denoiser_evaluations": {"tiny-video": evaluations}, "video_hit": video_hit}
    return {"status": status, "input": {"steps": 50}, "metrics": metrics}


def test_hits_by_kind_compute_saved_and_throughput() -> None:
    jobs = [job("miss", 50), job("hit", 30, "whole"), job("hit", 25, "decoupled"), job("miss", 50), None]
    jobs.append(job("miss", 3, status="failed"))  # neither counted nor weighed
    summary = video_summary(jobs, elapsed_s=8.0)
    assert summary["jobs"] == 4 and summary["hits"] == {"whole": 1, "decoupled": 1}
    assert summary["hit_rate"] == 0.5
    assert (summary["denoiser_evaluations"], summary["vanilla_evaluations"]) == (155, 200)
    assert summary["compute_saved"] == 0.225 and summary["throughput_rps"] == 0.5


def test_nothing_done_has_no_rates() -> None:
    assert video_summary([None], elapsed_s=1.0) == {
        "jobs": 0, "hits": {"whole": 0, "decoupled": 0}, "hit_rate": None, "denoiser_evaluations": 0,
        "vanilla_evaluations": 0, "compute_saved": None, "throughput_rps": None,
    }  # fmt: skip
