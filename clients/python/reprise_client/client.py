"""Sync and async clients of the Reprise API (`/v1/generations`).

`wait` follows the job's server-sent events (`events`: the job at each change of status, progress or
queue place) until it ends. Where there is no stream (an older server, a proxy that cuts it), it
long-polls: each request asks the server to hold it until the job ends (`Prefer: wait=N`, Replicate's
sync mode); a server that does not honour it (no `Preference-Applied`) is polled instead.
`image` retries while the image is being decoded (202 with Retry-After) and follows a presigned
redirect; `create_video` submits a video job and `video` downloads its animated WebP.

Reads (GET) and creates are tried again on 429, 502, 503, 504 and connection errors, under the client's
RetryPolicy (reprise_client.retry: Retry-After honoured, else exponential backoff with jitter). A create
always carries an Idempotency-Key (a new uuid4 when the caller gives none), the same on each of its
tries, so that a retried create never makes two jobs. Cancel and delete are tried once. The base URL
and API key come from the arguments, else from REPRISE_BASE_URL and REPRISE_API_KEY. Errors come back
typed (reprise_client.errors): an ApiError subclass per status, carrying the server's problem+json;
ConnectionFailed when the server could not be reached.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx

from reprise_client.deliveries import AsyncWebhookDeliveries, WebhookDeliveries
from reprise_client.errors import ConfigurationError, ConnectionFailed, WaitTimeout, api_error
from reprise_client.models import Generation, GenerationPage, OnDeadline, Priority
from reprise_client.retry import Attempts, RetryPolicy, parse_retry_after
from reprise_client.sse import ServerEvent, aparse_events, parse_events

LONG_POLL_S = 30  # per request; the server caps it at 60
POLL_S = 1.0  # between polls, when the server does not hold requests
STREAM_READ_S = 45.0  # the server writes at least every 15 s (a keep-alive comment)
EVENTS_ACCEPT = {"Accept": "text/event-stream"}
BASE_URL_ENV = "REPRISE_BASE_URL"
API_KEY_ENV = "REPRISE_API_KEY"
ONCE = RetryPolicy(attempts=1)  # cancel and delete: a repeat could act twice
# Connection errors worth another try; others (a malformed URL, an unsupported scheme) would fail again.
RETRYABLE_ERRORS = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)


class _NoStream(Exception):
    """The server gave no event stream: fall back on long polling."""


def _stream_timeout(left: float) -> httpx.Timeout:
    return httpx.Timeout(10.0, read=max(1.0, min(STREAM_READ_S, left)))


def _opened(response: httpx.Response) -> None:
    """Raise _NoStream for a server without the stream, ApiError for another refusal."""
    if response.status_code in (404, 405, 406) or (
        response.status_code < 400
        and not response.headers.get("content-type", "").startswith("text/event-stream")
    ):
        raise _NoStream
    _checked(response)


def _generation(event: ServerEvent | None) -> Generation | None:
    if event is None or event.event not in ("generation", "done"):
        return None
    return Generation.from_json(json.loads(event.data))


USER_AGENT = "reprise-client/0.1"


def _headers(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}", "User-Agent": USER_AGENT}


def _configured(value: str | None, variable: str, argument: str) -> str:
    """The argument, else the environment variable; ConfigurationError naming both when neither is set."""
    found = value or os.environ.get(variable)
    if not found:
        raise ConfigurationError(f"no {argument}: pass {argument}= or set {variable} in the environment")
    return found


def _http_settings(base_url: str | None, api_key: str | None) -> tuple[str, dict[str, str]]:
    url = _configured(base_url, BASE_URL_ENV, "base_url")
    return url.rstrip("/"), _headers(_configured(api_key, API_KEY_ENV, "api_key"))


def _checked(response: httpx.Response) -> httpx.Response:
    """The response when it is not an error; the typed ApiError with its problem+json otherwise."""
    if response.status_code >= 400:
        try:
            problem = response.json()
        except ValueError:
            problem = {"detail": response.text}
        raise api_error(
            response.status_code,
            problem if isinstance(problem, dict) else {"detail": problem},
            retry_after=parse_retry_after(response.headers.get("retry-after")),
        )
    return response


def _pause(attempts: Attempts, outcome: httpx.Response | httpx.TransportError) -> float | None:
    """Seconds to wait before trying again after this answer or error; None: it is the call's."""
    if not isinstance(outcome, Exception):  # a response (duck-typed: a wrapped client may bring its own)
        if not attempts.retryable(outcome.status_code):
            return None
        return attempts.pause_after(retry_after=parse_retry_after(outcome.headers.get("retry-after")))
    return attempts.pause_after() if isinstance(outcome, RETRYABLE_ERRORS) else None


def _final(outcome: httpx.Response | httpx.TransportError, method: str, url: str) -> httpx.Response:
    if not isinstance(outcome, Exception):
        return outcome
    raise ConnectionFailed(f"{method} {url}: {type(outcome).__name__}: {outcome}") from outcome


def _body(prompt: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"prompt": prompt, **{key: value for key, value in params.items() if value is not None}}


def _video_params(frames: int | None, fps: int | None, noise_window: int | None) -> dict[str, Any]:
    """A video job's fields of the body (unset ones left to the server's defaults)."""
    return {"kind": "video", "frames": frames, "fps": fps, "noise_window": noise_window}


def _create_headers(idempotency_key: str | None, wait_s: int | None) -> dict[str, str]:
    """A create's headers: the caller's Idempotency-Key or a new one, kept for all the call's tries."""
    headers = {"Idempotency-Key": idempotency_key or str(uuid.uuid4())}
    if wait_s:
        headers["Prefer"] = f"wait={wait_s}"
    return headers


def _decode_pause(response: httpx.Response) -> float:
    """How long to wait on an image being decoded (202): its Retry-After, at least 0.1 s, else 1 s."""
    seconds = parse_retry_after(response.headers.get("retry-after"))
    return 1.0 if seconds is None else max(0.1, seconds)


class Client(WebhookDeliveries):
    """The API over one httpx.Client. Use as a context manager, or call close().

    `base_url` and `api_key` default to REPRISE_BASE_URL and REPRISE_API_KEY (ConfigurationError when
    neither is given); `timeout` is each request's, in seconds; `retry` says how reads and creates are
    tried again (default: 5 tries within 60 s; `RetryPolicy(attempts=1)` never retries). With `http`, that
    client is used as it is (its base URL and headers)."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 90.0,
        retry: RetryPolicy = RetryPolicy(),
        http: httpx.Client | None = None,
    ):
        self.retry = retry
        if http is None:
            url, headers = _http_settings(base_url, api_key)
            http = httpx.Client(base_url=url, headers=headers, timeout=timeout)
        self.http = http

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self.http.close()

    def _request(self, method: str, url: str, *, retry: bool = True, **kwargs: Any) -> httpx.Response:
        """One call: tried again under the retry policy when `retry`; ConnectionFailed once it gives up
        on a connection error."""
        attempts = Attempts(self.retry if retry else ONCE)
        while True:
            outcome: httpx.Response | httpx.TransportError
            try:
                outcome = self.http.request(method, url, **kwargs)
            except httpx.TransportError as error:
                outcome = error
            pause = _pause(attempts, outcome)
            if pause is None:
                return _final(outcome, method, url)
            time.sleep(pause)

    def create(
        self,
        prompt: str,
        *,
        idempotency_key: str | None = None,
        wait_s: int | None = None,
        priority: Priority | None = None,
        deadline_s: float | None = None,
        on_deadline: OnDeadline | None = None,
        **params: Any,
    ) -> Generation:
        """Submit a job (params: negative_prompt, seed, steps, width, height, guidance, cache, decode,
        webhook, webhook_events_filter; kind="video" with frames, fps, noise_window: see create_video).
        `priority` low/normal/high; `deadline_s` with `on_deadline="fail"` is refused at once (a 422
        InvalidRequest, type deadline-unmet) when the server estimates it cannot be met.
        With wait_s the server answers when the job ends, or then. Without an idempotency_key a new one
        is sent, the same on every try of this call."""
        schedule = {"priority": priority, "deadline_s": deadline_s, "on_deadline": on_deadline}
        response = self._request(
            "POST",
            "/v1/generations",
            json=_body(prompt, {**params, **schedule}),
            headers=_create_headers(idempotency_key, wait_s),
        )
        return Generation.from_json(_checked(response).json())

    def create_video(
        self,
        prompt: str,
        *,
        frames: int | None = None,
        fps: int | None = None,
        noise_window: int | None = None,
        idempotency_key: str | None = None,
        wait_s: int | None = None,
        **params: Any,
    ) -> Generation:
        """Submit a video job: `frames` (1..128, server default 16) at `fps` (1..60, default 8), with
        FreeNoise's `noise_window` (1..frames) or independent noise per frame; other params as create's."""
        video = _video_params(frames, fps, noise_window)
        return self.create(prompt, idempotency_key=idempotency_key, wait_s=wait_s, **params, **video)

    def get(self, job_id: str, *, wait_s: int | None = None) -> Generation:
        headers = {"Prefer": f"wait={wait_s}"} if wait_s else {}
        return Generation.from_json(
            _checked(self._request("GET", f"/v1/generations/{job_id}", headers=headers)).json()
        )

    def events(self, job_id: str, *, timeout: float = 300.0) -> Iterator[Generation]:
        """The job at each change (status, progress, queue place), ending with the ended job; stops
        after `timeout` seconds or when the server closes the stream (it does after 15 minutes)."""
        deadline = time.monotonic() + timeout
        path = f"/v1/generations/{job_id}/events"
        with self.http.stream(
            "GET", path, headers=EVENTS_ACCEPT, timeout=_stream_timeout(timeout)
        ) as response:
            if response.status_code >= 400:
                response.read()
            _opened(response)
            for event in parse_events(response.iter_lines()):
                job = _generation(event)
                if job is not None:
                    yield job
                if (job is not None and job.done) or time.monotonic() >= deadline:
                    return

    def wait(self, job_id: str, *, timeout: float = 300.0) -> Generation:
        """The job once it has ended (its event stream, else long polling); WaitTimeout after `timeout`."""
        deadline = time.monotonic() + timeout
        try:
            while (left := deadline - time.monotonic()) > 0:
                last = None
                for last in self.events(job_id, timeout=left):
                    if last.done:
                        return last
                if last is None and time.monotonic() < deadline:
                    break  # a stream that said nothing: poll
        except (_NoStream, httpx.TransportError):
            pass
        return self._poll(job_id, deadline, timeout)

    def _poll(self, job_id: str, deadline: float, timeout: float) -> Generation:
        while True:
            left = deadline - time.monotonic()
            hold = {"Prefer": f"wait={_hold(left)}"}
            response = _checked(self._request("GET", f"/v1/generations/{job_id}", headers=hold))
            job = Generation.from_json(response.json())
            if job.done:
                return job
            if time.monotonic() >= deadline:
                raise WaitTimeout(f"job {job_id} is still {job.status} after {timeout:.0f} s")
            if "preference-applied" not in response.headers:
                time.sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))

    def cancel(self, job_id: str) -> Generation:
        response = self._request("POST", f"/v1/generations/{job_id}/cancel", retry=False)
        return Generation.from_json(_checked(response).json())

    def delete(self, job_id: str) -> None:
        _checked(self._request("DELETE", f"/v1/generations/{job_id}", retry=False))

    def image(self, job_id: str, *, format: str = "png", timeout: float = 120.0) -> bytes:
        """The image's bytes; waits out a decode in progress (202) and follows a presigned redirect."""
        return self._download(f"/v1/generations/{job_id}/image", {"format": format}, timeout)

    def video(self, job_id: str, *, timeout: float = 120.0) -> bytes:
        """A succeeded video job's animated WebP; waits out its decode (202), follows a presigned redirect."""
        return self._download(f"/v1/generations/{job_id}/video", {}, timeout)

    def _download(self, path: str, params: dict[str, str], timeout: float) -> bytes:
        deadline = time.monotonic() + timeout
        while True:
            response = self._request("GET", path, params=params)
            if response.status_code == 307:
                return _checked(httpx.get(response.headers["location"], timeout=timeout)).content
            if response.status_code != 202 or time.monotonic() >= deadline:
                return _checked(response).content
            time.sleep(_decode_pause(response))

    def page(
        self, *, status: str | None = None, limit: int = 20, cursor_url: str | None = None
    ) -> GenerationPage:
        params: dict[str, str | int] = {"limit": limit, **({"status": status} if status else {})}
        response = (
            self._request("GET", cursor_url)
            if cursor_url
            else self._request("GET", "/v1/generations", params=params)
        )
        body = _checked(response).json()
        return GenerationPage([Generation.from_json(item) for item in body["results"]], body.get("next"))

    def list(self, *, status: str | None = None, limit: int = 20) -> Iterator[Generation]:
        """Every job, newest first, following the pages' `next`."""
        page = self.page(status=status, limit=limit)
        while True:
            yield from page.results
            if page.next is None:
                return
            page = self.page(cursor_url=page.next)


class AsyncClient(AsyncWebhookDeliveries):
    """The same API over httpx.AsyncClient, with the same arguments, environment and retries."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 90.0,
        retry: RetryPolicy = RetryPolicy(),
        http: httpx.AsyncClient | None = None,
    ):
        self.retry = retry
        if http is None:
            url, headers = _http_settings(base_url, api_key)
            http = httpx.AsyncClient(base_url=url, headers=headers, timeout=timeout)
        self.http = http

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.http.aclose()

    async def _request(self, method: str, url: str, *, retry: bool = True, **kwargs: Any) -> httpx.Response:
        attempts = Attempts(self.retry if retry else ONCE)
        while True:
            outcome: httpx.Response | httpx.TransportError
            try:
                outcome = await self.http.request(method, url, **kwargs)
            except httpx.TransportError as error:
                outcome = error
            pause = _pause(attempts, outcome)
            if pause is None:
                return _final(outcome, method, url)
            await asyncio.sleep(pause)

    async def create(
        self,
        prompt: str,
        *,
        idempotency_key: str | None = None,
        wait_s: int | None = None,
        priority: Priority | None = None,
        deadline_s: float | None = None,
        on_deadline: OnDeadline | None = None,
        **params: Any,
    ) -> Generation:
        schedule = {"priority": priority, "deadline_s": deadline_s, "on_deadline": on_deadline}
        response = await self._request(
            "POST",
            "/v1/generations",
            json=_body(prompt, {**params, **schedule}),
            headers=_create_headers(idempotency_key, wait_s),
        )
        return Generation.from_json(_checked(response).json())

    async def create_video(
        self,
        prompt: str,
        *,
        frames: int | None = None,
        fps: int | None = None,
        noise_window: int | None = None,
        idempotency_key: str | None = None,
        wait_s: int | None = None,
        **params: Any,
    ) -> Generation:
        video = _video_params(frames, fps, noise_window)
        return await self.create(prompt, idempotency_key=idempotency_key, wait_s=wait_s, **params, **video)

    async def get(self, job_id: str, *, wait_s: int | None = None) -> Generation:
        headers = {"Prefer": f"wait={wait_s}"} if wait_s else {}
        response = await self._request("GET", f"/v1/generations/{job_id}", headers=headers)
        return Generation.from_json(_checked(response).json())

    async def events(self, job_id: str, *, timeout: float = 300.0) -> AsyncIterator[Generation]:
        deadline = time.monotonic() + timeout
        path = f"/v1/generations/{job_id}/events"
        async with self.http.stream(
            "GET", path, headers=EVENTS_ACCEPT, timeout=_stream_timeout(timeout)
        ) as response:
            if response.status_code >= 400:
                await response.aread()
            _opened(response)
            async for event in aparse_events(response.aiter_lines()):
                job = _generation(event)
                if job is not None:
                    yield job
                if (job is not None and job.done) or time.monotonic() >= deadline:
                    return

    async def wait(self, job_id: str, *, timeout: float = 300.0) -> Generation:
        deadline = time.monotonic() + timeout
        try:
            while (left := deadline - time.monotonic()) > 0:
                last = None
                async for last in self.events(job_id, timeout=left):
                    if last.done:
                        return last
                if last is None and time.monotonic() < deadline:
                    break
        except (_NoStream, httpx.TransportError):
            pass
        return await self._poll(job_id, deadline, timeout)

    async def _poll(self, job_id: str, deadline: float, timeout: float) -> Generation:
        while True:
            left = deadline - time.monotonic()
            hold = {"Prefer": f"wait={_hold(left)}"}
            response = _checked(await self._request("GET", f"/v1/generations/{job_id}", headers=hold))
            job = Generation.from_json(response.json())
            if job.done:
                return job
            if time.monotonic() >= deadline:
                raise WaitTimeout(f"job {job_id} is still {job.status} after {timeout:.0f} s")
            if "preference-applied" not in response.headers:
                await asyncio.sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))

    async def cancel(self, job_id: str) -> Generation:
        response = await self._request("POST", f"/v1/generations/{job_id}/cancel", retry=False)
        return Generation.from_json(_checked(response).json())

    async def delete(self, job_id: str) -> None:
        _checked(await self._request("DELETE", f"/v1/generations/{job_id}", retry=False))

    async def image(self, job_id: str, *, format: str = "png", timeout: float = 120.0) -> bytes:
        return await self._download(f"/v1/generations/{job_id}/image", {"format": format}, timeout)

    async def video(self, job_id: str, *, timeout: float = 120.0) -> bytes:
        return await self._download(f"/v1/generations/{job_id}/video", {}, timeout)

    async def _download(self, path: str, params: dict[str, str], timeout: float) -> bytes:
        deadline = time.monotonic() + timeout
        while True:
            response = await self._request("GET", path, params=params)
            if response.status_code == 307:
                async with httpx.AsyncClient(timeout=timeout) as bare:
                    return _checked(await bare.get(response.headers["location"])).content
            if response.status_code != 202 or time.monotonic() >= deadline:
                return _checked(response).content
            await asyncio.sleep(_decode_pause(response))

    async def page(
        self, *, status: str | None = None, limit: int = 20, cursor_url: str | None = None
    ) -> GenerationPage:
        params: dict[str, str | int] = {"limit": limit, **({"status": status} if status else {})}
        if cursor_url:
            response = await self._request("GET", cursor_url)
        else:
            response = await self._request("GET", "/v1/generations", params=params)
        body = _checked(response).json()
        return GenerationPage([Generation.from_json(item) for item in body["results"]], body.get("next"))

    async def list(self, *, status: str | None = None, limit: int = 20) -> AsyncIterator[Generation]:
        page = await self.page(status=status, limit=limit)
        while True:
            for job in page.results:
                yield job
            if page.next is None:
                return
            page = await self.page(cursor_url=page.next)


def _hold(left: float) -> int:
    """Seconds to ask the server to hold a request: what is left of the wait, at most LONG_POLL_S."""
    return max(1, min(LONG_POLL_S, int(left)))
