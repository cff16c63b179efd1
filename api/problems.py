"""Every error the API sends is application/problem+json (RFC 9457): type, title, status, detail,
instance, and `errors` (one item per offending field) for invalid input; on the OpenAI-compatible
paths, the same problem in OpenAI's error shape (api.openai_errors).

Routes raise Problem (or a core.errors.InvalidInput); the handlers below turn those, FastAPI's
validation errors and Starlette's HTTP errors (404 unknown route, 405) into problem documents.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from sqlalchemy.exc import OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

from api.openai_errors import is_openai_path, openai_error_body, openai_status
from core.errors import InvalidInput, RepriseError
from core.settings import Settings

PROBLEM_JSON = "application/problem+json"
TYPE_PREFIX = "urn:reprise:problem:"  # a stable name per kind of problem; "about:blank" for plain HTTP errors

log = logging.getLogger(__name__)
RETRY_AFTER_DEFAULT = int(Settings.model_fields["retry_after_s"].default)  # an app without its state


def problem_type(slug: str | None) -> str:
    return TYPE_PREFIX + slug if slug else "about:blank"


def problem_body(
    *,
    status: int,
    detail: str,
    instance: str,
    slug: str | None = None,
    title: str | None = None,
    errors: Sequence[Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": problem_type(slug),
        "title": title or HTTPStatus(status).phrase,
        "status": status,
        "detail": detail,
        "instance": instance,
    }
    if errors:
        body["errors"] = [dict(item) for item in errors]
    return body


def problem_bytes(**kwargs: Any) -> bytes:
    """The body for code that answers below FastAPI (middleware)."""
    return json.dumps(problem_body(**kwargs)).encode()


class Problem(RepriseError):
    """An error response. `slug` names the kind of problem (the `type` URN); None means about:blank."""

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        slug: str | None = None,
        title: str | None = None,
        headers: Mapping[str, str] | None = None,
        errors: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.slug = slug
        self.title = title
        self.headers = dict(headers or {})
        self.errors = list(errors or [])


def problem_response(request: Request, problem: Problem) -> JSONResponse:
    if is_openai_path(request.url.path):  # OpenAI's SDKs read their own error shape, not RFC 9457
        status = openai_status(problem.status)
        error = openai_error_body(
            status=status, detail=problem.detail, slug=problem.slug, errors=problem.errors
        )
        return JSONResponse(error, status_code=status, headers=problem.headers)
    body = problem_body(
        status=problem.status,
        detail=problem.detail,
        instance=request.url.path,
        slug=problem.slug,
        title=problem.title,
        errors=problem.errors,
    )
    return JSONResponse(body, status_code=problem.status, headers=problem.headers, media_type=PROBLEM_JSON)


def field_error(location: str, field: str, detail: str) -> dict[str, str]:
    return {"location": location, "field": field, "detail": detail}


def invalid_input(error: InvalidInput) -> Problem:
    location = (
        "header" if error.field == "Idempotency-Key" else "query" if error.field == "cursor" else "body"
    )
    errors = [field_error(location, error.field, str(error))] if error.field else []
    return Problem(422, str(error), slug="invalid-input", title="Invalid input", errors=errors)


def _from_validation(error: RequestValidationError) -> Problem:
    items = error.errors()
    malformed = next((item for item in items if item.get("type") == "json_invalid"), None)
    if malformed is not None:
        reason = (malformed.get("ctx") or {}).get("error", "invalid JSON")
        position = malformed["loc"][-1] if len(malformed["loc"]) > 1 else "?"
        return Problem(
            400,
            f"the body is not valid JSON: {reason} at position {position}",
            slug="malformed-json",
            title="Malformed JSON",
        )
    errors = []
    for item in items:
        location, *path = [str(part) for part in item["loc"]] or ["body"]
        errors.append(field_error(location, ".".join(path), item["msg"]))
    named = ", ".join(sorted({e["field"] or e["location"] for e in errors}))
    return Problem(422, f"invalid {named}", slug="invalid-input", title="Invalid input", errors=errors)


def allowed_methods(routes: Iterable[APIRoute], path: str) -> list[str]:
    """Every method some route serves at `path` (Starlette's 405 names only the first route's)."""
    return sorted(
        {method for route in routes if route.path_regex.match(path) for method in route.methods or ()}
    )


def install_problem_handlers(app: FastAPI, routes: Iterable[APIRoute]) -> None:
    """Route every error through problem_response. `routes` serve the Allow header of a 405."""
    served = list(routes)

    async def on_problem(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, Problem)
        return problem_response(request, exc)

    async def on_invalid_input(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, InvalidInput)
        return problem_response(request, invalid_input(exc))

    async def on_validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return problem_response(request, _from_validation(exc))

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        detail = exc.detail if isinstance(exc.detail, str) else HTTPStatus(exc.status_code).phrase
        if exc.status_code == 404 and detail == "Not Found":
            detail = f"no route {request.url.path}"
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            detail = f"{request.method} is not allowed on {request.url.path}"
            headers["Allow"] = ", ".join(allowed_methods(served, request.url.path))
        return problem_response(request, Problem(exc.status_code, detail, headers=headers))

    async def on_database_down(request: Request, exc: Exception) -> JSONResponse:
        log.warning("database unreachable on %s %s: %s", request.method, request.url.path, exc)
        state = getattr(request.app.state, "reprise", None)
        retry_after = state.settings.retry_after_s if state is not None else RETRY_AFTER_DEFAULT
        problem = Problem(
            503,
            "the database is unreachable; retry shortly",
            slug="database-unavailable",
            headers={"Retry-After": str(retry_after)},
        )
        return problem_response(request, problem)

    async def on_crash(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
        return problem_response(request, Problem(500, "an internal error occurred; it has been logged"))

    app.add_exception_handler(Problem, on_problem)
    app.add_exception_handler(InvalidInput, on_invalid_input)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(OperationalError, on_database_down)  # connection lost or refused: not our bug
    app.add_exception_handler(Exception, on_crash)
