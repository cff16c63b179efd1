"""The client's video jobs: create_video's body, video()'s download and its problems, against a
scripted transport, then once against the real API app."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any, cast

import httpx
import pytest
from fastapi.testclient import TestClient
from reprise_client import ApiError, AsyncClient, Client
from reprise_client.models import Generation

from db.blobs.local import LocalBlobStore
from db.tenants import TenantCredentials

JOB = {
    "id": "0f6a",
    "kind": "video",
    "status": "starting",
    "input": {"frames": 24},
    "output": None,
    "error": None,
    "metrics": {},
    "urls": {"self": "/v1/generations/0f6a", "video": "/v1/generations/0f6a/video"},
}
WEBP = b"RIFF\x10\x00\x00\x00WEBPVP8X"


def server(requests: list[httpx.Request]) -> httpx.MockTransport:
    """Answers as the API would; records what it was sent."""

    def answer(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        path = request.url.path
        if request.method == "POST" and path == "/v1/generations":
            return httpx.Response(202, json=JOB)
        if path == "/v1/generations/0f6a/video":
            return httpx.Response(200, content=WEBP, headers={"content-type": "image/webp"})
        problem = {"type": "urn:reprise:problem:wrong-kind", "detail": "not a video job; GET .../image"}
        return httpx.Response(404, json=problem, headers={"content-type": "application/problem+json"})

    return httpx.MockTransport(answer)


def test_create_video_sends_the_video_fields_and_leaves_unset_ones_to_the_server() -> None:
    sent: list[httpx.Request] = []
    client = Client("http://api", "rp_x", http=httpx.Client(base_url="http://api", transport=server(sent)))
    job = client.create_video("a red kite", frames=24, fps=12, seed=3, idempotency_key="clip-1")
    assert json.loads(sent[0].content) == {
        "prompt": "a red kite",
        "kind": "video",
        "frames": 24,
        "fps": 12,
        "seed": 3,
    }
    assert sent[0].headers["idempotency-key"] == "clip-1"
    assert (job.kind, job.input["frames"], job.urls["video"]) == ("video", 24, "/v1/generations/0f6a/video")
    client.create("a red kite", kind="video", noise_window=4)  # create takes the fields too
    assert json.loads(sent[1].content) == {"prompt": "a red kite", "kind": "video", "noise_window": 4}


def test_video_returns_the_bytes_and_raises_the_problem() -> None:
    sent: list[httpx.Request] = []
    client = Client("http://api", "rp_x", http=httpx.Client(base_url="http://api", transport=server(sent)))
    assert client.video("0f6a") == WEBP
    with pytest.raises(ApiError) as raised:
        client.video("an-image-job")
    assert raised.value.status == 404 and raised.value.problem["type"] == "urn:reprise:problem:wrong-kind"


def test_the_async_client_has_the_same_video_methods() -> None:
    sent: list[httpx.Request] = []

    async def run() -> tuple[Generation, bytes]:
        http = httpx.AsyncClient(base_url="http://api", transport=server(sent))
        async with AsyncClient("http://api", "rp_x", http=http) as client:
            return await client.create_video("a red kite", frames=8), await client.video("0f6a")

    job, data = asyncio.run(run())
    assert json.loads(sent[0].content) == {"prompt": "a red kite", "kind": "video", "frames": 8}
    assert (job.kind, data) == ("video", WEBP)


def test_a_job_without_kind_parses_as_an_image() -> None:
    body: dict[str, Any] = {**JOB}
    del body["kind"]
    assert Generation.from_json(body).kind == "image"


@pytest.mark.integration
def test_the_client_against_the_api(
    make_client: Callable[..., TestClient],
    tenant: TenantCredentials,
    set_job: Callable[..., None],
    blob_store: LocalBlobStore,
) -> None:
    app_client = make_client()
    app_client.headers.update(tenant.auth_headers)
    # Starlette's TestClient is an httpx2.Client: the same interface as the httpx.Client the client wraps
    client = Client(str(app_client.base_url), "unused", http=cast(httpx.Client, app_client))
    job = client.create_video("a red kite over a beach", frames=8, fps=4)
    assert (job.kind, job.input["frames"], job.input["fps"], job.input["noise_window"]) == (
        "video",
        8,
        4,
        None,
    )
    blob_store.put(f"jobs/{job.id}/video.webp", WEBP)
    set_job(job.id, status="succeeded", image_keys={"video4": f"jobs/{job.id}/video.webp"})
    assert client.get(job.id).output == {
        "video": f"{app_client.base_url}/v1/generations/{job.id}/video",
        "format": "webp",
    }
    assert client.video(job.id) == WEBP
    image = client.create("a red kite over a beach")
    with pytest.raises(ApiError) as raised:
        client.video(image.id)
    assert raised.value.status == 404 and raised.value.problem["type"] == "urn:reprise:problem:wrong-kind"
