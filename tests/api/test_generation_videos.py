"""GET /v1/generations/{id}/video: the stored animated WebP, its caching headers, and the
problems around it: not done yet, not stored any more, an image job, and .../image of a video job."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.main import create_app
from core.settings import Settings
from db.blobs.local import LocalBlobStore
from db.tenants import TenantCredentials

pytestmark = pytest.mark.integration

WEBP = b"RIFF\x1a\x00\x00\x00WEBPVP8X-animated"


def new_job(client: TestClient, who: TenantCredentials, kind: str = "video") -> str:
    body = {"prompt": "a red kite over a beach", "kind": kind}
    job_id: str = client.post("/v1/generations", json=body, headers=who.auth_headers).json()["id"]
    return job_id


def finished_video(
    client: TestClient, who: TenantCredentials, set_job: Callable[..., None], blobs: LocalBlobStore
) -> str:
    """A video job as the video worker leaves it: succeeded, its WebP in the blob store."""
    job_id = new_job(client, who)
    blobs.put(f"jobs/{job_id}/video.webp", WEBP)
    set_job(job_id, status="succeeded", image_keys={"video8": f"jobs/{job_id}/video.webp"})
    return job_id


def test_a_succeeded_video_is_served_from_the_store_with_its_headers(
    client: TestClient, tenant: TenantCredentials, set_job: Callable[..., None], blob_store: LocalBlobStore
) -> None:
    job_id = finished_video(client, tenant, set_job, blob_store)
    response = client.get(f"/v1/generations/{job_id}/video", headers=tenant.auth_headers)
    assert response.status_code == 200 and response.content == WEBP
    assert response.headers["content-type"] == "image/webp"
    assert response.headers["etag"] == f'W/"{job_id}.webp"'
    assert "immutable" in response.headers["cache-control"]
    again = client.get(
        f"/v1/generations/{job_id}/video",
        headers={**tenant.auth_headers, "If-None-Match": response.headers["etag"]},
    )
    assert again.status_code == 304 and again.content == b""
    # the job object's link is the route
    output = client.get(f"/v1/generations/{job_id}", headers=tenant.auth_headers).json()["output"]
    assert output["video"] == f"http://testserver/v1/generations/{job_id}/video"


@pytest.mark.parametrize("status", ["starting", "processing", "failed", "canceled"])
def test_a_video_job_not_succeeded_is_the_image_routes_409(
    client: TestClient, tenant: TenantCredentials, set_job: Callable[..., None], status: str
) -> None:
    job_id = new_job(client, tenant)
    set_job(job_id, status=status)
    problem = problem_of(client.get(f"/v1/generations/{job_id}/video", headers=tenant.auth_headers), 409)
    assert problem["type"] == "urn:reprise:problem:not-ready"
    assert problem["detail"] == f"generation {job_id} is {status}; its video exists once it has succeeded"


def problem_of(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    return body


def test_the_video_of_an_image_job_is_a_404_pointing_at_its_image(
    client: TestClient, tenant: TenantCredentials, set_job: Callable[..., None]
) -> None:
    job_id = new_job(client, tenant, kind="image")
    set_job(job_id, status="succeeded", final_latent_key=f"jobs/{job_id}/final.latent")
    problem = problem_of(client.get(f"/v1/generations/{job_id}/video", headers=tenant.auth_headers), 404)
    assert problem["type"] == "urn:reprise:problem:wrong-kind"
    assert problem["detail"] == f"generation {job_id} is not a video job; GET /v1/generations/{job_id}/image"


def test_the_image_of_a_video_job_is_a_404_pointing_at_its_video(
    client: TestClient, tenant: TenantCredentials, set_job: Callable[..., None], blob_store: LocalBlobStore
) -> None:
    job_id = finished_video(client, tenant, set_job, blob_store)
    for fmt in ("png", "webp"):
        response = client.get(f"/v1/generations/{job_id}/image?format={fmt}", headers=tenant.auth_headers)
        problem = problem_of(response, 404)
        assert problem["type"] == "urn:reprise:problem:wrong-kind"
        assert problem["detail"].endswith(f"is not an image job; GET /v1/generations/{job_id}/video")


@pytest.mark.parametrize("case", ["no key", "blob missing", "purged"])
def test_a_video_no_longer_stored_is_a_410(
    client: TestClient, tenant: TenantCredentials, set_job: Callable[..., None], case: str
) -> None:
    job_id = new_job(client, tenant)
    cases: dict[str, dict[str, Any]] = {
        "no key": {},
        "blob missing": {"image_keys": {"video8": f"jobs/{job_id}/video.webp"}},
        "purged": {
            "image_keys": {"video8": f"jobs/{job_id}/video.webp"},
            "outputs_purged_at": "2026-01-01T00:00:00Z",
        },
    }
    set_job(job_id, status="succeeded", **cases[case])
    problem = problem_of(client.get(f"/v1/generations/{job_id}/video", headers=tenant.auth_headers), 410)
    assert problem["type"] == "urn:reprise:problem:video-gone"


def test_a_deleted_or_anothers_video_job_is_a_404(
    client: TestClient,
    tenant: TenantCredentials,
    make_tenant: Callable[..., TenantCredentials],
    set_job: Callable[..., None],
    blob_store: LocalBlobStore,
) -> None:
    job_id = finished_video(client, tenant, set_job, blob_store)
    other = make_tenant()
    problem = problem_of(client.get(f"/v1/generations/{job_id}/video", headers=other.auth_headers), 404)
    assert problem["type"] == "urn:reprise:problem:not-found"
    assert client.delete(f"/v1/generations/{job_id}", headers=tenant.auth_headers).status_code == 204
    problem = problem_of(client.get(f"/v1/generations/{job_id}/video", headers=tenant.auth_headers), 404)
    assert problem["type"] == "urn:reprise:problem:not-found"
    assert not blob_store.exists(f"jobs/{job_id}/video.webp")  # DELETE took the job's blobs with it
    assert client.get("/v1/generations/nope/video", headers=tenant.auth_headers).status_code == 404
    assert client.get(f"/v1/generations/{job_id}/video").status_code == 401


def test_the_openapi_document_describes_the_video_route_and_fields() -> None:
    spec = create_app(Settings.model_validate({})).openapi()
    operation = spec["paths"]["/v1/generations/{job_id}/video"]["get"]
    assert operation["operationId"] == "get_generation_video"
    responses = operation["responses"]
    assert "image/webp" in responses["200"]["content"]
    for code in ("401", "404", "409", "410"):
        assert "application/problem+json" in responses[code]["content"], code
    schemas = spec["components"]["schemas"]
    assert {"kind", "frames", "fps", "noise_window"} <= set(schemas["GenerationCreate"]["properties"])
    assert "kind" in schemas["Generation"]["properties"]
    assert {"frames", "fps", "noise_window"} <= set(schemas["VideoGenerationInput"]["required"])
    assert {"video_hit", "background_entry"} <= set(schemas["VideoGenerationMetrics"]["properties"])
