"""The read side of the simulator: LatentBox's read path at the paper's scale, on the same policy code
the decode nodes run (jobs.policies.dual_format, tier_tuning, hash_ring).

A discrete-event model of section 6.1's testbed. K nodes (3), each with a dual-format cache of
`cache_fraction` (1%) of the unique objects' PNG bytes (6.1: 2 GB of 210.6 GB per node), a marginal-hit
tuner (4.3), and one GPU that decodes one latent at a time, first come first served by the time the
latent is at hand. Read i of the trace (bench.workload.reads) arrives at i / rate. The router (4.4):

1. coalescing: a read of an object whose decode is under way waits for it, no second decode;
2. consistent hashing: the owner node looks the object up (image tier, latent tier, then a miss);
3. an image-tier hit costs the network transfer only (6.3.3: a near-constant ~10 ms);
4. a latent hit queues a decode (T_decode, plus the queue); a full miss first fetches the latent from
   the blob store (T_fetch), off the GPU (5: the I/O pool keeps the GPU busy meanwhile), then decodes;
5. spillover: when the owner's GPU queue (waiting and decoding) is deeper than theta (4, 6.5.3), the
   decode runs on the least-loaded node; the owner ships its latent there (2c) or that node fetches
   it (3), and the result is written back to the owner's cache (4). theta = inf: hash-only routing.

The ImgStore baseline (`images_only`) stores PNGs: a miss fetches the PNG and decodes nothing.

Defaults are the paper's: T_decode 40 ms, T_fetch 140 ms, step 0.005, tau 0.10, h 8 (6.5), theta 4
(6.5.3), a 10 ms transfer (6.3.3), a 1.4 MB PNG and a 0.277 MB latent (Table 1b; 6.1's dataset: 210.6 GB
and 41.5 GB over 150 K images), each object's sizes spread a little (lognormal, 20% and 10%). Ours:
- W = 2,000 reads per node. The paper's W = 1 M suits its 2.07 B reads; a node here sees about 333 K,
  and 6.5.4 finds small windows cost little (W = 10 K: within 3%), so that alpha can move at all.
- 50 reads/s: latents_only then decodes about 44 a second against the 75 that 3 GPUs at 40 ms can,
  its GPUs 50-66% busy (`gpu_load`): a moderate load on which queues still form.
- The ImgStore's PNG fetch takes T_fetch too. 6.3.3 measures cold S3 fetches at 130-146 ms across
  the configurations without separating PNGs from latents; 6.3.2 calls PNG fetches slower and more
  variable, so this baseline is a generous one (`image_fetch_s` sets its own).

Simplifications, said once: a read's cache write (admit, promote, write-back) happens when it is
dispatched rather than when its decode ends; reads of that object meanwhile join its flight, so only
the LRU order of other objects moves earlier, by that read's latency at most. Shipping a latent between
nodes (0.28 MB over 25 Gbps: 0.1 ms) costs nothing. The tuner's T_decode is the decode's latency from
ready to done, queue included, so a loaded GPU raises it (4.3's feedback loop).

Where the live nodes differ (workers/decode_node.py): they measure the decode alone, and a spilled read
goes to the spillover node, which fetches the latent itself, before the owner looks it up; here the
owner's cache actor answers first (Fig. 5), so an image-tier hit is never spilled.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from bench.workload.reads import ZIPF, ReadTraceSpec, read_trace, trace_statistics
from jobs.policies.dual_format import DualFormatCache, Tier
from jobs.policies.hash_ring import SPILL_THETA, HashRing, place
from jobs.policies.tier_tuning import PROMOTE_AFTER, STEP, T_DECODE_S, T_FETCH_S, TAIL_FRACTION, MarginalTuner

PNG_BYTES = 1.4e6  # Table 1b: SD 3.5 at 1024 x 1024
LATENT_BYTES = 0.277e6  # Table 1b: its pcodec-compressed latent
PNG_SPREAD = 0.20  # ours: lognormal sigma of an object's PNG bytes around the mean
LATENT_SPREAD = 0.10  # ours: the same for its latent (latents vary less than PNGs)
TRANSFER_S = 0.010  # 6.3.3: net transfer back to the router
NODES = 3  # 6.1
CACHE_FRACTION = 0.01  # 6.1: each node's cache, of the unique objects' PNG bytes
SIM_WINDOW = 2000  # ours (module docstring)
RATE = 50.0  # ours, reads per second (module docstring)
WARMUP = 0.2  # the share of the trace that warms the caches, unmeasured (6.1 pre-warms them)
BURST_READS = 100
BURST_SPAN_S = 0.001

# A read's outcome: the tier that answered it, or JOINED (it waited on a decode in flight).
IMAGE, LATENT, MISS, JOINED = 0, 1, 2, 3
OUTCOME = {Tier.IMAGE: IMAGE, Tier.LATENT: LATENT, Tier.MISS: MISS}


@dataclass(frozen=True, slots=True)
class Setup:
    """A configuration: its first alpha, whether the tuner moves it, and whether the durable store
    holds PNGs (ImgStore: a miss fetches the image, no decode) rather than latents."""

    alpha: float
    adaptive: bool = False
    image_store: bool = False


SETUPS: dict[str, Setup] = {
    "images_only": Setup(1.0, image_store=True),  # ImgStore (6.1, baseline 2)
    "latents_only": Setup(0.0),  # LB-LatentCache: every read decodes
    "fixed": Setup(0.5),  # the best static split (6.5.2)
    "adaptive": Setup(0.5, adaptive=True),  # LB-Adaptive, starting there
}


@dataclass(frozen=True, slots=True)
class ReadSimSpec:
    """Every parameter of a simulation (module docstring for where each default comes from)."""

    objects: int = 150_000
    reads: int = 1_000_000
    nodes: int = NODES
    cache_fraction: float = CACHE_FRACTION
    rate: float = RATE
    zipf: float = ZIPF
    t_decode_s: float = T_DECODE_S
    t_fetch_s: float = T_FETCH_S
    image_fetch_s: float | None = None  # the ImgStore's PNG fetch; None: T_fetch
    transfer_s: float = TRANSFER_S
    png_bytes: float = PNG_BYTES
    latent_bytes: float = LATENT_BYTES
    window: int = SIM_WINDOW
    step: float = STEP
    tail: float = TAIL_FRACTION
    promote_after: int = PROMOTE_AFTER
    theta: float = float(SPILL_THETA)  # inf: no spillover
    warmup: float = WARMUP
    seed: int = 0

    def __post_init__(self) -> None:
        if self.objects < 1 or self.reads < 1 or self.nodes < 1:
            raise ValueError("a simulation needs at least one object, one read and one node")
        if self.rate <= 0 or self.t_decode_s <= 0 or self.t_fetch_s < 0 or self.transfer_s < 0:
            raise ValueError("the read rate and decode time must be positive, other times at least 0")
        if not 0.0 <= self.warmup < 1.0:
            raise ValueError(f"the warm-up share must be in [0, 1), got {self.warmup}")

    @property
    def png_fetch_s(self) -> float:
        return self.t_fetch_s if self.image_fetch_s is None else self.image_fetch_s


@dataclass(frozen=True)
class World:
    """What every set-up of one run shares: each object's sizes, owner node and cache key."""

    png: npt.NDArray[np.float64]
    latent: npt.NDArray[np.float64]
    owner: list[int]
    keys: list[str]
    names: tuple[str, ...]


def build_world(spec: ReadSimSpec) -> World:
    """Sizes around Table 1b's means (mean-preserving lognormal), owners from the hash ring."""
    rng = np.random.default_rng([spec.seed, 2])
    png = spec.png_bytes * rng.lognormal(-(PNG_SPREAD**2) / 2, PNG_SPREAD, spec.objects)
    latent = spec.latent_bytes * rng.lognormal(-(LATENT_SPREAD**2) / 2, LATENT_SPREAD, spec.objects)
    names = tuple(f"node-{index}" for index in range(spec.nodes))
    ring, index = HashRing(names), {name: position for position, name in enumerate(names)}
    keys = [str(obj) for obj in range(spec.objects)]
    return World(png, latent, [index[ring.owner(key)] for key in keys], keys, names)


@dataclass(slots=True)
class Gpu:
    """One node's decoder: one decode at a time, in the order their latents become ready."""

    t_decode_s: float
    free_at: float = 0.0
    ends: deque[float] = field(default_factory=deque)  # decodes waiting or running, by end time

    def depth(self, now: float) -> int:
        while self.ends and self.ends[0] <= now:
            self.ends.popleft()
        return len(self.ends)

    def run(self, ready: float) -> float:
        """Queue a decode whose latent is at hand at `ready` (never earlier than the last one's)."""
        self.free_at = max(ready, self.free_at) + self.t_decode_s
        self.ends.append(self.free_at)
        return self.free_at


@dataclass
class Node:
    cache: DualFormatCache[None]
    tuner: MarginalTuner
    gpu: Gpu
    alphas: list[float] = field(default_factory=list)  # alpha after each closed window


@dataclass(slots=True)
class Flight:
    """A decode (or an ImgStore fetch) under way: when it ends (inf while its latent is still being
    fetched and its GPU slot unknown) and the reads that joined it before that was known."""

    end: float
    joined: list[int] = field(default_factory=list)


@dataclass
class Replay:
    """What happened to each read, by trace position. decoder: the node that decoded it (-1: none)."""

    times: Sequence[float]
    latency: list[float]
    outcome: list[int]
    decoder: list[int]
    spilled: list[bool]
    queue_wait: list[float]

    @classmethod
    def sized(cls, times: Sequence[float]) -> Replay:
        n = len(times)
        return cls(times, [math.nan] * n, [MISS] * n, [-1] * n, [False] * n, [math.nan] * n)


class ReadPath:
    """K nodes, the router's in-flight map and the fetches under way, under one set-up."""

    def __init__(self, spec: ReadSimSpec, world: World, setup: Setup, times: Sequence[float]) -> None:
        self.spec, self.world, self.setup = spec, world, setup
        capacity = int(spec.cache_fraction * float(world.png.sum()))
        self.nodes = [
            Node(
                DualFormatCache(capacity, setup.alpha, tau=spec.tail, promote_after=spec.promote_after),
                MarginalTuner(
                    window=spec.window,
                    step=spec.step,
                    adaptive=setup.adaptive,
                    t_decode_s=spec.t_decode_s,
                    t_fetch_s=spec.t_fetch_s,
                ),
                Gpu(spec.t_decode_s),
            )
            for _ in world.names
        ]
        self.index = {name: position for position, name in enumerate(world.names)}
        self.flights: dict[int, Flight] = {}
        self.fetches: list[tuple[float, int, int, int]] = []  # (latent ready, position, object, decoder)
        self.record = Replay.sized(times)

    def advance(self, until: float) -> None:
        """Hand every latent fetched by `until` to its GPU, in time order."""
        fetches = self.fetches
        while fetches and fetches[0][0] <= until:
            ready, position, obj, worker = heapq.heappop(fetches)
            self._decode(position, obj, worker, ready)

    def arrive(self, position: int, obj: int) -> None:
        """Read `position` of the trace, of object `obj`, reaches the router."""
        now = self.record.times[position]
        if self._join(position, obj, now):
            return
        owner = self.nodes[self.world.owner[obj]]
        found = owner.cache.lookup(self.world.keys[obj])
        self.record.outcome[position] = OUTCOME[found.tier]
        if found.tier is Tier.IMAGE:
            self.record.latency[position] = self.spec.transfer_s
        elif self.setup.image_store:
            self._fetch_image(position, obj, now)
        else:
            self._dispatch(position, obj, found.tier, found.promote, now)
        self._tune(owner)

    def _join(self, position: int, obj: int, now: float) -> bool:
        """Coalescing (4.4): wait for the object's decode in flight, if any."""
        flight = self.flights.get(obj)
        if flight is None:
            return False
        if flight.end <= now:
            del self.flights[obj]
            return False
        self.record.outcome[position] = JOINED
        if math.isinf(flight.end):
            flight.joined.append(position)
        else:
            self.record.latency[position] = flight.end - now + self.spec.transfer_s
        return True

    def _fetch_image(self, position: int, obj: int, now: float) -> None:
        """ImgStore's miss: the PNG from the durable store, into the cache, no decode."""
        owner = self.nodes[self.world.owner[obj]]
        owner.tuner.observe_fetch(self.spec.png_fetch_s)
        owner.cache.admit(self.world.keys[obj], image=(None, int(self.world.png[obj])))
        end = now + self.spec.png_fetch_s
        self.flights[obj] = Flight(end)
        self.record.latency[position] = end - now + self.spec.transfer_s

    def _dispatch(self, position: int, obj: int, tier: Tier, promote: bool, now: float) -> None:
        """A read that needs a decode: on its owner's GPU, or spilled to the least-loaded one."""
        world, spec = self.world, self.spec
        home = world.owner[obj]
        owner = self.nodes[home]
        depths = {name: node.gpu.depth(now) for name, node in zip(world.names, self.nodes, strict=True)}
        worker = self.index[place(world.names[home], depths, theta=spec.theta).node]
        self.record.spilled[position] = worker != home
        key, png = world.keys[obj], int(world.png[obj])
        if tier is Tier.LATENT:  # decoded where it is, or shipped to the spillover node (2c)
            if promote:
                owner.cache.promote(key, None, png)
            self._decode(position, obj, worker, now)
            return
        owner.tuner.observe_fetch(spec.t_fetch_s)
        owner.cache.admit(key, latent=(None, int(world.latent[obj])), image=(None, png))
        self.flights[obj] = Flight(math.inf)
        heapq.heappush(self.fetches, (now + spec.t_fetch_s, position, obj, worker))

    def _decode(self, position: int, obj: int, worker: int, ready: float) -> None:
        """The latent is at hand on `worker`: its decode joins that GPU's queue; the reads waiting on
        it learn when they are answered."""
        end = self.nodes[worker].gpu.run(ready)
        record, transfer = self.record, self.spec.transfer_s
        record.latency[position] = end - record.times[position] + transfer
        record.decoder[position] = worker
        record.queue_wait[position] = end - ready - self.spec.t_decode_s
        self.nodes[self.world.owner[obj]].tuner.observe_decode(end - ready)
        flight = self.flights.get(obj)
        if flight is None or not math.isinf(flight.end):  # a latent hit: a new flight
            self.flights[obj] = Flight(end)
            return
        flight.end = end
        for joined in flight.joined:
            record.latency[joined] = end - record.times[joined] + transfer

    def _tune(self, node: Node) -> None:
        """After every read, as on a live node: a full window moves alpha one step (4.3)."""
        if node.tuner.due(node.cache.window):
            decision = node.tuner.decide(
                node.cache.alpha, node.cache.close_window(), promote_after=node.cache.promote_after
            )
            node.cache.set_alpha(decision.alpha)
            node.alphas.append(decision.alpha)


def replay(
    spec: ReadSimSpec, world: World, setup: Setup, objects: Sequence[int], times: Sequence[float]
) -> ReadPath:
    """Every read, in arrival order (`times` ascending), with the fetches that end between them."""
    path = ReadPath(spec, world, setup, times)
    for position, obj in enumerate(objects):
        path.advance(times[position])
        path.arrive(position, obj)
    path.advance(math.inf)
    return path


def figures(path: ReadPath, warm: int) -> dict[str, Any]:
    """One set-up's measured figures: the reads from position `warm` on."""
    record, spec = path.record, path.spec
    reads = len(record.times) - warm
    outcome = np.bincount(np.asarray(record.outcome[warm:], dtype=np.int64), minlength=4)
    decoder = np.asarray(record.decoder[warm:], dtype=np.int64)
    span = max(record.times[-1] - record.times[warm], 1.0 / spec.rate)
    world = path.world
    stored = 1.0 if path.setup.image_store else float(world.latent.sum() / world.png.sum())
    alphas = [node.cache.alpha for node in path.nodes]
    busy = [float((decoder == node).sum()) * spec.t_decode_s / span for node in range(spec.nodes)]
    report: dict[str, Any] = {
        "stored_bytes_ratio": round(stored, 4),
        "decodes_per_read": round(float((decoder >= 0).sum()) / reads, 4),
        "image_tier_hit": round(float(outcome[IMAGE]) / reads, 4),
        "latent_tier_hit": round(float(outcome[LATENT]) / reads, 4),
        "miss": round(float(outcome[MISS]) / reads, 4),
        "reads": reads,
        "coalesced": int(outcome[JOINED]),
        "spilled": int(sum(record.spilled[warm:])),
        **latency_figures(record, warm),
        "gpu_load": [round(share, 3) for share in busy],
        "alpha_final": round(float(np.mean(alphas)), 4),
        "alpha_nodes": [round(alpha, 4) for alpha in alphas],
    }
    if path.setup.adaptive:
        report["alpha_trajectory"] = [[round(alpha, 3) for alpha in node.alphas] for node in path.nodes]
    return report


def latency_figures(record: Replay, warm: int) -> dict[str, Any]:
    """Read latency (arrival at the router to the answer back there) and GPU queue wait, in ms."""
    ms = np.asarray(record.latency[warm:], dtype=np.float64) * 1e3
    waits = np.asarray(record.queue_wait[warm:], dtype=np.float64) * 1e3
    waits = waits[~np.isnan(waits)]
    if np.isnan(ms).any():
        raise AssertionError("a read was never answered")
    return {
        "read_ms": {f"p{q}": _percentile(ms, q) for q in (50, 95, 99)},
        "mean_ms": _mean(ms),
        "queue_wait_ms": {"mean": _mean(waits), "p99": _percentile(waits, 99)},
    }


def _mean(values: npt.NDArray[np.float64]) -> float:
    return round(float(values.mean()), 2) if values.size else 0.0


def _percentile(values: npt.NDArray[np.float64], q: float) -> float:
    return round(float(np.percentile(values, q)), 2) if values.size else 0.0


def burst_decodes(spec: ReadSimSpec, world: World | None = None) -> dict[str, int]:
    """BURST_READS identical reads of one uncached object within BURST_SPAN_S (adaptive set-up, empty
    caches): the decodes they cost, and how many joined one in flight (4.4: should be 1 and 99)."""
    world = world or build_world(spec)
    times = [index * BURST_SPAN_S / BURST_READS for index in range(BURST_READS)]
    record = replay(spec, world, SETUPS["adaptive"], [0] * BURST_READS, times).record
    return {
        "reads": BURST_READS,
        "decodes": sum(decoder >= 0 for decoder in record.decoder),
        "coalesced": record.outcome.count(JOINED),
    }


def parameters(spec: ReadSimSpec, world: World, trace: npt.NDArray[np.int64]) -> dict[str, Any]:
    """Every parameter of the run, the derived sizes, and the trace's skew (JSON-safe: inf as "inf")."""
    safe = {name: value if _finite(value) else str(value) for name, value in asdict(spec).items()}
    return {
        **safe,
        "image_fetch_s": spec.png_fetch_s,
        "cache_bytes_per_node": int(spec.cache_fraction * float(world.png.sum())),
        "png_bytes_total": int(world.png.sum()),
        "latent_bytes_total": int(world.latent.sum()),
        "warmup_reads": int(spec.reads * spec.warmup),
        "burst_reads": BURST_READS,
        "burst_span_s": BURST_SPAN_S,
        "setups": {name: asdict(setup) for name, setup in SETUPS.items()},
        "trace_statistics": trace_statistics(trace, spec.objects),
    }


def _finite(value: object) -> bool:
    return not isinstance(value, float) or math.isfinite(value)


def simulate_reads(spec: ReadSimSpec, setups: Sequence[str] = tuple(SETUPS)) -> dict[str, Any]:
    """The set-ups on one trace (the same arrivals for each), the burst, and `parameters`."""
    unknown = set(setups) - set(SETUPS)
    if unknown:
        raise ValueError(f"unknown set-ups {sorted(unknown)}; known: {sorted(SETUPS)}")
    trace = read_trace(ReadTraceSpec(objects=spec.objects, reads=spec.reads, zipf=spec.zipf, seed=spec.seed))
    world = build_world(spec)
    objects = trace.tolist()
    times = [position / spec.rate for position in range(spec.reads)]
    warm = int(spec.reads * spec.warmup)
    return {
        "setups": {name: figures(replay(spec, world, SETUPS[name], objects, times), warm) for name in setups},
        "burst": burst_decodes(spec, world),
        "parameters": parameters(spec, world, trace),
    }
