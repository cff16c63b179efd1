"""The request's decode mode (lazy | eager) and the decode counters of /v1/stats (LatentBox
4.1)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.schemas import GenerationCreate
from core.settings import Settings
from db import stats
from db.blobs.local import LocalBlobStore
from db.engine import session_scope
from db.tenants import TenantCredentials

pytestmark = pytest.mark.integration


def test_decode_defaults_to_lazy_and_eager_is_kept_on_the_job(
    client: TestClient, tenant: TenantCredentials
) -> None:
    lazy = client.post("/v1/generations", json={"prompt": "a fox"}, headers=tenant.auth_headers).json()
    eager = client.post(
        "/v1/generations", json={"prompt": "a fox", "decode": "eager"}, headers=tenant.auth_headers
    ).json()
    assert (lazy["input"]["decode"], eager["input"]["decode"]) == ("lazy", "eager")
    read = client.get(f"/v1/generations/{eager['id']}", headers=tenant.auth_headers).json()
    assert read["input"]["decode"] == "eager" and read["metrics"]["vae_decodes"] == 0
    refused = client.post(
        "/v1/generations", json={"prompt": "a fox", "decode": "now"}, headers=tenant.auth_headers
    )
    assert refused.status_code == 422 and "decode" in refused.text


def test_the_default_decode_keeps_an_older_requests_fingerprint() -> None:
    body: dict[str, Any] = {"prompt": "a fox", "seed": 3}
    before_the_field = GenerationCreate.model_validate(body).model_dump(mode="json")
    assert "decode" in before_the_field  # dumped, but not fingerprinted when default
    assert (
        GenerationCreate.model_validate(body).fingerprint()
        == GenerationCreate.model_validate({**body, "decode": "lazy"}).fingerprint()
    )
    assert (
        GenerationCreate.model_validate(body).fingerprint()
        != GenerationCreate.model_validate({**body, "decode": "eager"}).fingerprint()
    )


def _decodes(client: TestClient, who: TenantCredentials) -> dict[str, Any]:
    body: dict[str, Any] = client.get("/v1/stats", headers=who.auth_headers).json()["decodes"]
    return body


def test_stats_show_decodes_per_job_and_per_read(
    client: TestClient,
    tenant: TenantCredentials,
    admin: TenantCredentials,
    api_settings: Settings,
    set_job: Callable[..., None],
    blob_store: LocalBlobStore,
) -> None:
    before = _decodes(client, admin)
    with session_scope(api_settings) as session:  # what the GPU workers and the decode pool record
        stats.record_decodes(session, generations=4, generation_decodes=1)
        stats.record_decodes(session, read_decodes=1)
    job_id = client.post("/v1/generations", json={"prompt": "a fox"}, headers=tenant.auth_headers).json()[
        "id"
    ]
    blob_store.put(f"jobs/{job_id}/image.png", b"png-bytes")
    set_job(job_id, status="succeeded", image_keys={"png": f"jobs/{job_id}/image.png"})
    for _ in range(2):  # two reads, each counted
        assert client.get(f"/v1/generations/{job_id}/image", headers=tenant.auth_headers).status_code == 200
    after = _decodes(client, admin)
    assert after["generations"] - before["generations"] == 4
    assert after["generation_decodes"] - before["generation_decodes"] == 1
    assert after["image_reads"] - before["image_reads"] == 2
    assert after["read_decodes"] - before["read_decodes"] == 1
    assert after["per_job"] == round(after["generation_decodes"] / after["generations"], 4)
    assert after["per_read"] == round(after["read_decodes"] / after["image_reads"], 4)
