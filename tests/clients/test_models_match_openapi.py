"""The client's typed models against the server's OpenAPI document: a field the server adds, renames or
drops shows up here, not in a user's KeyError."""

from __future__ import annotations

import dataclasses
from typing import Any

from reprise_client.models import Generation, Progress, QueuePlace

from api.main import create_app
from core.settings import Settings


def _schemas() -> dict[str, Any]:
    spec = create_app(Settings.model_validate({})).openapi()
    schemas: dict[str, Any] = spec["components"]["schemas"]
    return schemas


def _fields(model: type) -> set[str]:
    return {field.name for field in dataclasses.fields(model) if field.name != "raw"}


def test_the_generation_model_has_exactly_the_documented_properties() -> None:
    assert _fields(Generation) == set(_schemas()["Generation"]["properties"])


def test_progress_and_queue_place_match_their_schemas() -> None:
    schemas = _schemas()
    assert _fields(Progress) == set(schemas["GenerationProgress"]["properties"])
    assert _fields(QueuePlace) == set(schemas["GenerationQueue"]["properties"])


def test_the_fields_the_client_requires_are_required_by_the_schema() -> None:
    schemas = _schemas()
    assert {"id", "status", "input", "metrics", "urls"} <= set(schemas["Generation"]["required"])
    assert {"step", "total"} <= set(schemas["GenerationProgress"]["required"])
    assert {"position"} <= set(schemas["GenerationQueue"]["required"])


def test_a_served_generation_parses_into_the_model() -> None:
    body = {
        "id": "0f6a",
        "status": "processing",
        "input": {},
        "output": None,
        "error": None,
        "metrics": {},
        "urls": {"self": "/v1/generations/0f6a"},
        "progress": {"step": 12, "total": 50, "estimated_remaining_s": 3.5},
        "queue": None,
        "created_at": "2026-11-25T10:00:00Z",
        "started_at": None,
        "completed_at": None,
    }
    job = Generation.from_json(body)
    assert job.progress == Progress(12, 50, 3.5) and job.queue is None and not job.done
    waiting = Generation.from_json({**body, "status": "starting", "progress": None, "queue": {"position": 3}})
    assert waiting.queue == QueuePlace(3, None, None)
