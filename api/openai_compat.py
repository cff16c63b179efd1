"""OpenAI's images API, as Reprise speaks it on POST /v1/images/generations: the request and response
shapes of `client.images.generate(...)` (OpenAI API reference, "Images: create image") and the sizes
and models a deployment serves. api/openai_errors.py answers that path's errors in OpenAI's shape;
api/routes/openai_images.py holds the route.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from api.problems import Problem

MAX_IMAGES = 10  # OpenAI's own bound on `n` for its images endpoint

ResponseFormat = Literal["url", "b64_json"]


class ImageGenerationRequest(BaseModel):
    """OpenAI's create-image body. `quality` and `style` are accepted for SDK compatibility and change
    nothing: a deployment has one model and its own steps."""

    model_config = ConfigDict(extra="forbid")

    prompt: str = Field(min_length=1, description="What to draw.")
    model: str | None = Field(None, description="One of the served models (`GET` none: see the 400's list).")
    n: int = Field(1, ge=1, le=MAX_IMAGES, description=f"Images to make, 1..{MAX_IMAGES}: one job each.")
    size: str | None = Field(None, description="WIDTHxHEIGHT, one of the deployment's native sizes.")
    response_format: ResponseFormat = Field(
        "url", description="url: a signed link that needs no key; b64_json: the PNG itself, base64."
    )
    user: str | None = Field(None, max_length=256, description="The end user, logged with the jobs.")
    quality: str | None = Field(None, description="Accepted and ignored.")
    style: str | None = Field(None, description="Accepted and ignored.")

    @field_validator("prompt", "user")
    @classmethod
    def _no_nul(cls, value: str | None) -> str | None:
        # Postgres text cannot hold NUL: refuse it here rather than fail at insert time.
        if value is not None and "\x00" in value:
            raise ValueError("must not contain NUL characters")
        return value


class ImageData(BaseModel):
    url: str | None = None
    b64_json: str | None = None
    revised_prompt: str | None = None


class ImagesResponse(BaseModel):
    created: int = Field(description="Unix seconds when the answer was made.")
    data: list[ImageData]


class OpenAIErrorDetail(BaseModel):
    message: str
    type: str = Field(
        description="invalid_request_error, authentication_error, rate_limit_error, server_error."
    )
    param: str | None = Field(description="The offending field, when one is.")
    code: str | None = Field(
        description="The problem's kind: invalid_size, model_not_found, invalid_api_key..."
    )


class OpenAIError(BaseModel):
    """OpenAI's error body (api.openai_errors)."""

    error: OpenAIErrorDetail


def openai_error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` entries for the statuses an OpenAI-compatible route can answer."""
    return {status: {"model": OpenAIError} for status in statuses}


def parse_size(size: str | None, served: list[str]) -> tuple[int, int]:
    """(width, height) of a served size (the first one when unset); a 400 listing them otherwise."""
    chosen = served[0] if size is None else size
    if chosen not in served:
        raise Problem(
            400,
            f"size {size!r} is not served here; the sizes served are: {', '.join(served)}",
            slug="invalid-size",
            errors=[{"location": "body", "field": "size", "detail": "not a served size"}],
        )
    width, height = chosen.split("x")
    return int(width), int(height)


def check_model(model: str | None, served: list[str]) -> None:
    if model is not None and model not in served:
        raise Problem(
            400,
            f"model {model!r} is not served here; the models served are: {', '.join(served)}",
            slug="model-not-found",
            errors=[{"location": "body", "field": "model", "detail": "not a served model"}],
        )
