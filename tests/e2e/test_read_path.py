"""LatentBox's read path end to end (LatentBox 4.2-4.4): the API under uvicorn and two decode nodes
(Celery workers on the lab's VAE) over real Postgres and Redis. Promotion, eviction under the budget, a
spillover with its write-back, a coalesced burst, DELETE and retention, each through HTTP.

One job is generated; its latent is shared by clones (job rows of their own), so that many distinct
images exist without many generations: a node caches per image (job and format), not per latent.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from bench.live.node_setup import send_setup
from core.vocabulary import Role
from db.blobs.local import LocalBlobStore
from db.engine import session_scope
from db.models import Job
from db.tenants import TenantCredentials
from jobs.celery_app import make_celery_app
from jobs.dispatch import CeleryDispatcher
from jobs.passes.retention import purge_due_outputs
from jobs.policies.hash_ring import HashRing
from jobs.queues import decode_queue
from jobs.read_routing import image_id, leave, live_nodes, node_snapshots
from tests.e2e.conftest import Stack, make_tenant
from tests.e2e.test_stack import submit, wait_status

pytestmark = pytest.mark.integration

SECOND_NODE = "decode-e2e2"
DEFAULT_SETUP = {
    "capacity": 256 * 2**20,  # the settings' defaults (core.settings.reads)
    "window": 1000,
    "tiering": "adaptive",
    "alpha": 0.5,
    "store": "latents",
    "promote_after": 8,
}
CLONES = 40


@pytest.fixture(scope="module")
def nodes(stack: Stack) -> Iterator[list[str]]:
    """The stack's decode node and a second one, both in the ring."""
    stack.start(
        f"worker-{SECOND_NODE}", ["worker", "--role", Role.DECODE.value, "--name", f"{SECOND_NODE}@%h"]
    )
    client = redis.Redis.from_url(stack.settings.broker_url)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        alive = live_nodes(client, heartbeat_s=stack.settings.read_heartbeat_s)
        if len(alive) >= 2 and any(name.startswith(SECOND_NODE) for name in alive):
            break
        time.sleep(0.5)
    else:
        raise AssertionError(f"the second decode node never joined; logs in {stack.logs}")
    yield alive
    # The second node stops as an operator would stop it (SIGTERM: it leaves the ring at once), and the
    # stack's own node goes back to the settings' set-up, for the modules that run after this one.
    second = stack.processes.pop(f"worker-{SECOND_NODE}")
    os.killpg(second.pid, signal.SIGTERM)
    second.wait(timeout=60)
    leave(client, next(name for name in alive if name.startswith(SECOND_NODE)))  # should it not have
    configure(stack, [name for name in alive if not name.startswith(SECOND_NODE)], **DEFAULT_SETUP)


@pytest.fixture(scope="module")
def tenant(stack: Stack) -> TenantCredentials:
    return make_tenant(stack.settings, f"reads-{uuid.uuid4().hex[:8]}")


@pytest.fixture(scope="module")
def images(stack: Stack, tenant: TenantCredentials) -> list[str]:
    """One generated job and CLONES more succeeded jobs sharing its stored latent: their ids."""
    job = submit(stack, tenant, {"prompt": "a small red circle", "seed": 3})
    wait_status(stack, tenant, job["id"], {"succeeded"})
    ids = [job["id"]]
    with session_scope(stack.settings) as session:
        source = session.get_one(Job, uuid.UUID(job["id"]))
        for index in range(CLONES):
            clone = Job(
                tenant_id=source.tenant_id,
                status="succeeded",
                prompt=f"clone {index}",
                seed=index,
                steps=source.steps,
                width=source.width,
                height=source.height,
                guidance=source.guidance,
                final_latent_key=source.final_latent_key,
                finished_at=datetime.now(UTC),
            )
            session.add(clone)
            session.flush()
            ids.append(str(clone.id))
    return ids


def configure(stack: Stack, nodes: list[str], **setup: Any) -> None:
    """Every node takes `setup` with an empty cache (the read benchmark's control task)."""
    celery = make_celery_app(stack.settings)
    # A window no other test uses proves the new set-up is in (unless the caller names one).
    marker = setup.pop("window", None) or uuid.uuid4().int % 10_000 + 1
    for node in nodes:
        send_setup(celery, node, {**setup, "window": marker})
    client = redis.Redis.from_url(stack.settings.broker_url)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        snaps = node_snapshots(client, nodes)
        if all(snap.get("setup", {}).get("window") == marker for snap in snaps.values()):
            return
        time.sleep(0.2)
    raise AssertionError(f"the nodes did not take {setup}; logs in {stack.logs}")


def snapshots(stack: Stack, nodes: list[str]) -> dict[str, dict[str, Any]]:
    time.sleep(stack.settings.read_heartbeat_s * 1.5)  # the next heartbeat carries the figures
    return node_snapshots(redis.Redis.from_url(stack.settings.broker_url), nodes)


def read(stack: Stack, tenant: TenantCredentials, job_id: str, fmt: str = "png") -> httpx.Response:
    url = f"{stack.base_url}/v1/generations/{job_id}/image?format={fmt}"
    response = httpx.get(url, headers=tenant.auth_headers, timeout=60)
    assert response.status_code == 200, response.text
    return response


def owned_by(nodes: list[str], node: str, ids: list[str]) -> list[str]:
    ring = HashRing(nodes)
    return [job_id for job_id in ids if ring.owner(image_id(job_id, "png")) == node]


def test_latent_hits_promote_to_the_image_tier(
    stack: Stack, nodes: list[str], tenant: TenantCredentials, images: list[str]
) -> None:
    configure(stack, nodes, alpha=0.5, tiering="fixed", promote_after=2, capacity=64 * 2**20)
    responses = [read(stack, tenant, images[1]) for _ in range(4)]
    assert [r.headers["x-reprise-read"] for r in responses] == ["miss", "latent", "latent", "image"]
    assert len({r.content for r in responses}) == 1 and responses[0].content.startswith(b"\x89PNG")
    assert len({r.headers["x-reprise-node"] for r in responses}) == 1  # the owner, every time
    owner = responses[0].headers["x-reprise-node"]
    snap = snapshots(stack, nodes)[owner]
    assert (snap["promotions"], snap["images"], snap["decodes"]) == (1, 1, 3)


def test_the_budget_evicts_the_least_recent(
    stack: Stack, nodes: list[str], tenant: TenantCredentials, images: list[str]
) -> None:
    latent_bytes = LocalBlobStore(Path(stack.env["REPRISE_BLOB_DIR"])).size(_latent_key(stack, images[0]))
    capacity = int(latent_bytes * 3.5)  # latents only: three fit
    configure(stack, nodes, alpha=0.0, tiering="fixed", capacity=capacity)
    mine = owned_by(nodes, nodes[0], images[1:])[:5]
    assert [read(stack, tenant, job_id).headers["x-reprise-read"] for job_id in mine] == ["miss"] * 5
    snap = snapshots(stack, nodes)[nodes[0]]
    assert snap["latent_bytes"] <= capacity and snap["latents"] == 3 and snap["evictions"] == 2
    assert read(stack, tenant, mine[4]).headers["x-reprise-read"] == "latent"  # the most recent stayed
    assert read(stack, tenant, mine[0]).headers["x-reprise-read"] == "miss"  # the least recent went


def test_a_busy_owner_spills_and_the_result_is_written_back(
    stack: Stack, nodes: list[str], tenant: TenantCredentials, images: list[str]
) -> None:
    configure(stack, nodes, alpha=0.5, tiering="fixed", capacity=64 * 2**20)
    owner = nodes[0]
    mine = owned_by(nodes, owner, images[1:])[:10]
    control = make_celery_app(stack.settings).control
    # The owner stops taking its queue for a moment: its reads wait there, the queue passes theta = 4.
    assert control.cancel_consumer(decode_queue(owner), destination=[owner], reply=True)

    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(headers=tenant.auth_headers, timeout=60) as client:
            urls = [f"{stack.base_url}/v1/generations/{job_id}/image" for job_id in mine]
            pending = asyncio.gather(*(client.get(url) for url in urls))
            await asyncio.sleep(3.0)
            control.add_consumer(decode_queue(owner), destination=[owner], reply=True)
            return list(await pending)

    responses = asyncio.run(burst())
    assert all(r.status_code == 200 for r in responses)
    spilled = [
        (job_id, r) for job_id, r in zip(mine, responses, strict=True) if r.headers.get("x-reprise-spilled")
    ]
    assert spilled, "ten reads queued on a paused node never passed theta = 4"
    assert len(spilled) < len(mine)  # the owner served those it had queued
    assert all(r.headers["x-reprise-node"] != owner for _, r in spilled)
    snap = snapshots(stack, nodes)[owner]
    assert snap["write_backs"] == len(spilled)
    again = read(stack, tenant, spilled[0][0])  # the owner holds it now: its latent tier answers
    assert (again.headers["x-reprise-node"], again.headers["x-reprise-read"]) == (owner, "latent")


def test_a_burst_of_identical_reads_costs_one_decode(
    stack: Stack, nodes: list[str], tenant: TenantCredentials, images: list[str]
) -> None:
    configure(stack, nodes, alpha=1.0, tiering="fixed", capacity=64 * 2**20)
    before = sum(snap["decodes"] for snap in snapshots(stack, nodes).values())
    url = f"{stack.base_url}/v1/generations/{images[2]}/image?format=webp"

    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(headers=tenant.auth_headers, timeout=60) as client:
            return list(await asyncio.gather(*(client.get(url) for _ in range(100))))

    responses = asyncio.run(burst())
    assert [r.status_code for r in responses] == [200] * 100
    assert len({r.content for r in responses}) == 1
    assert any(r.headers.get("x-reprise-coalesced") == "true" for r in responses)
    after = sum(snap["decodes"] for snap in snapshots(stack, nodes).values())
    assert after - before == 1


def test_delete_and_retention_remove_what_reads_could_reach(
    stack: Stack, nodes: list[str], tenant: TenantCredentials, images: list[str]
) -> None:
    configure(stack, nodes, alpha=0.5, tiering="fixed", capacity=64 * 2**20)
    deleted, expired = images[3], images[4]
    owner = read(stack, tenant, deleted).headers["x-reprise-node"]
    held = snapshots(stack, nodes)[owner]["latents"]
    url = f"{stack.base_url}/v1/generations/{deleted}"
    assert httpx.delete(url, headers=tenant.auth_headers, timeout=10).status_code == 204
    assert httpx.delete(url, headers=tenant.auth_headers, timeout=10).status_code == 204
    assert httpx.get(f"{url}/image", headers=tenant.auth_headers, timeout=10).status_code == 404
    assert snapshots(stack, nodes)[owner]["latents"] == held - 1  # the node forgot it
    with session_scope(stack.settings) as session:
        session.get_one(Job, uuid.UUID(expired)).finished_at = datetime.now(UTC) - timedelta(days=31)
    blobs = LocalBlobStore(Path(stack.env["REPRISE_BLOB_DIR"]))
    dispatcher = CeleryDispatcher(make_celery_app(stack.settings))
    purge_due_outputs(stack.settings.model_copy(update={"retention_days": 30.0}), blobs, dispatcher)
    gone = httpx.get(
        f"{stack.base_url}/v1/generations/{expired}/image", headers=tenant.auth_headers, timeout=10
    )
    assert gone.status_code == 410
    assert read(stack, tenant, images[5]).status_code == 200  # a recent one stays


def _latent_key(stack: Stack, job_id: str) -> str:
    with session_scope(stack.settings) as session:
        key = session.get_one(Job, uuid.UUID(job_id)).final_latent_key
    assert key is not None
    return key


def test_a_burst_of_fresh_connections_is_answered(
    stack: Stack, tenant: TenantCredentials, images: list[str]
) -> None:
    """100 clients at once, each on a connection of its own: no request waits on the database pool
    until it times out (api.routing: a sync route's connection goes back before serialisation)."""

    async def one() -> int:
        async with httpx.AsyncClient(headers=tenant.auth_headers, timeout=60) as client:
            return (await client.get(f"{stack.base_url}/v1/generations/{images[6]}")).status_code

    async def burst() -> list[int]:
        return list(await asyncio.gather(*(one() for _ in range(100))))

    assert asyncio.run(burst()) == [200] * 100


def test_the_read_benchmark_reports_the_contract(
    stack: Stack, nodes: list[str], tenant: TenantCredentials
) -> None:
    """`reprise bench reads` on this stack, small: every set-up's figures and the burst."""
    from bench.live.reads import SETUPS, ReadBenchOptions, run_read_bench

    options = ReadBenchOptions(
        base_url=stack.base_url, api_key=tenant.api_key, jobs=4, reads=40, window=10, concurrency=2, steps=4
    )
    settings = stack.settings.model_copy(update={"blob_dir": Path(stack.env["REPRISE_BLOB_DIR"])})
    report = run_read_bench(settings, options)
    assert set(report["setups"]) == set(SETUPS)
    for name, figures in report["setups"].items():
        assert figures["reads"] == 32, name  # the trace after its 20% warm-up
        assert figures["read_ms"]["p50"] <= figures["read_ms"]["p99"]
        assert 0.0 <= figures["image_tier_hit"] + figures["latent_tier_hit"] <= 1.0
    assert report["setups"]["latents_only"]["image_tier_hit"] == 0.0
    assert report["setups"]["images_only"]["stored_bytes_ratio"] == 1.0
    assert 0.0 < report["setups"]["adaptive"]["stored_bytes_ratio"] < 1.0
    assert report["burst"]["reads"] == 100 and report["burst"]["decodes"] >= 1
