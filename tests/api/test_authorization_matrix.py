"""The authorization matrix: every route of the app, with every kind of credential, on real resources of
every kind (a job, its image, a video job's video, its event stream, the statistics, the keys).

The rules (docs/api.md, "Who may do what"): a missing, unknown, expired or revoked key is 401 with
WWW-Authenticate; a valid key reaches only its own tenant's jobs, and another tenant's job is 404, as if
it did not exist, for an admin key too (an admin key adds service-wide statistics, not other tenants'
jobs); service-wide statistics without an admin key are 403; a signed output link needs no key and
answers the same whatever key comes with it; health, metrics and the OpenAPI documents are public;
keys are managed by the CLI only, no route reaches them. A throttled tenant gets 429 on every keyed route.

The rows are checked against the app's own routes: a route added without a row fails here.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.routing import iter_route_contexts
from fastapi.testclient import TestClient

from api.main import create_app
from core.server_keys import output_link_key
from core.settings import Settings
from core.vocabulary import WebhookEvent
from db.blobs.local import LocalBlobStore
from db.engine import session_scope
from db.keys import revoke_key
from db.tenants import TenantCredentials, issue_key
from db.webhooks import claim_attempt, finish_attempt
from jobs.output_links import link_signature
from jobs.webhooks import message_id

pytestmark = pytest.mark.integration

Response = Any  # what TestClient answers (its own httpx's Response)

PNG = b"\x89PNG\r\n\x1a\nmatrix"
WEBP = b"RIFF\x1a\x00\x00\x00WEBPVP8X-matrix"
CREDENTIALS = ("none", "expired", "revoked", "other", "admin", "owner", "throttled")
DEAD = ("none", "expired", "revoked")


@dataclass
class World:
    """The owner's resources and a key of every kind. Expired and revoked keys are the owner's own: a
    dead key must not reach even its own tenant's jobs. `other` is another tenant's key, `admin` an
    operator's (an admin key of a third tenant)."""

    client: TestClient
    throttled_client: TestClient  # an app whose limit is 1 request per 1000 s: the same Redis buckets
    owner: TenantCredentials
    other: TenantCredentials
    admin: TenantCredentials
    keys: dict[str, dict[str, str]]
    job: str  # a succeeded image job, its PNG stored
    video: str  # a succeeded video job, its WebP stored
    link: str  # the signed output link of the image job (a completed webhook's signed_output)


def _issue(settings: Settings, name: str, **options: Any) -> TenantCredentials:
    with session_scope(settings) as session:
        return issue_key(session=session, name=name, **options)


def _created(client: TestClient, who: TenantCredentials, **body: Any) -> str:
    response = client.post("/v1/generations", json={"prompt": "a fox", **body}, headers=who.auth_headers)
    assert response.status_code == 202, response.text
    job_id: str = response.json()["id"]
    return job_id


@pytest.fixture
def world(
    make_client: Callable[..., TestClient],
    make_tenant: Callable[..., TenantCredentials],
    api_settings: Settings,
    set_job: Callable[..., None],
    blob_store: LocalBlobStore,
) -> World:
    client = make_client()
    throttled_client = make_client(rate_limit_per_s=0.001, rate_limit_burst=1)
    owner, other, admin = make_tenant(), make_tenant(), make_tenant(admin=True)
    expired = _issue(api_settings, owner.name, expires_at=datetime.now(UTC) - timedelta(seconds=1))
    revoked = _issue(api_settings, owner.name)
    assert revoked.key_id is not None
    with session_scope(api_settings) as session:
        revoke_key(session, revoked.key_id)
    throttled = make_tenant()
    job = _created(client, owner)
    blob_store.put(f"jobs/{job}/image.png", PNG)
    set_job(job, status="succeeded", image_keys={"png": f"jobs/{job}/image.png"})
    video = _created(client, owner, kind="video")
    blob_store.put(f"jobs/{video}/video.webp", WEBP)
    set_job(video, status="succeeded", image_keys={"video8": f"jobs/{video}/video.webp"})
    expires = int((datetime.now(UTC) + timedelta(hours=1)).timestamp())
    signature = link_signature(output_link_key(api_settings), uuid.UUID(job), expires)
    # The throttled tenant spends its one token; the next comes back in 1000 s.
    assert throttled_client.get("/v1/generations", headers=throttled.auth_headers).status_code == 200
    keys = {
        "none": {},
        "expired": expired.auth_headers,
        "revoked": revoked.auth_headers,
        "other": other.auth_headers,
        "admin": admin.auth_headers,
        "owner": owner.auth_headers,
        "throttled": throttled.auth_headers,
    }
    link = f"/v1/outputs/{job}?expires={expires}&signature={signature}"
    return World(client, throttled_client, owner, other, admin, keys, job, video, link)


@dataclass(frozen=True)
class Row:
    """A route's request on the world's resources and what each credential gets. `expect` maps a
    credential to a status; credentials left out get the row's default for their kind."""

    call: Callable[[World, dict[str, str]], Response]
    expect: dict[str, int]
    check: Callable[[World, str, Response], None] | None = None


def _job_route(method: str, suffix: str, ok: int, *, video: bool = False, **extra: Any) -> Row:
    """A route on one of the owner's jobs: 401 for a dead key, 404 for anyone else's, `ok` for the owner."""

    def call(world: World, headers: dict[str, str]) -> Response:
        target = world.video if video else world.job
        return world.client.request(method, f"/v1/generations/{target}{suffix}", headers=headers, **extra)

    return Row(call, {"other": 404, "admin": 404, "owner": ok})


def _delivery_route(method: str, suffix: str, ok: int) -> Row:
    """A route on the webhook delivery of the owner's job (a failed one, recorded here): 401 for a dead
    key, 404 for anyone else's, `ok` for the owner."""

    def call(world: World, headers: dict[str, str]) -> Response:
        delivery = message_id(uuid.UUID(world.job), WebhookEvent.COMPLETED)
        with session_scope(world.client.app.state.reprise.settings) as session:  # type: ignore[attr-defined]
            claimed = claim_attempt(
                session,
                job_id=uuid.UUID(world.job),
                message_id=delivery,
                event=WebhookEvent.COMPLETED.value,
                url="https://hooks.example.com/reprise",
                attempt=1,
                next_attempt_at=None,
            )
            if claimed is not None:
                finish_attempt(
                    session, delivery_id=claimed, status_code=500, error="HTTP 500", next_attempt_at=None
                )
        return world.client.request(method, f"/v1/webhook-deliveries/{delivery}{suffix}", headers=headers)

    return Row(call, {"other": 404, "admin": 404, "owner": ok})


def _unseen_by_strangers(world: World, who: str, response: Response) -> None:
    if who in ("other", "admin", "throttled") and response.status_code == 200:
        assert world.job not in response.text and world.video not in response.text


def _created_for_caller(world: World, who: str, response: Response) -> None:
    if response.status_code == 202:  # a new job of the caller's own tenant: the owner cannot see it
        visible = world.client.get(f"/v1/generations/{response.json()['id']}", headers=world.keys["owner"])
        assert visible.status_code == (200 if who == "owner" else 404)


def _stats_scope(world: World, who: str, response: Response) -> None:
    if response.status_code == 200:
        assert response.json()["scope"] == ("global" if who == "admin" else "tenant")
        if who == "other":
            assert response.json()["jobs"] == {}  # the owner's two jobs are not counted


def _link(world: World, headers: dict[str, str], *, tampered: bool = False) -> Response:
    url = world.link.replace("expires=", "expires=1") if tampered else world.link
    return world.client.get(url, headers=headers)


def _public(path: str) -> Row:
    return Row(
        lambda world, headers: world.client.get(path, headers=headers), dict.fromkeys(CREDENTIALS, 200)
    )


def _get(path: str) -> Callable[[World, dict[str, str]], Response]:
    return lambda world, headers: world.client.get(path, headers=headers)


MATRIX: dict[tuple[str, str], Row] = {
    ("POST", "/v1/generations"): Row(
        lambda world, headers: world.client.post("/v1/generations", json={"prompt": "mine"}, headers=headers),
        {"other": 202, "admin": 202, "owner": 202},
        _created_for_caller,
    ),
    ("GET", "/v1/generations"): Row(
        _get("/v1/generations"), {"other": 200, "admin": 200, "owner": 200}, _unseen_by_strangers
    ),
    ("GET", "/v1/generations/{job_id}"): _job_route("GET", "", 200),
    ("GET", "/v1/webhook-deliveries"): Row(
        _get("/v1/webhook-deliveries"), {"other": 200, "admin": 200, "owner": 200}, _unseen_by_strangers
    ),
    ("GET", "/v1/webhook-deliveries/{delivery_id}"): _delivery_route("GET", "", 200),
    ("POST", "/v1/webhook-deliveries/{delivery_id}/redeliver"): _delivery_route("POST", "/redeliver", 202),
    ("POST", "/v1/webhook-deliveries/redeliver"): Row(
        lambda world, headers: world.client.post(
            "/v1/webhook-deliveries/redeliver", params={"since": "2000-01-01T00:00:00Z"}, headers=headers
        ),
        {"other": 202, "admin": 202, "owner": 202},
        _unseen_by_strangers,
    ),
    ("POST", "/v1/generations/{job_id}/cancel"): _job_route("POST", "/cancel", 200),
    ("DELETE", "/v1/generations/{job_id}"): _job_route("DELETE", "", 204),
    ("GET", "/v1/generations/{job_id}/events"): _job_route("GET", "/events", 200),
    ("GET", "/v1/generations/{job_id}/image"): _job_route("GET", "/image", 200),
    ("GET", "/v1/generations/{job_id}/video"): _job_route("GET", "/video", 200, video=True),
    ("GET", "/v1/stats"): Row(_get("/v1/stats"), {"other": 200, "admin": 200, "owner": 200}, _stats_scope),
    # OpenAI's images API: a size no deployment serves, so that a valid key's answer comes at once.
    ("POST", "/v1/images/generations"): Row(
        lambda world, headers: world.client.post(
            "/v1/images/generations", json={"prompt": "mine", "size": "1x1"}, headers=headers
        ),
        {"other": 400, "admin": 400, "owner": 400},
    ),
    ("GET", "/v1/outputs/{job_id}"): Row(_link, dict.fromkeys(CREDENTIALS, 200)),
    ("GET", "/healthz"): _public("/healthz"),
    ("GET", "/readyz"): _public("/readyz"),
    ("GET", "/metrics"): _public("/metrics"),
    ("GET", "/openapi.json"): _public("/openapi.json"),
    ("GET", "/docs"): _public("/docs"),
    ("GET", "/docs/oauth2-redirect"): _public("/docs/oauth2-redirect"),
    ("GET", "/redoc"): _public("/redoc"),
}

# Not routes of their own, but requests the rules single out.
EXTRA: dict[str, Row] = {
    "global stats": Row(_get("/v1/stats?scope=global"), {"other": 403, "admin": 200, "owner": 403}),
    "tampered link": Row(
        lambda world, headers: _link(world, headers, tampered=True), dict.fromkeys(CREDENTIALS, 403)
    ),
    "an image job's video": _job_route("GET", "/video", 404),  # wrong-kind, for the owner too
    "keys list": Row(_get("/v1/keys"), dict.fromkeys(CREDENTIALS, 404)),
    "key create": Row(
        lambda world, headers: world.client.post("/v1/keys", json={"tenant": "x"}, headers=headers),
        dict.fromkeys(CREDENTIALS, 404),
    ),
    "key revoke": Row(
        lambda world, headers: world.client.delete(f"/v1/keys/{uuid.uuid4()}", headers=headers),
        dict.fromkeys(CREDENTIALS, 404),
    ),
}


def expected(row: Row, who: str) -> int:
    if who in row.expect:
        return row.expect[who]
    if who in DEAD:
        return 401
    assert who == "throttled", who
    return 429


def _served_routes() -> set[tuple[str, str]]:
    app = create_app(Settings.model_validate({}))
    served = set()
    for route in iter_route_contexts(app.routes):  # the included routers' routes too
        served |= {(method, route.path or "") for method in route.methods or () if method != "HEAD"}
    return served


def test_every_route_has_a_row_and_every_row_a_route() -> None:
    assert _served_routes() == set(MATRIX)


def test_no_route_reaches_the_keys() -> None:
    assert not [path for _, path in _served_routes() if "key" in path]  # `reprise keys` is the only way


CASES = [(name, who) for name in [*(f"{m} {p}" for m, p in MATRIX), *EXTRA] for who in CREDENTIALS]


def _row(name: str) -> Row:
    if name in EXTRA:
        return EXTRA[name]
    method, path = name.split(" ", 1)
    return MATRIX[(method, path)]


@pytest.mark.parametrize(("name", "who"), CASES, ids=[f"{name} [{who}]" for name, who in CASES])
def test_the_matrix(world: World, name: str, who: str) -> None:
    row = _row(name)
    caller = replace(world, client=world.throttled_client) if who == "throttled" else world
    response = row.call(caller, world.keys[who])
    assert response.status_code == expected(row, who), (name, who, response.text[:300])
    openai = name.startswith("POST /v1/images/")  # errors in OpenAI's shape there (api.openai_errors)
    if response.status_code >= 400:
        assert response.headers["content-type"] == (
            "application/json" if openai else "application/problem+json"
        )
    if response.status_code == 401:
        assert response.headers["www-authenticate"].startswith('Bearer realm="reprise"')
    if response.status_code == 404 and "/v1/generations/" in name:
        assert "no generation" in response.json()["detail"] or response.json()["type"].endswith("wrong-kind")
    if response.status_code == 429:
        body = response.json()
        assert (
            body["error"]["code"] == "rate_limited"
            if openai
            else body["type"] == "urn:reprise:problem:rate-limited"
        )
        assert int(response.headers["retry-after"]) >= 1
    if row.check is not None:
        row.check(world, who, response)
