"""The job object of a video job, as the API answers it and the webhooks send it: built from
a row in memory (no services), and read back into the same model."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from db.models import Job
from jobs.representation import (
    Generation,
    GenerationInput,
    GenerationMetrics,
    GenerationUrls,
    VideoGenerationInput,
    VideoGenerationMetrics,
    VideoGenerationUrls,
    generation_json,
)

T0 = datetime(2026, 11, 25, 10, 0, tzinfo=UTC)


def job_row(**values: Any) -> Job:
    columns: dict[str, Any] = {
        "id": uuid.UUID(int=7),
        "tenant_id": uuid.UUID(int=1),
        "status": "succeeded",
        "kind": "image",
        "prompt": "a red kite",
        "negative_prompt": None,
        "seed": 3,
        "steps": 20,
        "width": 64,
        "height": 64,
        "guidance": 7.5,
        "cache_mode": "auto",
        "decode_mode": "lazy",
        "webhook_url": None,
        "webhook_events_filter": ["completed"],
        "route": "hit",
        "similarity": 0.93,
        "k": 10,
        "source_entry_id": uuid.UUID(int=2),
        "models_used": ["tiny-video"],
        "denoiser_evals": {"tiny-video": 10},
        "vae_decodes": 1,
        "created_at": T0,
        "started_at": T0 + timedelta(seconds=1),
        "finished_at": T0 + timedelta(seconds=4),
    }
    return Job(**{**columns, **values})


VIDEO = {"kind": "video", "frames": 16, "fps": 8, "noise_window": 4}


def test_a_video_job_carries_its_frames_its_video_link_and_its_hit() -> None:
    background = uuid.UUID(int=5)
    body = generation_json(
        job_row(**VIDEO, video_hit="decoupled", background_entry_id=background), base_url="https://r.example"
    )
    own = f"https://r.example/v1/generations/{uuid.UUID(int=7)}"
    assert body["kind"] == "video"
    assert (body["input"]["frames"], body["input"]["fps"], body["input"]["noise_window"]) == (16, 8, 4)
    assert body["output"] == {"video": f"{own}/video", "format": "webp"}
    assert body["urls"] == {"self": own, "cancel": f"{own}/cancel", "video": f"{own}/video"}
    assert body["metrics"]["video_hit"] == "decoupled"
    assert body["metrics"]["background_entry"] == str(background)
    assert body["metrics"]["source_entry"] == str(uuid.UUID(int=2))  # the object's entry
    parsed = Generation.model_validate(body)  # a receiver's round trip keeps the video forms
    assert isinstance(parsed.input, VideoGenerationInput) and isinstance(parsed.urls, VideoGenerationUrls)
    assert isinstance(parsed.metrics, VideoGenerationMetrics)


def test_a_video_miss_without_a_window_has_nulls_not_absent_fields() -> None:
    body = generation_json(job_row(**{**VIDEO, "noise_window": None}, route="miss", k=None), base_url="")
    assert body["input"]["noise_window"] is None
    assert body["metrics"]["video_hit"] is None and body["metrics"]["background_entry"] is None


def test_an_unknown_video_hit_reads_as_null_rather_than_failing_the_read() -> None:
    body = generation_json(job_row(**VIDEO, video_hit="partial"), base_url="")
    assert body["metrics"]["video_hit"] is None


def test_an_image_job_has_no_video_fields() -> None:
    body = generation_json(job_row(), base_url="")
    assert body["kind"] == "image"
    assert set(body["input"]) == set(GenerationInput.model_fields)
    assert set(body["metrics"]) == set(GenerationMetrics.model_fields)
    assert set(body["urls"]) == {"self", "cancel", "image"}
    assert body["output"] == {
        "image": f"/v1/generations/{uuid.UUID(int=7)}/image?format=png",
        "format": "png",
    }
    parsed = Generation.model_validate(body)
    assert type(parsed.input) is GenerationInput and type(parsed.urls) is GenerationUrls


def test_a_stored_job_from_before_video_jobs_reads_as_an_image() -> None:
    body = {**generation_json(job_row(), base_url="")}
    del body["kind"]  # a webhook body an older server signed
    assert Generation.model_validate(body).kind == "image"
