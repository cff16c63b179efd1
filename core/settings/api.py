"""HTTP API: the URL clients reach, what a request may ask for, how keys are trusted, and when the
service pushes back (backpressure)."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Self

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings

log = logging.getLogger(__name__)

# Variables this service once read and reads no more: each with what a deployment that still sets one
# should know. Read by nothing now, they are named at start rather than ignored in silence.
RETIRED_VARIABLES = {
    "REPRISE_INTAKE": "POST /v1/generations has one intake path (jobs.intake, what `fast` chose); the "
    "ORM path (`orm`) is gone and its answers were the same. Remove the variable from the deployment.",
}


class ApiSettings(BaseSettings):
    """HTTP API: public URL, request limits, key lookups and backpressure.

    The API process reads these; a request past a limit is refused with a problem+json error.
    """

    public_base_url: str | None = Field(
        None,
        description="Base URL clients reach the API at (https://api.example.com), used in job URLs and "
        "webhook payloads. Unset: the request's own base URL; webhook payloads then carry relative URLs.",
    )
    max_body_bytes: int = Field(65536, ge=1024, description="Largest request body accepted; larger: 413.")
    max_prompt_chars: int = Field(2000, ge=1, description="Longest prompt accepted.")
    max_steps: int = Field(150, ge=1, description="Most denoising steps a request may ask for.")
    max_side: int = Field(1024, ge=8, description="Largest width or height accepted, in pixels.")
    auth_cache_s: float = Field(
        5.0,
        ge=0,
        description="An API process trusts a key it looked up this long (a database query less per "
        "request). `reprise keys revoke` tells every API process over Redis, which drop the key at once; "
        "only a process that missed it (Redis down) trusts a revoked key until then. 0: look up every "
        "request.",
    )
    queue_depth_limit: int = Field(
        1000, ge=1, description="Admit-queue length past which new jobs get 503 + Retry-After (backpressure)."
    )
    rate_limit_per_s: float = Field(
        100.0,
        ge=0,
        description="Requests per second each tenant may make, over all its keys and all API processes (a "
        "token bucket in Redis); past it: 429 `rate-limited` with Retry-After. Admin keys are not limited. "
        "The default is generous: twice Replicate's 3000 requests/minute for reads (its creates: "
        "600/minute). 0: no limit.",
    )
    rate_limit_burst: int = Field(
        1000,
        ge=1,
        description="Requests a tenant may make at once above REPRISE_RATE_LIMIT_PER_S: the bucket's size "
        "(10 s of the default rate: `reprise bench streams`' 200 event streams, opened together, pass; the "
        "chaos and live benchmarks use admin keys).",
    )
    retry_after_s: int = Field(
        5, ge=1, le=3600, description="Retry-After seconds sent with 429 (in-flight limit) and 503 responses."
    )

    @field_validator("public_base_url")
    @classmethod
    def _check_public_base_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL, e.g. https://api.example.com")
        return value.rstrip("/") if value is not None else None

    @model_validator(mode="after")
    def _name_retired_variables(self) -> Self:
        for name in retired_variables(os.environ):
            log.warning("%s is set but no longer read: %s", name, RETIRED_VARIABLES[name])
        return self


def retired_variables(environ: Mapping[str, str]) -> list[str]:
    """The retired variables (RETIRED_VARIABLES) that `environ` still sets."""
    return [name for name in RETIRED_VARIABLES if environ.get(name)]
