"""A tenant never sees another tenant's jobs or images: 404, as if they did not exist."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient

from db.tenants import TenantCredentials

pytestmark = pytest.mark.integration


def test_another_tenants_job_is_404_everywhere(
    client: TestClient, make_tenant: Callable[..., TenantCredentials], set_job: Callable[..., None]
) -> None:
    owner, stranger = make_tenant(), make_tenant()
    job_id = client.post("/v1/generations", json={"prompt": "mine"}, headers=owner.auth_headers).json()["id"]
    set_job(job_id, status="succeeded", image_keys={"png": f"jobs/{job_id}/image.png"})

    for method, path in [
        ("GET", f"/v1/generations/{job_id}"),
        ("GET", f"/v1/generations/{job_id}/image"),
        ("POST", f"/v1/generations/{job_id}/cancel"),
    ]:
        response = client.request(method, path, headers=stranger.auth_headers)
        assert response.status_code == 404, (method, path)
        assert response.json()["detail"] == f"no generation {job_id}"
    assert client.get("/v1/generations", headers=stranger.auth_headers).json()["results"] == []
    assert client.get(f"/v1/generations/{job_id}", headers=owner.auth_headers).status_code == 200
