"""GET /v1/generations/{id}/image: stored images, decoding from the latent, and the error cases."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient

from core.errors import BlobNotFound, DecodeTimeout
from db.blobs.local import LocalBlobStore
from db.tenants import TenantCredentials

pytestmark = pytest.mark.integration


class ScriptedDecoder:
    """Stands in for the decode pool behind the ImageDecoder contract; records its calls."""

    def __init__(self, answer: bytes | Exception) -> None:
        self.answer = answer
        self.calls: list[tuple[uuid.UUID, str]] = []

    def decode(self, job_id: uuid.UUID, fmt: str) -> bytes:
        self.calls.append((job_id, fmt))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def new_job(client: TestClient, who: TenantCredentials) -> str:
    job_id: str = client.post("/v1/generations", json={"prompt": "a fox"}, headers=who.auth_headers).json()[
        "id"
    ]
    return job_id


def test_a_stored_image_is_served_from_the_blob_store(
    client: TestClient, tenant: TenantCredentials, set_job: Callable[..., None], blob_store: LocalBlobStore
) -> None:
    job_id = new_job(client, tenant)
    blob_store.put(f"jobs/{job_id}/image.webp", b"RIFF-webp-bytes")
    set_job(job_id, status="succeeded", image_keys={"webp": f"jobs/{job_id}/image.webp"})
    response = client.get(f"/v1/generations/{job_id}/image?format=webp", headers=tenant.auth_headers)
    assert response.status_code == 200
    assert response.content == b"RIFF-webp-bytes"
    assert response.headers["content-type"] == "image/webp"
    assert "immutable" in response.headers["cache-control"]


@pytest.mark.parametrize("image_keys", [{}, {"png": "jobs/evicted/image.png"}])
def test_otherwise_the_latent_is_decoded_in_the_asked_format(
    make_client: Callable[..., TestClient],
    tenant: TenantCredentials,
    set_job: Callable[..., None],
    image_keys: dict[str, str],
) -> None:
    decoder = ScriptedDecoder(b"\xff\xd8jpeg")
    client = make_client(decoder=decoder)
    job_id = new_job(client, tenant)
    set_job(job_id, status="succeeded", final_latent_key="entries/e/final.latent", image_keys=image_keys)
    for fmt in ("jpeg", "png"):
        response = client.get(f"/v1/generations/{job_id}/image?format={fmt}", headers=tenant.auth_headers)
        assert response.status_code == 200 and response.content == b"\xff\xd8jpeg"
        assert response.headers["content-type"] == f"image/{fmt}"
    assert decoder.calls == [(uuid.UUID(job_id), "jpeg"), (uuid.UUID(job_id), "png")]


@pytest.mark.parametrize(
    ("decoder", "problem", "retry_after"),
    [
        (ScriptedDecoder(DecodeTimeout("no answer in 30 s")), "decode-timeout", "5"),
        (None, "decode-unavailable", None),  # this server was built without a decoder
    ],
)
def test_no_decode_is_a_503(
    make_client: Callable[..., TestClient],
    tenant: TenantCredentials,
    set_job: Callable[..., None],
    decoder: ScriptedDecoder | None,
    problem: str,
    retry_after: str | None,
) -> None:
    client = make_client(decoder=decoder)
    job_id = new_job(client, tenant)
    set_job(job_id, status="succeeded", final_latent_key="entries/e/final.latent")
    response = client.get(f"/v1/generations/{job_id}/image", headers=tenant.auth_headers)
    assert response.status_code == 503 and response.headers.get("retry-after") == retry_after
    assert response.json()["type"] == f"urn:reprise:problem:{problem}"


@pytest.mark.parametrize(
    ("decoder", "latent"),
    [(ScriptedDecoder(BlobNotFound("entries/e/final.latent")), "entries/e/final.latent"), (None, None)],
)
def test_an_image_whose_latent_is_gone_is_410(
    make_client: Callable[..., TestClient],
    tenant: TenantCredentials,
    set_job: Callable[..., None],
    decoder: ScriptedDecoder | None,
    latent: str | None,
) -> None:
    client = make_client(decoder=decoder)
    job_id = new_job(client, tenant)
    set_job(job_id, status="succeeded", final_latent_key=latent)
    response = client.get(f"/v1/generations/{job_id}/image", headers=tenant.auth_headers)
    assert response.status_code == 410 and response.json()["type"] == "urn:reprise:problem:image-gone"


@pytest.mark.parametrize("status", ["starting", "processing", "failed", "canceled"])
def test_no_image_before_success_409(
    client: TestClient, tenant: TenantCredentials, set_job: Callable[..., None], status: str
) -> None:
    job_id = new_job(client, tenant)
    set_job(job_id, status=status)
    response = client.get(f"/v1/generations/{job_id}/image", headers=tenant.auth_headers)
    assert response.status_code == 409
    assert (
        response.json()["detail"]
        == f"generation {job_id} is {status}; its image exists once it has succeeded"
    )
