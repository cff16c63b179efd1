"""bench.live.video: FlexCache's figures from a replay's video jobs."""

from __future__ import annotations

from typing import Any

import pytest

from bench.live.audit import audit_body
from bench.live.video import video_summary


def job(
    route: str,
    evaluations: int,
    video_hit: str | None = None,
    status: str = "succeeded",
    quality: float | None = None,
) -> dict[str, Any]:
    metrics = {"route": route, "denoiser_evaluations": {"tiny-video": evaluations}, "video_hit": video_hit}
    return {"status": status, "input": {"steps": 50}, "metrics": metrics | {"quality": quality}}


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
        "jobs": 0,
        "hits": {"whole": 0, "decoupled": 0},
        "hit_rate": None,
        "denoiser_evaluations": 0,
        "vanilla_evaluations": 0,
        "compute_saved": None,
        "throughput_rps": None,
        "quality": None,
    }


def test_judged_quality_by_kind_and_each_hit_kinds_drop_against_its_audit() -> None:
    jobs = [
        job("miss", 50, quality=0.8),
        job("miss", 50, quality=0.6),
        job("hit", 40, "whole", quality=0.5),
        job("hit", 40, "whole", quality=0.7),  # not audited: judged, no drop
        job("hit", 40, "decoupled", quality=0.4),
        job("hit", 40, "decoupled", quality=0.6),
        job("hit", 40, "decoupled", status="failed", quality=0.0),  # not counted
    ]
    fresh = [None, None, 0.75, None, 0.5, 0.5, 0.9]

    quality = video_summary(jobs, fresh=fresh)["quality"]

    assert quality["miss"] == {"judged": 2, "mean": 0.7}
    assert quality["whole"] | {"drop_ci95": None} == {
        "judged": 2,
        "mean": 0.6,
        "audited": 1,
        "drop_mean": 0.25,
        "drop_ci95": None,
    }
    assert quality["decoupled"]["judged"] == quality["decoupled"]["audited"] == 2
    assert quality["decoupled"]["drop_mean"] == pytest.approx(0.0)
    low, high = quality["decoupled"]["drop_ci95"]
    assert low == pytest.approx(-0.1) and high == pytest.approx(0.1)


def test_a_video_hit_is_audited_as_the_same_video_request_with_the_cache_off() -> None:
    video = {
        "kind": "video",
        "input": {
            "prompt": "a red disk",
            "seed": 7,
            "steps": 50,
            "frames": 8,
            "fps": 4,
            "noise_window": None,
        },
    }
    image = {"kind": "image", "input": {"prompt": "a red disk", "seed": 7, "frames": 8}}

    assert audit_body(video) == {
        "prompt": "a red disk",
        "seed": 7,
        "steps": 50,
        "frames": 8,
        "fps": 4,
        "kind": "video",
        "cache": "off",
    }
    assert audit_body(image) == {"prompt": "a red disk", "seed": 7, "cache": "off"}
