"""POST /v1/images/generations against the real Postgres and Redis: OpenAI's request becomes ordinary
jobs, held until they end, and every error on the path is in OpenAI's shape (its SDK's typed errors
are tested with the SDK itself in tests/e2e/test_openai_images.py)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis
from fastapi.testclient import TestClient

from api.openai_compat import check_model, parse_size
from api.openai_errors import openai_error_body
from api.problems import Problem
from db.tenants import TenantCredentials
from jobs.job_events import announce_end

pytestmark = pytest.mark.integration

PATH = "/v1/images/generations"


def assert_openai_error(response: Any, status: int, param: str | None, code: str | None) -> dict[str, Any]:
    assert response.status_code == status
    assert response.headers["content-type"] == "application/json"  # not problem+json on this path
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["param"], error["code"]) == (param, code)
    return dict(error)


def test_a_size_not_served_is_a_400_listing_the_served_ones() -> None:
    assert parse_size("64x64", ["64x64"]) == (64, 64)
    assert parse_size(None, ["64x64"]) == (64, 64)  # OpenAI's default is its own size: ours here
    with pytest.raises(Problem) as refused:
        parse_size("1024x1024", ["64x64"])
    assert refused.value.status == 400 and "64x64" in refused.value.detail
    with pytest.raises(Problem) as unknown:
        check_model("dall-e-3", ["lab:large"])
    assert "lab:large" in unknown.value.detail
    check_model(None, ["lab:large"])  # OpenAI's SDK may leave it out


def test_problems_become_openai_errors_with_the_sdks_types() -> None:
    unauthorized = openai_error_body(status=401, detail="no key", slug="unauthorized", errors=[])
    assert unauthorized["error"]["type"] == "authentication_error"
    assert unauthorized["error"]["code"] == "invalid_api_key"
    invalid = openai_error_body(
        status=400, detail="bad n", slug="invalid-input", errors=[{"field": "n", "detail": "too many"}]
    )
    assert invalid["error"] == {
        "message": "bad n",
        "type": "invalid_request_error",
        "param": "n",
        "code": "invalid_input",
    }
    assert (
        openai_error_body(status=429, detail="", slug=None, errors=[])["error"]["type"] == "rate_limit_error"
    )


def test_bad_requests_on_the_openai_path_answer_in_openais_shape(
    client: TestClient, tenant: TenantCredentials
) -> None:
    headers = tenant.auth_headers
    size = client.post(PATH, json={"prompt": "a fox", "size": "1024x1024"}, headers=headers)
    assert "64x64" in assert_openai_error(size, 400, "size", "invalid_size")["message"]
    model = client.post(PATH, json={"prompt": "a fox", "model": "dall-e-3"}, headers=headers)
    assert "lab:large" in assert_openai_error(model, 400, "model", "model_not_found")["message"]
    many = client.post(PATH, json={"prompt": "a fox", "n": 11}, headers=headers)
    assert_openai_error(many, 400, "n", "invalid_input")  # a 422 elsewhere: OpenAI says 400
    key = client.post(PATH, json={"prompt": "a fox"}, headers={"Authorization": "Bearer rk_not-a-key"})
    assert assert_openai_error(key, 401, None, "invalid_api_key")["type"] == "authentication_error"
    # The native path keeps problem+json.
    native = client.post("/v1/generations", json={"prompt": "a fox", "steps": 0}, headers=headers)
    assert native.headers["content-type"] == "application/problem+json"


def test_n_jobs_are_made_and_the_answer_waits_for_them(
    make_client: Callable[..., TestClient],
    tenant: TenantCredentials,
    set_job: Callable[..., None],
    broker: redis.Redis,
) -> None:
    client = make_client()  # the same submission as POST /v1/generations

    def finish() -> None:  # as the workers would: every job of this tenant succeeds
        deadline = time.monotonic() + 10
        done: set[str] = set()
        while len(done) < 2 and time.monotonic() < deadline:
            listed = client.get("/v1/generations", headers=tenant.auth_headers).json()["results"]
            for job in listed:
                if job["id"] not in done:
                    set_job(job["id"], status="succeeded")
                    announce_end(broker, uuid.UUID(job["id"]))
                    done.add(job["id"])
            time.sleep(0.2)

    threading.Thread(target=finish).start()
    body = {"prompt": "a fox", "n": 2, "size": "64x64", "response_format": "url", "user": "u-1"}
    response = client.post(PATH, json=body, headers={**tenant.auth_headers, "Prefer": "wait=20"})
    assert response.status_code == 200, response.text
    data = response.json()["data"]
    assert len(data) == 2 and abs(response.json()["created"] - time.time()) < 60
    listed = client.get("/v1/generations", headers=tenant.auth_headers).json()["results"]
    linked = {urlsplit(item["url"]).path.rsplit("/", 1)[-1] for item in data}
    assert linked == {job["id"] for job in listed}  # one ordinary job per image, each linked
    assert all("signature=" in item["url"] for item in data)


def test_a_job_that_fails_is_a_server_error_naming_it(
    client: TestClient, tenant: TenantCredentials, set_job: Callable[..., None], broker: redis.Redis
) -> None:
    def fail() -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            listed = client.get("/v1/generations", headers=tenant.auth_headers).json()["results"]
            if listed:
                set_job(listed[0]["id"], status="failed", error="the denoiser ran out of memory")
                announce_end(broker, uuid.UUID(listed[0]["id"]))
                return
            time.sleep(0.2)

    threading.Thread(target=fail).start()
    response = client.post(
        PATH, json={"prompt": "a fox"}, headers={**tenant.auth_headers, "Prefer": "wait=20"}
    )
    error = assert_openai_error(response, 500, None, "generation_failed")
    assert "out of memory" in error["message"] and error["type"] == "server_error"


def test_a_job_still_running_at_the_bound_is_a_504_naming_it(
    client: TestClient, tenant: TenantCredentials
) -> None:
    response = client.post(
        PATH, json={"prompt": "a fox"}, headers={**tenant.auth_headers, "Prefer": "wait=1"}
    )
    error = assert_openai_error(response, 504, None, "wait_exceeded")
    job_id = client.get("/v1/generations", headers=tenant.auth_headers).json()["results"][0]["id"]
    assert job_id in error["message"]
