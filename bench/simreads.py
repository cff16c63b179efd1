"""The read side of the simulator: LatentBox's read path at the paper's scale (issue 15), on the same
policy code the decode nodes run (jobs.policies.dual_format, tier_tuning, hash_ring).

A discrete-event model of section 6's testbed: K nodes (3), each with a dual-format cache of
`cache_fraction` (1%) of the unique objects' PNG bytes (6.1), a tuner, and one GPU that decodes one
latent at a time (FIFO). Reads arrive at `rate` per second in trace order (bench.readtrace). A read is
looked up at its owner (consistent hashing); an image-tier hit costs the network transfer only; a
latent hit queues a decode; a full miss fetches the latent (T_fetch, off the GPU) and then decodes.
When the owner's GPU queue is deeper than theta, the decode runs on the least-loaded node and the
result goes back to the owner's cache (4.4). A read of an object whose decode is in flight waits for
it (coalescing). The ImgStore baseline stores PNGs: a miss fetches the PNG and decodes nothing.

Defaults are the paper's: T_decode 40 ms, T_fetch 140 ms, step 0.005, tau 0.10, h 8 (6.5), theta 4
(6.5.3), a transfer of 10 ms (6.3.3), a PNG of 1.5 MB and a compressed latent of 0.29 MB (Table 5).
The paper's window W = 1 M suits its 2.07 B reads; a simulation of 1 M reads uses W = 2,000 per node
(6.5.4: small windows cost little), so that alpha can move at all.

One difference from the live nodes, said here once: the live node answers image hits from its own
queue (a Celery worker serves one read at a time), where the paper's cache actor answers them beside
the GPU queue; the simulator models the paper's.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from bench.readtrace import ReadTraceSpec, read_trace, trace_statistics
from jobs.policies.dual_format import DualFormatCache, Tier
from jobs.policies.hash_ring import HashRing, place
from jobs.policies.tier_tuning import PROMOTE_AFTER, STEP, T_DECODE_S, T_FETCH_S, TAIL_FRACTION, MarginalTuner

PNG_BYTES = 1.5e6  # Table 5: the average PNG at 1024 x 1024
LATENT_BYTES = 0.29e6  # Table 5: a pcodec-compressed SD 3.5 latent
TRANSFER_S = 0.010  # 6.3.3: the network transfer back to the router, about constant
SIM_WINDOW = 2000
# Our own: a read rate that loads the latents-only GPUs to about two thirds (3 nodes x 25 decodes/s).
RATE = 50.0
BURST = 100
SETUPS: dict[str, tuple[float, bool, bool]] = {  # name -> (alpha, adaptive, image store)
    "images_only": (1.0, False, True),
    "latents_only": (0.0, False, False),
    "fixed": (0.5, False, False),
    "adaptive": (0.5, True, False),
}


@dataclass(frozen=True, slots=True)
class ReadSimSpec:
    objects: int = 150_000
    reads: int = 1_000_000
    nodes: int = 3
    cache_fraction: float = 0.01
    rate: float = RATE
    zipf: float = 1.11
    t_decode_s: float = T_DECODE_S
    t_fetch_s: float = T_FETCH_S
    transfer_s: float = TRANSFER_S
    window: int = SIM_WINDOW
    step: float = STEP
    tail: float = TAIL_FRACTION
    promote_after: int = PROMOTE_AFTER
    theta: float = 4.0
    warmup: float = 0.2
    seed: int = 0


@dataclass
class Node:
    cache: DualFormatCache[None]
    tuner: MarginalTuner
    starts: deque[float] = field(default_factory=deque)  # decodes queued (their start times, FIFO)
    free_at: float = 0.0
    alphas: list[float] = field(default_factory=list)

    def depth(self, now: float) -> int:
        while self.starts and self.starts[0] <= now:
            self.starts.popleft()
        return len(self.starts)

    def decode(self, ready: float, t_decode: float) -> float:
        """Queue a decode that can start at `ready`; when it ends."""
        start = max(ready, self.free_at)
        self.free_at = start + t_decode
        self.starts.append(start)
        self.tuner.observe_decode(self.free_at - ready)  # queueing included: a busy GPU costs more
        return self.free_at


@dataclass
class Tally:
    latencies: list[float] = field(default_factory=list)
    tiers: dict[str, int] = field(default_factory=dict)
    decodes: int = 0
    coalesced: int = 0
    spilled: int = 0

    def add(self, latency: float, tier: str) -> None:
        self.latencies.append(latency)
        self.tiers[tier] = self.tiers.get(tier, 0) + 1


class ReadPath:
    """K nodes, their ring, and the router's in-flight map, under one set-up."""

    def __init__(self, spec: ReadSimSpec, sizes: tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]],
                 *, alpha: float, adaptive: bool, image_store: bool) -> None:  # fmt: skip
        self.spec = spec
        self.png, self.latent = sizes
        self.image_store = image_store
        capacity = int(spec.cache_fraction * float(self.png.sum()))
        self.nodes = [Node(self._cache(capacity, alpha), self._tuner(adaptive)) for _ in range(spec.nodes)]
        ring = HashRing([str(index) for index in range(spec.nodes)])
        self.owner = [int(ring.owner(str(obj))) for obj in range(len(self.png))]
        self.inflight: dict[int, float] = {}

    def _cache(self, capacity: int, alpha: float) -> DualFormatCache[None]:
        return DualFormatCache(capacity, alpha, tau=self.spec.tail, promote_after=self.spec.promote_after)

    def _tuner(self, adaptive: bool) -> MarginalTuner:
        spec = self.spec
        return MarginalTuner(
            window=spec.window,
            step=spec.step,
            adaptive=adaptive,
            t_decode_s=spec.t_decode_s,
            t_fetch_s=spec.t_fetch_s,
        )

    def read(self, obj: int, now: float, tally: Tally) -> None:
        spec, owner = self.spec, self.nodes[self.owner[obj]]
        done = self.inflight.get(obj)
        if done is not None and done > now:  # coalesced: wait for the decode in flight
            tally.coalesced += 1
            tally.add(done - now + spec.transfer_s, "coalesced")
            return
        found = owner.cache.lookup(str(obj))
        if found.tier is Tier.IMAGE:
            tally.add(spec.transfer_s, Tier.IMAGE.value)
        else:
            ready = now if found.tier is Tier.LATENT else now + spec.t_fetch_s
            if found.tier is Tier.MISS:
                owner.tuner.observe_fetch(spec.t_fetch_s)
            end = self._decode_or_fetch(obj, owner, found.tier, found.promote, now, ready, tally)
            self.inflight[obj] = end
            tally.add(end - now + spec.transfer_s, found.tier.value)
        self._tune(owner)

    def _decode_or_fetch(
        self, obj: int, owner: Node, tier: Tier, promote: bool, now: float, ready: float, tally: Tally
    ) -> float:
        key = str(obj)
        if tier is Tier.MISS and self.image_store:  # ImgStore: the PNG itself, no decode
            owner.cache.admit(key, image=(None, int(self.png[obj])))
            return ready
        spill = place(str(self.owner[obj]), {str(i): node.depth(now) for i, node in enumerate(self.nodes)},
                      theta=self.spec.theta)  # fmt: skip
        worker = self.nodes[int(spill.node)]
        if spill.spilled:
            tally.spilled += 1
            ready = max(ready, now + self.spec.t_fetch_s)  # the spillover node fetches the latent itself
        end = worker.decode(ready, self.spec.t_decode_s)
        tally.decodes += 1
        if tier is Tier.MISS:
            owner.cache.admit(key, latent=(None, int(self.latent[obj])), image=(None, int(self.png[obj])))
        elif promote:
            owner.cache.promote(key, None, int(self.png[obj]))
        return end

    def _tune(self, node: Node) -> None:
        if node.tuner.due(node.cache.window):
            decision = node.tuner.decide(node.cache.alpha, node.cache.close_window(),
                                         promote_after=node.cache.promote_after)  # fmt: skip
            node.cache.set_alpha(decision.alpha)
            node.alphas.append(decision.alpha)


def object_sizes(spec: ReadSimSpec) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """PNG and latent bytes per object: Table 5's means, with a small deterministic spread (20%, 10%)."""
    rng = np.random.default_rng(spec.seed + 1)
    png = PNG_BYTES * rng.lognormal(0.0, 0.2, spec.objects) / math.exp(0.02)
    latent = LATENT_BYTES * rng.lognormal(0.0, 0.1, spec.objects) / math.exp(0.005)
    return png, latent


def _run_setup(spec: ReadSimSpec, trace: npt.NDArray[np.int64], sizes: Any, setup: str) -> dict[str, Any]:
    alpha, adaptive, image_store = SETUPS[setup]
    path = ReadPath(spec, sizes, alpha=alpha, adaptive=adaptive, image_store=image_store)
    warm = int(len(trace) * spec.warmup)
    tally, measured = Tally(), Tally()
    for position, obj in enumerate(trace.tolist()):
        path.read(obj, position / spec.rate, tally if position < warm else measured)
    png, latent = sizes
    read = np.unique(trace)
    return _figures(measured, 1.0 if image_store else float(latent[read].sum() / png[read].sum()), path)


def _figures(tally: Tally, stored_ratio: float, path: ReadPath) -> dict[str, Any]:
    reads = max(1, len(tally.latencies))
    ms = np.asarray(tally.latencies) * 1e3
    alphas = path.nodes[0].alphas  # node 0's alpha after each of its windows
    return {
        "stored_bytes_ratio": round(stored_ratio, 4),
        "decodes_per_read": round(tally.decodes / reads, 4),
        "image_tier_hit": round(tally.tiers.get("image", 0) / reads, 4),
        "latent_tier_hit": round(tally.tiers.get("latent", 0) / reads, 4),
        "miss": round(tally.tiers.get("miss", 0) / reads, 4),
        "coalesced": tally.coalesced,
        "spilled": tally.spilled,
        "reads": len(tally.latencies),
        "read_ms": {"p50": _ms(ms, 50), "p99": _ms(ms, 99)},
        "mean_ms": round(float(ms.mean()), 2),
        "alpha_final": [round(node.cache.alpha, 4) for node in path.nodes],
        "alpha_trajectory": [round(alpha, 4) for alpha in alphas[:: max(1, len(alphas) // 50)]],
    }  # fmt: skip


def _ms(values: npt.NDArray[np.float64], q: float) -> float:
    return round(float(np.percentile(values, q)), 2) if values.size else math.nan


def burst_decodes(spec: ReadSimSpec) -> dict[str, int]:
    """BURST identical reads of one uncached object within 1 ms: the decodes they cost."""
    sizes = object_sizes(ReadSimSpec(objects=1, reads=1, seed=spec.seed))
    path = ReadPath(
        ReadSimSpec(**{**asdict(spec), "objects": 1}), sizes, alpha=0.5, adaptive=True, image_store=False
    )
    tally = Tally()
    for index in range(BURST):
        path.read(0, index * 1e-5, tally)
    return {"reads": BURST, "decodes": tally.decodes, "coalesced": tally.coalesced}


def simulate_reads(spec: ReadSimSpec, setups: tuple[str, ...] = tuple(SETUPS)) -> dict[str, Any]:
    """The four set-ups on one trace, and the burst; `parameters` records everything."""
    trace_spec = ReadTraceSpec(objects=spec.objects, reads=spec.reads, zipf=spec.zipf, seed=spec.seed)
    trace = read_trace(trace_spec)
    sizes = object_sizes(spec)
    return {
        "setups": {name: _run_setup(spec, trace, sizes, name) for name in setups},
        "burst": burst_decodes(spec),
        "parameters": {**asdict(spec), "trace_statistics": trace_statistics(trace, spec.objects)},
    }
