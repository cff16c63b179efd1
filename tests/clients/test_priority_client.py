"""The client's priority and deadline fields against the real API app: sent when set, left to the
server's defaults when not, read back from the job, and a deadline the server refuses raised as its
problem."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import httpx
import pytest
from fastapi.testclient import TestClient
from reprise_client import Client, InvalidRequest

from db.tenants import TenantCredentials

pytestmark = pytest.mark.integration


def test_the_client_sends_priority_and_deadline_and_reads_them_back(
    make_client: Callable[..., TestClient], tenant: TenantCredentials
) -> None:
    app_client = make_client()
    app_client.headers.update(tenant.auth_headers)
    client = Client(str(app_client.base_url), "unused", http=cast(httpx.Client, app_client))
    urgent = client.create("a red kite", priority="high", deadline_s=45.0, on_deadline="best_effort")
    assert (urgent.priority, urgent.deadline_s, urgent.input["on_deadline"]) == ("high", 45.0, "best_effort")
    assert client.get(urgent.id).priority == "high"
    plain = client.create("a red kite")
    assert (plain.priority, plain.deadline_s) == ("normal", None)
    with pytest.raises(InvalidRequest) as refused:
        client.create("a red kite", priority="urgent")  # type: ignore[arg-type]  # what the server refuses
    assert refused.value.status == 422 and refused.value.errors[0]["field"] == "priority"
