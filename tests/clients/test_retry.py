"""The client's retries, idempotent create, configuration from the environment and typed errors: the
pure rules (reprise_client.retry), then the clients against a scripted transport."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest
from reprise_client import (
    ApiError,
    AsyncClient,
    Client,
    ConfigurationError,
    ConnectionFailed,
    Generation,
    InvalidRequest,
    NotFound,
    RateLimited,
    RetryPolicy,
    ServerError,
    ServiceUnavailable,
    Unauthorized,
)
from reprise_client.retry import Attempts, parse_retry_after

JOB = {
    "id": "0f6a",
    "status": "starting",
    "input": {},
    "output": None,
    "error": None,
    "metrics": {},
    "urls": {"self": "/v1/generations/0f6a"},
}
FAST = RetryPolicy(backoff_s=0.0)  # retries without pauses


# --- the rules -------------------------------------------------------------------------------------

NOW = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        (None, None),
        ("", None),
        ("120", 120.0),
        (" 3 ", 3.0),
        ("0", 0.0),
        ("soon", None),
        ("-5", None),
        (format_datetime(NOW + timedelta(seconds=30), usegmt=True), 30.0),
        (format_datetime(NOW - timedelta(seconds=30), usegmt=True), 0.0),
        ("Thu, 02 Jan 2025 03:04:15 GMT", 10.0),
    ],
)
def test_retry_after_is_read_as_seconds_or_an_http_date(header: str | None, seconds: float | None) -> None:
    assert parse_retry_after(header, now=NOW) == seconds


def test_backoff_doubles_up_to_its_ceiling_and_jitters_below_it() -> None:
    policy = RetryPolicy(backoff_s=0.5, max_backoff_s=3.0)
    assert [policy.backoff(retry, draw=lambda: 1.0) for retry in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert policy.backoff(4, draw=lambda: 0.25) == 0.75  # full jitter: anywhere below the ceiling
    assert policy.backoff(1, draw=lambda: 0.0) == 0.0


def test_attempts_stop_after_the_limit_of_tries() -> None:
    attempts = Attempts(RetryPolicy(attempts=3, backoff_s=0.0))
    assert [attempts.pause_after(), attempts.pause_after(), attempts.pause_after()] == [0.0, 0.0, None]


def test_attempts_honour_retry_after_and_stop_when_it_would_end_past_the_total_time() -> None:
    now = [100.0]
    attempts = Attempts(RetryPolicy(attempts=10, total_s=10.0), clock=lambda: now[0])
    assert attempts.pause_after(retry_after=4.0) == 4.0  # the server's word, not the backoff
    now[0] += 4.0
    assert attempts.pause_after(retry_after=7.0) is None  # would start at 11 s, past 10 s


def test_a_policy_refuses_nonsense() -> None:
    with pytest.raises(ValueError):
        RetryPolicy(attempts=0)
    assert RetryPolicy() == RetryPolicy(attempts=5, total_s=60.0, backoff_s=0.5, max_backoff_s=20.0)


# --- the clients against a script -------------------------------------------------------------------


Answer = httpx.Response | Exception


def scripted(answers: list[Answer], sent: list[httpx.Request]) -> httpx.MockTransport:
    """Answers each request with the next scripted answer (an exception is raised), then 202 JOB."""
    script: Iterator[Answer] = iter(answers)

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        found = next(script, None)
        if isinstance(found, Exception):
            raise found
        return found if found is not None else httpx.Response(202, json=JOB)

    return httpx.MockTransport(answer)


def problem(status: int, slug: str, **headers: str) -> httpx.Response:
    body = {
        "type": f"urn:reprise:problem:{slug}",
        "title": "t",
        "status": status,
        "detail": slug,
        "instance": "/v1/generations",
    }
    return httpx.Response(status, json=body, headers={"content-type": "application/problem+json", **headers})


def client_for(answers: list[Answer], sent: list[httpx.Request], retry: RetryPolicy = FAST) -> Client:
    http = httpx.Client(base_url="http://api", transport=scripted(answers, sent))
    return Client(retry=retry, http=http)


def test_a_create_is_retried_on_503_with_one_idempotency_key_made_for_it() -> None:
    sent: list[httpx.Request] = []
    job = client_for([problem(503, "overloaded", **{"Retry-After": "0"})], sent).create("a fox", seed=1)
    assert job.id == "0f6a" and len(sent) == 2
    keys = {request.headers["idempotency-key"] for request in sent}
    assert len(keys) == 1 and uuid.UUID(keys.pop()).version == 4
    client_for([], sent).create("a fox")
    assert sent[2].headers["idempotency-key"] != sent[0].headers["idempotency-key"]  # one per call


def test_a_callers_idempotency_key_is_kept_across_retries() -> None:
    sent: list[httpx.Request] = []
    answers: list[Answer] = [httpx.ConnectError("refused"), problem(429, "inflight-limit"), problem(502, "x")]
    client_for(answers, sent).create("a fox", idempotency_key="order-7")
    assert [request.headers["idempotency-key"] for request in sent] == ["order-7"] * 4


def test_reads_are_retried_on_connection_errors_and_gateway_errors() -> None:
    sent: list[httpx.Request] = []
    answers: list[Answer] = [httpx.ReadTimeout("slow"), httpx.Response(504), httpx.Response(200, json=JOB)]
    assert client_for(answers, sent).get("0f6a").id == "0f6a"
    assert [request.method for request in sent] == ["GET"] * 3


def test_cancel_and_delete_are_tried_once() -> None:
    sent: list[httpx.Request] = []
    client = client_for([problem(503, "overloaded"), httpx.ConnectError("refused")], sent)
    with pytest.raises(ServiceUnavailable):
        client.cancel("0f6a")
    with pytest.raises(ConnectionFailed):
        client.delete("0f6a")
    assert len(sent) == 2


def test_after_the_last_try_the_last_answer_is_the_calls() -> None:
    sent: list[httpx.Request] = []
    busy = problem(503, "overloaded", **{"Retry-After": "0"})
    with pytest.raises(ServiceUnavailable) as raised:
        client_for([busy] * 3, sent, RetryPolicy(attempts=3)).get("0f6a")
    assert len(sent) == 3 and raised.value.retry_after == 0.0 and raised.value.type.endswith("overloaded")
    refused: list[Answer] = [httpx.ConnectError("refused")] * 2
    with pytest.raises(ConnectionFailed) as failed:
        client_for(refused, sent, RetryPolicy(attempts=2, backoff_s=0.0)).get("0f6a")
    assert isinstance(failed.value.__cause__, httpx.ConnectError)


def test_a_retry_after_longer_than_the_time_left_is_not_waited_out() -> None:
    sent: list[httpx.Request] = []
    with pytest.raises(RateLimited) as raised:
        client_for([problem(429, "inflight-limit", **{"Retry-After": "120"})], sent).create("a fox")
    assert len(sent) == 1 and raised.value.retry_after == 120.0


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, InvalidRequest),
        (401, Unauthorized),
        (404, NotFound),
        (422, InvalidRequest),
        (429, RateLimited),
        (500, ServerError),
        (503, ServiceUnavailable),
        (409, ApiError),
    ],
)
def test_each_status_raises_its_typed_error_with_the_problem(status: int, kind: type[ApiError]) -> None:
    sent: list[httpx.Request] = []
    with pytest.raises(kind) as raised:
        client_for([problem(status, "some-problem")] * 5, sent).get("0f6a")
    error = raised.value
    assert type(error) is kind and error.status == status
    assert (error.type, error.detail, error.instance) == (
        "urn:reprise:problem:some-problem",
        "some-problem",
        "/v1/generations",
    )


def test_invalid_input_carries_the_offending_fields() -> None:
    body = {
        "type": "urn:reprise:problem:invalid-input",
        "status": 422,
        "detail": "bad",
        "errors": [{"location": "body", "field": "steps", "message": "too many"}],
    }
    sent: list[httpx.Request] = []
    with pytest.raises(InvalidRequest) as raised:
        client_for([httpx.Response(422, json=body)], sent).create("a fox", steps=9999)
    assert raised.value.errors[0]["field"] == "steps" and len(sent) == 1


def test_the_async_client_retries_a_create_with_one_key() -> None:
    sent: list[httpx.Request] = []

    async def run() -> Generation:
        transport = scripted([problem(503, "overloaded"), httpx.ConnectError("reset")], sent)
        async with AsyncClient(
            retry=FAST, http=httpx.AsyncClient(base_url="http://a", transport=transport)
        ) as c:
            return await c.create("a fox")

    assert asyncio.run(run()).id == "0f6a"
    assert len(sent) == 3 and len({request.headers["idempotency-key"] for request in sent}) == 1


# --- configuration ----------------------------------------------------------------------------------


@pytest.mark.parametrize("build", [Client, AsyncClient])
def test_base_url_and_key_come_from_the_environment(
    build: Callable[..., Client | AsyncClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REPRISE_BASE_URL", "http://reprise.internal:8000/")
    monkeypatch.setenv("REPRISE_API_KEY", "rp_from_env")
    client = build()
    assert str(client.http.base_url) == "http://reprise.internal:8000"
    assert client.http.headers["authorization"] == "Bearer rp_from_env"
    assert build("http://given", "rp_given").http.headers["authorization"] == "Bearer rp_given"  # args win


def test_without_url_or_key_the_error_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REPRISE_BASE_URL", raising=False)
    monkeypatch.delenv("REPRISE_API_KEY", raising=False)
    with pytest.raises(ConfigurationError, match="REPRISE_BASE_URL"):
        Client(api_key="rp_x")
    with pytest.raises(ConfigurationError, match="REPRISE_API_KEY"):
        Client("http://api")
