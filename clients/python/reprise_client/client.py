"""Sync and async clients of the Reprise API (`/v1/generations`).

`wait` follows the job's server-sent events (`events`: the job at each change of status, progress or
queue place) until it ends. Where there is no stream (an older server, a proxy that cuts it), it
long-polls: each request asks the server to hold it until the job ends (`Prefer: wait=N`, Replicate's
sync mode); a server that does not honour it (no `Preference-Applied`) is polled instead.
`image` retries while the image is being decoded (202 with Retry-After) and follows a presigned
redirect; `create_video` submits a video job and `video` downloads its animated WebP. Errors come back
as ApiError with the server's problem+json.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx

from reprise_client.errors import ApiError, WaitTimeout
from reprise_client.models import Generation, GenerationPage
from reprise_client.sse import ServerEvent, aparse_events, parse_events

LONG_POLL_S = 30  # per request; the server caps it at 60
POLL_S = 1.0  # between polls, when the server does not hold requests
STREAM_READ_S = 45.0  # the server writes at least every 15 s (a keep-alive comment)
EVENTS_ACCEPT = {"Accept": "text/event-stream"}


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


def _checked(response: httpx.Response) -> httpx.Response:
    if response.status_code >= 400:
        try:
            problem = response.json()
        except ValueError:
            problem = {"detail": response.text}
        raise ApiError(response.status_code, problem if isinstance(problem, dict) else {"detail": problem})
    return response


def _body(prompt: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"prompt": prompt, **{key: value for key, value in params.items() if value is not None}}


def _video_params(frames: int | None, fps: int | None, noise_window: int | None) -> dict[str, Any]:
    """A video job's fields of the body (unset ones left to the server's defaults)."""
    return {"kind": "video", "frames": frames, "fps": fps, "noise_window": noise_window}


def _create_headers(idempotency_key: str | None, wait_s: int | None) -> dict[str, str]:
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    if wait_s:
        headers["Prefer"] = f"wait={wait_s}"
    return headers


def _retry_after(response: httpx.Response) -> float:
    try:
        return max(0.1, float(response.headers.get("retry-after", "1")))
    except ValueError:
        return 1.0


class Client:
    """The API over one httpx.Client. Use as a context manager, or call close()."""

    def __init__(
        self, base_url: str, api_key: str, *, timeout: float = 90.0, http: httpx.Client | None = None
    ):
        self.http = http or httpx.Client(
            base_url=base_url.rstrip("/"), headers=_headers(api_key), timeout=timeout
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self.http.close()

    def create(
        self, prompt: str, *, idempotency_key: str | None = None, wait_s: int | None = None, **params: Any
    ) -> Generation:
        """Submit a job (params: negative_prompt, seed, steps, width, height, guidance, cache, decode,
        webhook, webhook_events_filter; kind="video" with frames, fps, noise_window: see create_video).
        With wait_s the server answers when the job ends, or then."""
        response = self.http.post(
            "/v1/generations", json=_body(prompt, params), headers=_create_headers(idempotency_key, wait_s)
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
            _checked(self.http.get(f"/v1/generations/{job_id}", headers=headers)).json()
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
            response = _checked(
                self.http.get(f"/v1/generations/{job_id}", headers={"Prefer": f"wait={_hold(left)}"})
            )
            job = Generation.from_json(response.json())
            if job.done:
                return job
            if time.monotonic() >= deadline:
                raise WaitTimeout(f"job {job_id} is still {job.status} after {timeout:.0f} s")
            if "preference-applied" not in response.headers:
                time.sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))

    def cancel(self, job_id: str) -> Generation:
        return Generation.from_json(_checked(self.http.post(f"/v1/generations/{job_id}/cancel")).json())

    def delete(self, job_id: str) -> None:
        _checked(self.http.delete(f"/v1/generations/{job_id}"))

    def image(self, job_id: str, *, format: str = "png", timeout: float = 120.0) -> bytes:
        """The image's bytes; waits out a decode in progress (202) and follows a presigned redirect."""
        return self._download(f"/v1/generations/{job_id}/image", {"format": format}, timeout)

    def video(self, job_id: str, *, timeout: float = 120.0) -> bytes:
        """A succeeded video job's animated WebP; waits out its decode (202), follows a presigned redirect."""
        return self._download(f"/v1/generations/{job_id}/video", {}, timeout)

    def _download(self, path: str, params: dict[str, str], timeout: float) -> bytes:
        deadline = time.monotonic() + timeout
        while True:
            response = self.http.get(path, params=params)
            if response.status_code == 307:
                return _checked(httpx.get(response.headers["location"], timeout=timeout)).content
            if response.status_code != 202 or time.monotonic() >= deadline:
                return _checked(response).content
            time.sleep(_retry_after(response))

    def page(
        self, *, status: str | None = None, limit: int = 20, cursor_url: str | None = None
    ) -> GenerationPage:
        params: dict[str, str | int] = {"limit": limit, **({"status": status} if status else {})}
        response = (
            self.http.get(cursor_url) if cursor_url else self.http.get("/v1/generations", params=params)
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


class AsyncClient:
    """The same API over httpx.AsyncClient."""

    def __init__(
        self, base_url: str, api_key: str, *, timeout: float = 90.0, http: httpx.AsyncClient | None = None
    ):
        self.http = http or httpx.AsyncClient(
            base_url=base_url.rstrip("/"), headers=_headers(api_key), timeout=timeout
        )

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.http.aclose()

    async def create(
        self, prompt: str, *, idempotency_key: str | None = None, wait_s: int | None = None, **params: Any
    ) -> Generation:
        response = await self.http.post(
            "/v1/generations", json=_body(prompt, params), headers=_create_headers(idempotency_key, wait_s)
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
        response = await self.http.get(f"/v1/generations/{job_id}", headers=headers)
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
            response = _checked(
                await self.http.get(f"/v1/generations/{job_id}", headers={"Prefer": f"wait={_hold(left)}"})
            )
            job = Generation.from_json(response.json())
            if job.done:
                return job
            if time.monotonic() >= deadline:
                raise WaitTimeout(f"job {job_id} is still {job.status} after {timeout:.0f} s")
            if "preference-applied" not in response.headers:
                await asyncio.sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))

    async def cancel(self, job_id: str) -> Generation:
        response = await self.http.post(f"/v1/generations/{job_id}/cancel")
        return Generation.from_json(_checked(response).json())

    async def delete(self, job_id: str) -> None:
        _checked(await self.http.delete(f"/v1/generations/{job_id}"))

    async def image(self, job_id: str, *, format: str = "png", timeout: float = 120.0) -> bytes:
        return await self._download(f"/v1/generations/{job_id}/image", {"format": format}, timeout)

    async def video(self, job_id: str, *, timeout: float = 120.0) -> bytes:
        return await self._download(f"/v1/generations/{job_id}/video", {}, timeout)

    async def _download(self, path: str, params: dict[str, str], timeout: float) -> bytes:
        deadline = time.monotonic() + timeout
        while True:
            response = await self.http.get(path, params=params)
            if response.status_code == 307:
                async with httpx.AsyncClient(timeout=timeout) as bare:
                    return _checked(await bare.get(response.headers["location"])).content
            if response.status_code != 202 or time.monotonic() >= deadline:
                return _checked(response).content
            await asyncio.sleep(_retry_after(response))

    async def page(
        self, *, status: str | None = None, limit: int = 20, cursor_url: str | None = None
    ) -> GenerationPage:
        params: dict[str, str | int] = {"limit": limit, **({"status": status} if status else {})}
        if cursor_url:
            response = await self.http.get(cursor_url)
        else:
            response = await self.http.get("/v1/generations", params=params)
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
