"""Video jobs end to end (FlexCache 4.2.1, 4.2.2): a miss, a whole-prompt hit and a decoupled hit (the object
of one cached video stitched onto the background of another) through HTTP, the admit worker's three
lookups, the GPU workers' video runtime (the tiny text-to-video model) and the animated WebP read back."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from core.scopes import is_video_scope
from core.usage import INSERTION_USES
from db.engine import session_scope
from db.models import CacheEntry, CacheState, Job
from db.tenants import TenantCredentials
from jobs.policies.k_selection import choose_k
from jobs.webhooks import verify
from tests.e2e.conftest import Stack, WebhookReceiver, make_tenant
from tests.e2e.test_stack import TERMINAL, submit, wait_status
from workers.kinds.video.admission import video_table

pytestmark = pytest.mark.integration

FRAMES = 8
CAPTURED = (2, 4, 6, 8)  # the stack's capture steps of T = 10


@pytest.fixture(scope="module")
def tenant(stack: Stack) -> TenantCredentials:
    return make_tenant(stack.settings, f"video-{uuid.uuid4().hex[:8]}")


def video(stack: Stack, tenant: TenantCredentials, prompt: str, seed: int, **extra: str) -> dict[str, Any]:
    body = {"prompt": prompt, "seed": seed, "kind": "video", "frames": FRAMES, "fps": 4, **extra}
    job = submit(stack, tenant, body)
    done = wait_status(stack, tenant, job["id"], TERMINAL, timeout_s=300.0)
    assert done["status"] == "succeeded", done
    return done


def expected_k(stack: Stack, similarity: float) -> int:
    """The table's k for this similarity (profiled on T = 50), over the states a T = 10 run stores."""
    profiled = choose_k(similarity, video_table(stack.settings), None)
    assert profiled is not None
    return max(k for k in CAPTURED if k * 50 // 10 <= profiled)


def row(stack: Stack, job_id: str) -> Job:
    with session_scope(stack.settings) as session:
        job = session.get(Job, uuid.UUID(job_id))
        assert job is not None
        session.expunge(job)
        return job


def entry_of(stack: Stack, job_id: str) -> tuple[CacheEntry, list[int]]:
    with session_scope(stack.settings) as session:
        entry = session.scalars(select(CacheEntry).where(CacheEntry.source_job_id == uuid.UUID(job_id))).one()
        ks = sorted(session.scalars(select(CacheState.k).where(CacheState.entry_id == entry.id)))
        session.expunge(entry)
        return entry, ks


def test_video_miss_whole_hit_and_decoupled_hit(
    stack: Stack, tenant: TenantCredentials, webhook_receiver: WebhookReceiver
) -> None:
    # 1. Misses: each runs T steps, stores an animated WebP, and caches its states at every capture step
    #    in the tenant's video scope, with its object and background phrases' embeddings when it has both.
    fox = video(stack, tenant, "a red fox running in a snowy forest", seed=1, webhook=webhook_receiver.url)
    bus = video(stack, tenant, "a yellow bus driving on a sandy beach", seed=2)
    coin = video(stack, tenant, "a spinning golden coin", seed=3)  # no background phrase
    for done in (fox, bus, coin):
        assert done["metrics"]["route"] == "miss"
        assert sum(done["metrics"]["denoiser_evaluations"].values()) == 10
        entry, ks = entry_of(stack, done["id"])
        assert is_video_scope(entry.scope) and entry.frames == FRAMES
        assert ks == list(CAPTURED)
        assert (entry.background_embedding is not None) == (done is not coin)
    url = f"{stack.base_url}/v1/generations/{fox['id']}"
    webp = httpx.get(f"{url}/video", headers=tenant.auth_headers, timeout=30)
    assert webp.status_code == 200, webp.text
    assert webp.headers["content-type"] == "image/webp"
    assert webp.content[:4] == b"RIFF" and webp.content[8:12] == b"WEBP" and b"ANIM" in webp.content[:64]
    image = httpx.get(f"{url}/image", headers=tenant.auth_headers, timeout=30)  # a video job has no image
    delivery = webhook_receiver.wait_for(fox["id"], "generation.completed")  # signed, as an image job's
    verify(tenant.webhook_secret, delivery.headers, delivery.body)
    assert delivery.json()["data"]["kind"] == "video" and delivery.json()["data"]["output"]["video"]
    assert image.status_code == 404 and image.headers["content-type"] == "application/problem+json"

    # 2. The fox on the bus's beach: the object phrase matches the fox's entry, the background phrase the
    #    bus's; min(Sim_object, Sim_background) beats the whole prompt's similarity (4.2.1), so it starts
    #    from the fox's state k stitched onto the bus's (4.2.2) and runs T - k steps.
    stitched = video(stack, tenant, "a red fox running on a sandy beach", seed=4)
    metrics = stitched["metrics"]
    fox_entry, bus_entry = entry_of(stack, fox["id"])[0], entry_of(stack, bus["id"])[0]
    job = row(stack, stitched["id"])
    assert metrics["route"] == "hit" and job.video_hit == "decoupled"
    assert job.source_entry_id == fox_entry.id and job.background_entry_id == bus_entry.id
    k = expected_k(stack, metrics["similarity"])
    assert metrics["k"] == k
    assert sum(metrics["denoiser_evaluations"].values()) == 10 - k

    # 3. The coin in other words: a whole hit on its entry, which saves back only the states after k
    #    (FlexCache 4.2.4).
    again = video(stack, tenant, "a spinning gold coin, close up", seed=5)
    metrics = again["metrics"]
    coin_entry = entry_of(stack, coin["id"])[0]
    assert metrics["route"] == "hit" and metrics["source_entry"] == str(coin_entry.id)
    assert row(stack, again["id"]).video_hit == "whole"
    k = expected_k(stack, metrics["similarity"])
    assert metrics["k"] == k
    assert sum(metrics["denoiser_evaluations"].values()) == 10 - k
    saved = entry_of(stack, again["id"])[1] if k < CAPTURED[-1] else []
    assert saved == [step for step in CAPTURED if step > k]
    with session_scope(stack.settings) as session:  # each source's use counted once, with its job
        uses = {
            row.id: row.access_count
            for row in session.execute(select(CacheEntry.id, CacheEntry.access_count))
        }
    used_once = INSERTION_USES + 1  # an insertion counts as a use (NIRVANA 5.4), then the one hit
    assert [uses[entry.id] for entry in (fox_entry, bus_entry, coin_entry)] == [used_once] * 3


def test_video_input_errors_are_problems(stack: Stack, tenant: TenantCredentials) -> None:
    for body in (
        {"prompt": "a fox", "kind": "video", "frames": 0},
        {"prompt": "a fox", "kind": "image", "frames": 8},
        {"prompt": "a fox", "kind": "video", "frames": 8, "noise_window": 9},
    ):
        response = httpx.post(f"{stack.base_url}/v1/generations", json=body, headers=tenant.auth_headers)
        assert response.status_code == 422, body
        assert response.headers["content-type"] == "application/problem+json"


def test_the_default_video_model_is_the_labs_and_its_videos_are_judged(
    stack: Stack, tenant: TenantCredentials
) -> None:
    # lab:video by default: a moving scene of the lab's world is judged by the video judge on the
    # worker (its frames decoded once, counted); a prompt of no lab scene is not, and costs no decode.
    scene = video(
        stack, tenant, "a small red circle moving to the right in front of a striped yellow backdrop", 6
    )
    other = video(stack, tenant, "a red fox running in a snowy forest, at dusk", seed=7)
    assert stack.settings.video_model_name == "lab:video"
    assert 0.0 <= scene["metrics"]["quality"] <= 1.0 and row(stack, scene["id"]).vae_decodes == 1
    assert other["metrics"].get("quality") is None and row(stack, other["id"]).vae_decodes == 0
    assert scene["metrics"]["denoiser_evaluations"] == {"lab:video": 10}
