"""`reprise bench reads`: LatentBox's read path measured on a live stack (LatentBox 4).

It generates N jobs through the API, reads each once to learn its PNG size (the footprint the paper
sizes caches by, 6.1), then replays the same skewed, decaying read trace (bench.workload.reads) under four
set-ups, configuring every decode node between them (bench.live.node_setup, an empty cache each):

    latents_only  alpha 0: the store keeps latents, every read decodes
    fixed         alpha 0.5, never moved (the paper's best static split, 6.5.2)
    adaptive      alpha from 0.5, marginal-hit tuning (4.3)
    images_only   alpha 1 and an image store: a read's first decode is stored as an image, later misses
                  fetch it (the ImgStore baseline); run last, as the images it stores stay on the jobs

The first `warmup` share of the trace fills the caches and is not measured (the paper pre-warms too).
Per set-up: stored bytes against PNG-only, decodes per read (the nodes' decode counters), the share of
reads each tier answered (the X-Reprise-Read header), coalesced reads and read latency. Then a burst of
100 identical reads of an image no set-up has read: how many decodes it cost.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.live.node_setup import send_setup
from bench.workload.reads import ReadTraceSpec, read_trace, trace_statistics
from core.settings import Settings
from jobs.broker import broker_client
from jobs.celery_app import make_celery_app
from jobs.read_routing import live_nodes, node_snapshots

SETUPS: dict[str, dict[str, Any]] = {
    "latents_only": {"alpha": 0.0, "tiering": "fixed", "store": "latents"},
    "fixed": {"alpha": 0.5, "tiering": "fixed", "store": "latents"},
    "adaptive": {"alpha": 0.5, "tiering": "adaptive", "store": "latents"},
    "images_only": {"alpha": 1.0, "tiering": "fixed", "store": "images"},
}
BURST_READS = 100


@dataclass(frozen=True, slots=True)
class ReadBenchOptions:
    base_url: str
    api_key: str
    jobs: int = 100
    reads: int = 3000
    zipf: float = 1.11  # LatentBox O1
    warmup: float = 0.2
    cache_fraction: float = 0.1
    window: int = 200
    promote_after: int = 8
    concurrency: int = 8
    steps: int = 10
    seed: int = 0


def _client(options: ReadBenchOptions) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {options.api_key}"}
    return httpx.AsyncClient(base_url=options.base_url.rstrip("/"), headers=headers, timeout=120)


async def _generate(options: ReadBenchOptions, count: int) -> list[str]:
    """`count` succeeded jobs, generated through the API (distinct prompts and seeds)."""
    async with _client(options) as client:
        ids = []
        for index in range(count):
            body = {
                "prompt": f"read bench object {index}",
                "seed": index,
                "steps": options.steps,
                "cache": "off",
            }
            response = await client.post("/v1/generations", json=body)
            while response.status_code in (429, 503):  # the tenant's in-flight limit, or backpressure
                await asyncio.sleep(float(response.headers.get("retry-after", "1")))
                response = await client.post("/v1/generations", json=body)
            response.raise_for_status()
            ids.append(response.json()["id"])
        pending = set(ids)
        while pending:
            for job_id in sorted(pending):
                status = (await client.get(f"/v1/generations/{job_id}")).json()["status"]
                if status == "succeeded":
                    pending.discard(job_id)
                elif status in ("failed", "canceled"):
                    raise RuntimeError(f"bench job {job_id} ended {status}")
            await asyncio.sleep(0.5)
    return ids


@dataclass
class Observed:
    latencies_ms: list[float]
    tiers: dict[str, int]
    coalesced: int
    png_bytes: dict[str, int]


async def _replay(options: ReadBenchOptions, ids: Sequence[str], order: Sequence[int]) -> Observed:
    """Read `order` (indices into ids) with `concurrency` closed-loop clients, in trace order."""
    seen = Observed([], {}, 0, {})
    cursor = iter(range(len(order)))

    async def client_loop(client: httpx.AsyncClient) -> None:
        for position in cursor:
            job_id = ids[order[position]]
            started = time.perf_counter()
            response = await client.get(f"/v1/generations/{job_id}/image")
            while response.status_code == 202:  # still decoding: the retry joins the decode
                await asyncio.sleep(float(response.headers.get("retry-after", "1")))
                response = await client.get(f"/v1/generations/{job_id}/image")
            response.raise_for_status()
            seen.latencies_ms.append((time.perf_counter() - started) * 1e3)
            tier = response.headers.get("x-reprise-read", "stored")
            seen.tiers[tier] = seen.tiers.get(tier, 0) + 1
            seen.coalesced += response.headers.get("x-reprise-coalesced") == "true"
            seen.png_bytes[job_id] = len(response.content)

    async with _client(options) as client:
        await asyncio.gather(*(client_loop(client) for _ in range(options.concurrency)))
    return seen


async def _burst(options: ReadBenchOptions, job_id: str) -> Observed:
    """BURST_READS reads of one image released together: every reader first opens its connection (a read
    of the job), then all ask for the image at once."""
    seen = Observed([], {}, 0, {})
    ready, barrier = asyncio.Semaphore(0), asyncio.Event()

    async def reader() -> None:
        async with _client(options) as client:
            try:
                (await client.get(f"/v1/generations/{job_id}")).raise_for_status()
            finally:
                ready.release()  # a reader that failed to connect must not hold the others back
            await barrier.wait()
            started = time.perf_counter()
            response = await client.get(f"/v1/generations/{job_id}/image")
            response.raise_for_status()
            seen.latencies_ms.append((time.perf_counter() - started) * 1e3)
            seen.coalesced += response.headers.get("x-reprise-coalesced") == "true"

    tasks = [asyncio.create_task(reader()) for _ in range(BURST_READS)]
    for _ in range(BURST_READS):
        await ready.acquire()
    barrier.set()
    await asyncio.gather(*tasks)
    return seen


class Nodes:
    """The stack's decode nodes, seen through Redis and configured through their queues."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.redis = broker_client(settings)
        self.celery = make_celery_app(settings)
        self.names = live_nodes(self.redis, heartbeat_s=settings.read_heartbeat_s)
        if not self.names:
            raise ValueError("no decode node is alive: start the stack (`reprise run`) or a decode worker")

    def configure(self, setup: Mapping[str, Any]) -> None:
        """Every node takes `setup` with an empty cache; returns once each one's heartbeat shows it."""
        for node in self.names:
            send_setup(self.celery, node, setup)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            snaps = node_snapshots(self.redis, self.names).values()
            if all(_matches(snap.get("setup", {}), setup) and snap.get("reads") == 0 for snap in snaps):
                return
            time.sleep(0.2)
        raise RuntimeError(
            f"the decode nodes did not take the set-up {dict(setup)}: do their workers run the bench's "
            "task (bench.live.node_setup, the reprise.worker_tasks entry point of an installed checkout)?"
        )

    def decodes(self) -> int:
        time.sleep(self.settings.read_heartbeat_s * 1.5)  # the next heartbeat carries the counters
        return sum(int(snap.get("decodes", 0)) for snap in node_snapshots(self.redis, self.names).values())

    def alphas(self) -> dict[str, float]:
        return {
            node: float(snap.get("alpha", math.nan))
            for node, snap in node_snapshots(self.redis, self.names).items()
        }


def _matches(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    return all(current.get(key) == value for key, value in wanted.items())


def _percentile(values: Sequence[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 2) if values else None


def stored_latent_bytes(settings: Settings, ids: Sequence[str]) -> int:
    """What the durable store holds for these jobs' outputs under LatentBox: their final latents."""
    import uuid

    from db.blobs.factory import blob_store_from_settings
    from db.engine import session_scope
    from db.models import Job

    blobs = blob_store_from_settings(settings)
    with session_scope(settings) as session:
        keys = [session.get_one(Job, uuid.UUID(job_id)).final_latent_key for job_id in ids]
    return sum(blobs.size(key) for key in keys if key is not None)


def _figures(seen: Observed, decodes: int, stored_ratio: float) -> dict[str, Any]:
    reads = len(seen.latencies_ms)
    return {
        "stored_bytes_ratio": round(stored_ratio, 4),
        "decodes_per_read": round(decodes / reads, 4) if reads else None,
        "image_tier_hit": round(seen.tiers.get("image", 0) / reads, 4) if reads else None,
        "latent_tier_hit": round(seen.tiers.get("latent", 0) / reads, 4) if reads else None,
        "miss": round(seen.tiers.get("miss", 0) / reads, 4) if reads else None,
        "coalesced": seen.coalesced,
        "reads": reads,
        "decodes": decodes,
        "read_ms": {"p50": _percentile(seen.latencies_ms, 50), "p99": _percentile(seen.latencies_ms, 99)},
        "mean_ms": round(float(np.mean(seen.latencies_ms)), 2) if reads else None,
    }


def run_read_bench(settings: Settings, options: ReadBenchOptions) -> dict[str, Any]:
    """The four set-ups on one trace, and the burst (module docstring)."""
    nodes = Nodes(settings)
    ids = asyncio.run(_generate(options, options.jobs + 1))
    burst_id = ids.pop()
    spec = ReadTraceSpec(objects=len(ids), reads=options.reads, zipf=options.zipf, seed=options.seed)
    order = [int(index) for index in read_trace(spec)]
    base = {"window": options.window, "promote_after": options.promote_after}
    nodes.configure({**SETUPS["latents_only"], **base})
    census = asyncio.run(_replay(options, ids, list(range(len(ids)))))  # every PNG's size, once
    png_bytes = sum(census.png_bytes.values())
    latent_bytes = stored_latent_bytes(settings, ids)
    capacity = max(1, int(options.cache_fraction * png_bytes))
    warm = int(len(order) * options.warmup)
    setups: dict[str, Any] = {}
    for name, setup in SETUPS.items():
        nodes.configure({**setup, **base, "capacity": capacity})
        asyncio.run(_replay(options, ids, order[:warm]))
        before = nodes.decodes()
        seen = asyncio.run(_replay(options, ids, order[warm:]))
        ratio = 1.0 if setup["store"] == "images" else latent_bytes / png_bytes
        setups[name] = {**_figures(seen, nodes.decodes() - before, ratio), "alpha_final": nodes.alphas()}
    nodes.configure({**SETUPS["adaptive"], **base, "capacity": capacity})
    before = nodes.decodes()
    burst = asyncio.run(_burst(options, burst_id))
    return {
        "setups": setups,
        "burst": {
            "reads": len(burst.latencies_ms),
            "decodes": nodes.decodes() - before,
            "coalesced": burst.coalesced,
        },
        "parameters": {
            **asdict(options),
            "api_key": None,
            "nodes": nodes.names,
            "capacity_bytes_per_node": capacity,
            "png_bytes": png_bytes,
            "latent_bytes": latent_bytes,
            "trace": asdict(spec),
            "trace_statistics": trace_statistics(np.asarray(order), len(ids)),
        },
    }


def write_report(report: Mapping[str, Any], path: Path | None) -> None:
    text = json.dumps(report, indent=2, default=str)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    print(text)
