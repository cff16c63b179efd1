"""The cache-scope rule: a job shares only when its tenant opted in and the request asked."""

from __future__ import annotations

import uuid

import pytest

from core.scopes import SHARED_SCOPE, insert_scope, lookup_scopes, tenant_scope, uses_shared_scope


@pytest.mark.parametrize(
    ("opted_in", "mode", "shares"),
    [(True, "shared", True), (True, "auto", False), (False, "shared", False), (True, "off", False)],
)
def test_sharing_needs_both_the_tenant_and_the_request(opted_in: bool, mode: str, shares: bool) -> None:
    assert uses_shared_scope(tenant_opted_in=opted_in, cache_mode=mode) is shares


def test_reads_and_writes_agree_on_the_scope() -> None:
    tenant = uuid.uuid4()
    assert lookup_scopes(tenant, shared_cache=False) == (tenant_scope(tenant),)
    assert insert_scope(tenant, shared_cache=False) == tenant_scope(tenant)
    assert lookup_scopes(tenant, shared_cache=True) == (tenant_scope(tenant), SHARED_SCOPE)
    assert insert_scope(tenant, shared_cache=True) == SHARED_SCOPE
    assert tenant_scope(tenant) != tenant_scope(uuid.uuid4())
