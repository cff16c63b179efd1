"""GET /v1/generations/{id}/image: the HTTP contract around the read path (api.reads.ImageReader):
stored images, node answers and their headers, ETag and 304, 202 while decoding, and the error cases.
The decode nodes themselves run in tests/e2e/test_read_path.py."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient

from api.reads import ReadOutcome, ReadTarget
from core.errors import NoDecodeNode
from db.blobs.local import LocalBlobStore
from db.tenants import TenantCredentials
from jobs.read_routing import ReadReply

pytestmark = pytest.mark.integration


class ScriptedReader:
    """Stands in for the decode nodes behind the ImageReader contract; records what it was asked."""

    def __init__(self, answer: ReadOutcome | Exception | None) -> None:
        self.answer = answer
        self.targets: list[ReadTarget] = []

    async def read(self, target: ReadTarget, *, wait_s: float) -> ReadOutcome | None:
        self.targets.append(target)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def ok(data: bytes, tier: str = "latent", *, coalesced: bool = False) -> ReadOutcome:
    return ReadOutcome(ReadReply("ok", tier=tier, node="decode-a", data=data), coalesced=coalesced)


def new_job(client: TestClient, who: TenantCredentials) -> str:
    job_id: str = client.post("/v1/generations", json={"prompt": "a fox"}, headers=who.auth_headers).json()[
        "id"
    ]
    return job_id


def test_a_node_answer_is_served_with_its_headers(
    make_client: Callable[..., TestClient], tenant: TenantCredentials, set_job: Callable[..., None]
) -> None:
    reader = ScriptedReader(ok(b"\xff\xd8jpeg", coalesced=True))
    client = make_client(reader=reader)
    job_id = new_job(client, tenant)
    set_job(job_id, status="succeeded", final_latent_key=f"jobs/{job_id}/final.latent")
    response = client.get(f"/v1/generations/{job_id}/image?format=jpeg", headers=tenant.auth_headers)
    assert response.status_code == 200 and response.content == b"\xff\xd8jpeg"
    assert response.headers["content-type"] == "image/jpeg"
    assert response.headers["content-length"] == "6"
    assert response.headers["etag"] == f'W/"{job_id}.jpeg"'
    assert "immutable" in response.headers["cache-control"]
    assert (response.headers["x-reprise-read"], response.headers["x-reprise-coalesced"]) == ("latent", "true")
    assert reader.targets == [ReadTarget(uuid.UUID(job_id), "jpeg", f"jobs/{job_id}/final.latent", None)]
    again = client.get(
        f"/v1/generations/{job_id}/image?format=jpeg",
        headers={**tenant.auth_headers, "If-None-Match": response.headers["etag"]},
    )
    assert again.status_code == 304 and again.content == b"" and len(reader.targets) == 1


def test_a_stored_image_goes_through_the_nodes_and_without_them_comes_from_the_store(
    make_client: Callable[..., TestClient],
    tenant: TenantCredentials,
    set_job: Callable[..., None],
    blob_store: LocalBlobStore,
) -> None:
    blob_store.put("jobs/x/image.webp", b"RIFF-webp-bytes")
    reader = ScriptedReader(NoDecodeNode("none alive"))
    client = make_client(reader=reader)
    job_id = new_job(client, tenant)
    set_job(job_id, status="succeeded", image_keys={"webp": "jobs/x/image.webp"})
    # delivery=redirect on a store without presigned URLs (local disk): the bytes
    response = client.get(
        f"/v1/generations/{job_id}/image?format=webp&delivery=redirect", headers=tenant.auth_headers
    )
    assert response.status_code == 200 and response.content == b"RIFF-webp-bytes"
    assert response.headers["x-reprise-read"] == "stored"
    assert reader.targets[0].image_key == "jobs/x/image.webp"  # the nodes were asked first (their cache)


def test_a_slow_decode_answers_202_with_retry_after(
    make_client: Callable[..., TestClient], tenant: TenantCredentials, set_job: Callable[..., None]
) -> None:
    client = make_client(reader=ScriptedReader(None))
    job_id = new_job(client, tenant)
    set_job(job_id, status="succeeded", final_latent_key="jobs/e/final.latent")
    response = client.get(f"/v1/generations/{job_id}/image", headers=tenant.auth_headers)
    assert response.status_code == 202 and response.headers["retry-after"] == "5"
    assert response.headers["location"].endswith(f"/v1/generations/{job_id}/image")


@pytest.mark.parametrize(
    ("reader", "problem"),
    [
        (ScriptedReader(NoDecodeNode("none alive")), "decode-unavailable"),
        (None, "decode-unavailable"),  # this server was built without a reader
        (ScriptedReader(ReadOutcome(ReadReply("error", message="cuda"), coalesced=False)), "decode-failed"),
    ],
)
def test_no_decode_is_a_503(
    make_client: Callable[..., TestClient],
    tenant: TenantCredentials,
    set_job: Callable[..., None],
    reader: ScriptedReader | None,
    problem: str,
) -> None:
    client = make_client(reader=reader)
    job_id = new_job(client, tenant)
    set_job(job_id, status="succeeded", final_latent_key="jobs/e/final.latent")
    response = client.get(f"/v1/generations/{job_id}/image", headers=tenant.auth_headers)
    assert response.status_code == 503 and response.headers.get("retry-after") == "5"
    assert response.json()["type"] == f"urn:reprise:problem:{problem}"


@pytest.mark.parametrize(
    ("reader", "latent"),
    [(ScriptedReader(ReadOutcome(ReadReply("gone"), coalesced=False)), "jobs/e/final.latent"), (None, None)],
)
def test_an_image_whose_latent_is_gone_is_410(
    make_client: Callable[..., TestClient],
    tenant: TenantCredentials,
    set_job: Callable[..., None],
    reader: ScriptedReader | None,
    latent: str | None,
) -> None:
    client = make_client(reader=reader)
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
