"""OpenAI's own Python SDK as the client of the live stack's POST /v1/images/generations: an image by
link and by bytes, two at once, and the SDK's typed errors for a size not served and a bad key."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator

import httpx
import openai
import pytest

from db.tenants import TenantCredentials
from tests.e2e.conftest import Stack, make_tenant

pytestmark = pytest.mark.integration

PROMPT = "a small red circle left of a blue square"


@pytest.fixture(scope="module")
def tenant(stack: Stack) -> TenantCredentials:
    return make_tenant(stack.settings, f"openai-{uuid.uuid4().hex[:8]}")


@pytest.fixture
def client(stack: Stack, tenant: TenantCredentials) -> Iterator[openai.OpenAI]:
    # No retries: a retried create would make new jobs, and these tests count them.
    with openai.OpenAI(base_url=f"{stack.base_url}/v1", api_key=tenant.api_key, max_retries=0) as sdk:
        yield sdk


def test_the_sdk_gets_two_images_by_signed_link(stack: Stack, client: openai.OpenAI) -> None:
    answer = client.images.generate(prompt=PROMPT, n=2, size="64x64", response_format="url", user="e2e")
    assert answer.data is not None and len(answer.data) == 2
    for image in answer.data:
        assert image.url is not None
        fetched = httpx.get(image.url, timeout=60)  # no key: the link is signed, as OpenAI's URLs work
        assert fetched.status_code == 200 and fetched.content.startswith(b"\x89PNG")
    jobs = httpx.get(
        f"{stack.base_url}/v1/generations", headers={"Authorization": f"Bearer {client.api_key}"}, timeout=30
    ).json()["results"]
    assert {job["id"] for job in jobs[:2]} == {
        str(image.url).split("?")[0].rsplit("/", 1)[-1] for image in answer.data
    }
    assert all(job["status"] == "succeeded" and job["input"]["width"] == 64 for job in jobs[:2])


def test_the_sdk_gets_an_image_as_base64(client: openai.OpenAI) -> None:
    answer = client.images.generate(prompt=PROMPT, response_format="b64_json")
    assert answer.data is not None and len(answer.data) == 1 and answer.data[0].b64_json is not None
    assert base64.b64decode(answer.data[0].b64_json).startswith(b"\x89PNG")


def test_a_size_not_served_raises_the_sdks_bad_request_listing_the_sizes(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.images.generate(prompt=PROMPT, size="1024x1024")
    assert refused.value.status_code == 400 and "64x64" in refused.value.message
    assert refused.value.param == "size"


def test_a_bad_key_raises_the_sdks_authentication_error(stack: Stack) -> None:
    sdk = openai.OpenAI(base_url=f"{stack.base_url}/v1", api_key="rk_wrong", max_retries=0)
    with sdk, pytest.raises(openai.AuthenticationError) as refused:
        sdk.images.generate(prompt=PROMPT)
    assert refused.value.code == "invalid_api_key"
