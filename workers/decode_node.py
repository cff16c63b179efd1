"""One decode node of LatentBox's read path (section 4): a dual-format cache in this process's memory,
its marginal-hit tuner, and the decode of stored latents on a miss.

A read the node owns is answered from the image tier, else decoded from the latent tier, else fetched
from the blob store and decoded (section 4.2). A read spilled to this node from a busy owner is decoded
without touching this node's cache; its latent and image go back to the owner (`write_back`), whose
cache then holds them as if it had served the read (section 4.4, cache pinning). Every W reads the
tuner moves alpha (section 4.3). The I/O around it (the blob store, the runtime, Postgres) comes in
through the callables the worker wires (workers.decoding).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from core.settings import Settings
from core.vocabulary import ReadStore, Tiering
from db.blobs.base import BlobStore
from jobs.policies.dual_format import DualFormatCache, Tier
from jobs.policies.tier_tuning import Decision, MarginalTuner
from jobs.read_routing import FORMATS, ReadReply, ReadRequest, image_id

# (compressed latent bytes, format) -> the encoded image: codec decode, VAE decode, image encode.
LatentDecoder = Callable[[bytes, str], bytes]
ImageKeeper = Callable[[ReadRequest, bytes], None]  # an image store keeps the first decode for good
DecisionSink = Callable[[str, Decision], None]


@dataclass(frozen=True, slots=True)
class NodeSetup:
    """How a node caches: its budget, the split and whether it moves, and section 6.5's parameters."""

    capacity: int
    tiering: Tiering
    alpha: float
    store: ReadStore
    window: int
    step: float
    tail: float
    promote_after: int

    @classmethod
    def from_settings(cls, settings: Settings) -> NodeSetup:
        return cls(
            capacity=settings.read_cache_bytes,
            tiering=settings.read_tiering,
            alpha=settings.read_alpha,
            store=settings.read_store,
            window=settings.read_window,
            step=settings.read_step,
            tail=settings.read_tail,
            promote_after=settings.read_promote_after,
        )

    def updated(self, changes: Mapping[str, Any]) -> NodeSetup:
        """This set-up with `changes` (field -> value, as JSON gives them); unknown fields are refused."""
        unknown = set(changes) - set(self.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown read set-up fields: {sorted(unknown)}")
        values = dict(changes)
        if "tiering" in values:
            values["tiering"] = Tiering(values["tiering"])
        if "store" in values:
            values["store"] = ReadStore(values["store"])
        return replace(self, **values)

    def as_json(self) -> dict[str, Any]:
        return {
            name: str(value) if isinstance(value, Tiering | ReadStore) else value
            for name, value in asdict(self).items()
        }


@dataclass(frozen=True, slots=True)
class WriteBack:
    """What a spillover node sends the owner: the latent it fetched (None: a stored image) and the image."""

    latent: bytes | None
    image: bytes


class DecodeNode:
    """The node's cache, tuner and counters. Thread-safe: the heartbeat reads while a task serves."""

    def __init__(
        self,
        name: str,
        setup: NodeSetup,
        *,
        blobs: BlobStore,
        decode: LatentDecoder,
        keep_image: ImageKeeper | None = None,
        on_decision: DecisionSink | None = None,
    ) -> None:
        self.name = name
        self.blobs = blobs
        self._decode = decode
        self._keep_image = keep_image
        self._on_decision = on_decision
        self._lock = threading.Lock()
        self.decodes = 0
        self.spills_served = 0
        self.write_backs = 0
        self.last_decision: Decision | None = None
        self.configure(setup)

    def configure(self, setup: NodeSetup) -> None:
        """Start over under `setup`: an empty cache and a fresh tuner."""
        with self._lock:
            self.setup = setup
            self.cache: DualFormatCache[bytes] = DualFormatCache(
                capacity=setup.capacity, alpha=setup.alpha, tau=setup.tail, promote_after=setup.promote_after
            )
            self.tuner = MarginalTuner(
                window=setup.window, step=setup.step, adaptive=setup.tiering is Tiering.ADAPTIVE
            )
            self.decodes = self.spills_served = self.write_backs = 0
            self.last_decision = None

    # --- serving ----------------------------------------------------------------------------------

    def serve(self, request: ReadRequest) -> tuple[ReadReply, WriteBack | None]:
        """Answer one read: from the tiers when this node owns the image, fresh when it was spilled here
        (then also what the owner must keep). Raises core.errors.BlobNotFound when nothing is stored.
        The tiers are read and changed under the node's lock; fetches and decodes run outside it, so a
        node's threads decode together (workers.runtime.decode_batching). Two reads missing the same
        image at once both decode it; the second admission finds it cached and changes nothing."""
        if request.spilled:
            latent, image = self._fetch_and_decode(request)
            with self._lock:
                self.spills_served += 1
            reply = ReadReply("ok", tier=Tier.MISS.value, node=self.name, spilled=True, data=image)
            return reply, WriteBack(latent, image)
        reply = self._serve_owned(request)
        with self._lock:
            self._tune()
        return reply, None

    def _serve_owned(self, request: ReadRequest) -> ReadReply:
        key = request.image
        with self._lock:
            found = self.cache.lookup(key)
        if found.tier is Tier.IMAGE and found.value is not None:
            return ReadReply("ok", tier=found.tier.value, node=self.name, data=found.value)
        if found.tier is Tier.LATENT and found.value is not None:
            image = self._timed_decode(found.value, request.fmt)
            if found.promote:
                with self._lock:
                    self.cache.promote(key, image, len(image))
            return ReadReply("ok", tier=found.tier.value, node=self.name, data=image)
        latent, image = self._fetch_and_decode(request)
        with self._lock:
            self._admit(key, latent, image)
        return ReadReply("ok", tier=Tier.MISS.value, node=self.name, data=image)

    def write_back(self, request: ReadRequest, back: WriteBack) -> Tier:
        """A read of an image this node owns was decoded elsewhere (a spillover): count it and cache
        what the node would have cached had it served the read; no decode runs. Returns the tier it
        was found in."""
        with self._lock:
            key = request.image
            found = self.cache.lookup(key)
            if found.tier is Tier.MISS:
                self._admit(key, back.latent, back.image)
            elif found.tier is Tier.LATENT and found.promote:
                self.cache.promote(key, back.image, len(back.image))
            self.write_backs += 1
            self._tune()
            return found.tier

    def forget(self, job_id: str) -> int:
        """Drop every format of a job's image from the tiers; how many were held."""
        with self._lock:
            return sum(self.cache.forget(image_id(job_id, fmt)) for fmt in FORMATS)

    def _admit(self, key: str, latent: bytes | None, image: bytes) -> None:
        self.cache.admit(
            key, latent=(latent, len(latent)) if latent is not None else None, image=(image, len(image))
        )

    def _fetch_and_decode(self, request: ReadRequest) -> tuple[bytes | None, bytes]:
        """(latent, image) from the blob store: a stored image as it is (no latent), else the latent
        and its decode; an image store keeps that first decode."""
        if request.image_key is not None:
            return None, self._timed_fetch(request.image_key)
        if request.latent_key is None:
            from core.errors import BlobNotFound

            raise BlobNotFound(f"job {request.job_id} has no stored latent")
        latent = self._timed_fetch(request.latent_key)
        image = self._timed_decode(latent, request.fmt)
        if self.setup.store is ReadStore.IMAGES and self._keep_image is not None:
            self._keep_image(request, image)
        return latent, image

    def _timed_fetch(self, key: str) -> bytes:
        started = time.perf_counter()
        data = self.blobs.get(key)
        with self._lock:
            self.tuner.observe_fetch(time.perf_counter() - started)
        return data

    def _timed_decode(self, latent: bytes, fmt: str) -> bytes:
        started = time.perf_counter()
        image = self._decode(latent, fmt)
        with self._lock:  # a batched decode's wall time: what this read waited, as LatentBox's T_decode
            self.tuner.observe_decode(time.perf_counter() - started)
            self.decodes += 1
        return image

    def _tune(self) -> None:
        if not self.tuner.due(self.cache.window):
            return
        decision = self.tuner.decide(
            self.cache.alpha, self.cache.close_window(), promote_after=self.cache.promote_after
        )
        self.cache.set_alpha(decision.alpha)
        self.last_decision = decision
        if self._on_decision is not None:
            self._on_decision(self.name, decision)

    # --- figures ----------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The node's figures for /v1/stats and Prometheus (written with each heartbeat)."""
        with self._lock:
            cache, totals = self.cache, self.cache.totals
            reads = totals.reads
            return {
                "setup": self.setup.as_json(),
                "alpha": cache.alpha,
                "capacity_bytes": cache.capacity,
                "image_bytes": cache.images.used,
                "latent_bytes": cache.latents.used,
                "images": len(cache.images),
                "latents": len(cache.latents),
                "reads": reads,
                "image_hits": totals.image_hits,
                "latent_hits": totals.latent_hits,
                "misses": totals.misses,
                "image_tier_hit": totals.image_hits / reads if reads else None,
                "latent_tier_hit": totals.latent_hits / reads if reads else None,
                "promotions": totals.promotions,
                "evictions": totals.evictions,
                "decodes": self.decodes,
                "spills_served": self.spills_served,
                "write_backs": self.write_backs,
                "t_decode_ms": self.tuner.t_decode_s * 1e3,
                "t_fetch_ms": self.tuner.t_fetch_s * 1e3,
            }
