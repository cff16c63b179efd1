"""Bad input gets a 4xx application/problem+json naming the field, never a 500."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from db.tenants import TenantCredentials

pytestmark = pytest.mark.integration

PROBLEM_KEYS = {"type", "title", "status", "detail", "instance"}


def assert_problem(response: Any, status: int) -> dict[str, Any]:
    """Check a TestClient response (httpx or httpx2, whichever Starlette found) is a problem document."""
    assert response.status_code == status, response.json()
    assert response.headers["content-type"] == "application/problem+json"
    problem: dict[str, Any] = response.json()
    assert problem.keys() >= PROBLEM_KEYS and problem["status"] == status
    return problem


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"prompt": ""}, "prompt"),
        ({"prompt": "   "}, "prompt"),
        ({"prompt": "x" * 2001}, "prompt"),
        ({"prompt": "nul \x00 inside"}, "prompt"),
        ({}, "prompt"),
        ({"prompt": 42}, "prompt"),
        ({"prompt": "ok", "steps": 0}, "steps"),
        ({"prompt": "ok", "steps": 151}, "steps"),
        ({"prompt": "ok", "steps": "50"}, "steps"),  # strict: a number, not a string
        ({"prompt": "ok", "width": 500}, "width"),
        ({"prompt": "ok", "height": 2048}, "height"),
        ({"prompt": "ok", "width": 0}, "width"),
        ({"prompt": "ok", "guidance": 51}, "guidance"),
        ({"prompt": "ok", "seed": -1}, "seed"),
        ({"prompt": "ok", "seed": 2**64}, "seed"),
        ({"prompt": "ok", "cache": "everywhere"}, "cache"),
        ({"prompt": "ok", "cache": "shared"}, "cache"),  # the tenant has not opted in
        ({"prompt": "ok", "webhook_events_filter": ["output"]}, "webhook_events_filter.0"),
        ({"prompt": "ok", "webhook_events_filter": []}, "webhook_events_filter"),
        ({"prompt": "ok", "webhook": "http://127.0.0.2/hook"}, "webhook"),  # loopback, not on the allow-list
        ({"prompt": "ok", "webhook": "http://169.254.169.254/latest/meta-data"}, "webhook"),
        ({"prompt": "ok", "webhook": "http://[::1]:8080/hook"}, "webhook"),
        ({"prompt": "ok", "webhook": "gopher://example.com/"}, "webhook"),
        ({"prompt": "ok", "negative_prompt": "y" * 2001}, "negative_prompt"),
        ({"prompt": "ok", "stpes": 20}, "stpes"),  # unknown fields are refused, typos included
    ],
)
def test_invalid_bodies_get_422_naming_the_field(
    client: TestClient, tenant: TenantCredentials, body: dict[str, object], field: str
) -> None:
    problem = assert_problem(client.post("/v1/generations", json=body, headers=tenant.auth_headers), 422)
    errors = problem["errors"]
    assert isinstance(errors, list) and field in {error["field"] for error in errors}
    assert all(error["location"] == "body" for error in errors)


def test_nan_guidance_is_refused(client: TestClient, tenant: TenantCredentials) -> None:
    response = client.post(
        "/v1/generations",
        content=b'{"prompt": "ok", "guidance": NaN}',
        headers={**tenant.auth_headers, "content-type": "application/json"},
    )
    problem = assert_problem(response, 422)
    assert problem["errors"] == [
        {"location": "body", "field": "guidance", "detail": "Input should be a finite number"}
    ]


@pytest.mark.parametrize("raw", [b'{"prompt": "unterminated', b"[1, 2", b"\xff\xfe garbage"])
def test_malformed_json_gets_400(client: TestClient, tenant: TenantCredentials, raw: bytes) -> None:
    response = client.post(
        "/v1/generations", content=raw, headers={**tenant.auth_headers, "content-type": "application/json"}
    )
    problem = assert_problem(response, 400)
    assert problem["type"] == "urn:reprise:problem:malformed-json"


def test_a_non_object_body_gets_422(client: TestClient, tenant: TenantCredentials) -> None:
    response = client.post("/v1/generations", json=["prompt"], headers=tenant.auth_headers)
    assert_problem(response, 422)


def test_a_body_over_the_limit_gets_413(client: TestClient, tenant: TenantCredentials) -> None:
    response = client.post("/v1/generations", json={"prompt": "x" * 5000}, headers=tenant.auth_headers)
    problem = assert_problem(response, 413)
    assert (
        problem["type"] == "urn:reprise:problem:body-too-large" and problem["instance"] == "/v1/generations"
    )


def test_a_streamed_body_over_the_limit_gets_413(client: TestClient, tenant: TenantCredentials) -> None:
    def chunks() -> Iterator[bytes]:  # no Content-Length: sent chunked
        yield b'{"prompt": "'
        for _ in range(10):
            yield b"x" * 1000
        yield b'"}'

    response = client.post(
        "/v1/generations",
        content=chunks(),
        headers={**tenant.auth_headers, "content-type": "application/json"},
    )
    assert_problem(response, 413)


def test_a_small_streamed_body_is_accepted(client: TestClient, tenant: TenantCredentials) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"prompt": '
        yield b'"streamed"}'

    response = client.post(
        "/v1/generations",
        content=chunks(),
        headers={**tenant.auth_headers, "content-type": "application/json"},
    )
    assert response.status_code == 202 and response.json()["input"]["prompt"] == "streamed"


def test_unknown_route_is_a_404_problem(client: TestClient) -> None:
    problem = assert_problem(client.get("/v2/nothing"), 404)
    assert problem["type"] == "about:blank" and problem["title"] == "Not Found"


def test_wrong_method_is_a_405_problem_with_allow(client: TestClient, tenant: TenantCredentials) -> None:
    response = client.delete("/v1/generations", headers=tenant.auth_headers)
    assert_problem(response, 405)
    assert set(response.headers["allow"].replace(" ", "").split(",")) == {"GET", "POST"}


@pytest.mark.parametrize(
    ("query", "location", "field"),
    [("limit=0", "query", "limit"), ("limit=abc", "query", "limit"), ("status=done", "query", "status")],
)
def test_bad_query_parameters_get_422(
    client: TestClient, tenant: TenantCredentials, query: str, location: str, field: str
) -> None:
    problem = assert_problem(client.get(f"/v1/generations?{query}", headers=tenant.auth_headers), 422)
    assert problem["errors"] == [
        {"location": location, "field": field, "detail": problem["errors"][0]["detail"]}
    ]


def test_unknown_image_format_gets_422(client: TestClient, tenant: TenantCredentials) -> None:
    job_id = client.post("/v1/generations", json={"prompt": "ok"}, headers=tenant.auth_headers).json()["id"]
    problem = assert_problem(
        client.get(f"/v1/generations/{job_id}/image?format=gif", headers=tenant.auth_headers), 422
    )
    assert problem["errors"][0]["field"] == "format"
