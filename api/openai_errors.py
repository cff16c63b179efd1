"""OpenAI's error shape, `{"error": {"message", "type", "param", "code"}}`, which the OpenAI-compatible
paths (api.openai_compat) answer instead of problem+json, so that OpenAI's SDKs raise their own typed
errors (BadRequestError, AuthenticationError, RateLimitError...). api.problems sends every problem of
those paths through here. Pure: no FastAPI, no Problem (api.problems imports this module).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

OPENAI_PREFIX = "/v1/images/"  # the paths whose errors are in OpenAI's shape


def is_openai_path(path: str) -> bool:
    return path.startswith(OPENAI_PREFIX)


def _error_type(status: int) -> str:
    """OpenAI's error `type` for an HTTP status (its SDKs choose the exception class by the status)."""
    if status == 401:
        return "authentication_error"
    if status == 429:
        return "rate_limit_error"
    if status >= 500:
        return "server_error"
    return "invalid_request_error"


def openai_status(status: int) -> int:
    """OpenAI answers a body it cannot take with 400, where problem+json says 422."""
    return 400 if status == 422 else status


def openai_error_body(
    *, status: int, detail: str, slug: str | None, errors: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """A problem as OpenAI's error object: `param` the first offending field, `code` the problem's kind."""
    param = next((item.get("field") for item in errors if item.get("field")), None)
    code = "invalid_api_key" if status == 401 else slug.replace("-", "_") if slug else None
    return {"error": {"message": detail, "type": _error_type(status), "param": param, "code": code}}
