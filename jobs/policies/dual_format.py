"""LatentBox's dual-format cache (section 4.2): one decode node's byte budget C split between a tier
of decoded images (fraction alpha) and a tier of compressed latents (1 - alpha).

Lookup cascades: the image tier, then the latent tier, then the blob store (the caller's full miss).
Every object lives in exactly one tier. A fetched object enters the latent tier with its hit counter
at zero; each latent hit counts; once the counter reaches the promotion threshold h, the decoded image
moves to the image tier and leaves the latent tier. Each tier is an LRU split into a main segment and
a thin tail (fraction tau) whose hits are the marginal hits the tuner reads (section 4.3; tier_tuning).

Pure bookkeeping: the cache holds whatever values it is given (bytes on a decode node, None in the
simulator) with the sizes it is told; no I/O, no clock.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Generic, TypeVar

V = TypeVar("V")


class Tier(StrEnum):
    """Where a read was answered: the image tier, the latent tier, or neither (a full miss)."""

    IMAGE = "image"
    LATENT = "latent"
    MISS = "miss"


class LruTier:
    """One format's tier: an LRU of (key -> bytes) whose least recent `tau` of capacity is the tail.

    An insert or a hit puts the key at the head of the main segment; what main overflows moves to
    the tail; what the tail overflows leaves the tier (returned to the caller as evicted).
    """

    def __init__(self, capacity: int, tau: float) -> None:
        if not 0.0 <= tau < 1.0:
            raise ValueError(f"the tail fraction tau must be in [0, 1), got {tau}")
        self.tau = tau
        self.capacity = max(0, int(capacity))
        self.main: OrderedDict[str, int] = OrderedDict()  # most recent last
        self.tail: OrderedDict[str, int] = OrderedDict()
        self.main_bytes = 0
        self.tail_bytes = 0

    @property
    def used(self) -> int:
        return self.main_bytes + self.tail_bytes

    def __contains__(self, key: object) -> bool:
        return key in self.main or key in self.tail

    def __len__(self) -> int:
        return len(self.main) + len(self.tail)

    def fits(self, size: int) -> bool:
        return 0 < size <= self.capacity

    def touch(self, key: str) -> bool:
        """A hit on `key`: it goes to the head of main. True when it was found in the tail."""
        in_tail = key in self.tail
        size = self.tail.pop(key) if in_tail else self.main.pop(key)
        if in_tail:
            self.tail_bytes -= size
        else:
            self.main_bytes -= size
        self._push(key, size)
        return in_tail

    def insert(self, key: str, size: int) -> list[str]:
        """Add `key` (not present) at the head of main; returns the keys evicted to make room."""
        self._push(key, size)
        return self._settle()

    def remove(self, key: str) -> int:
        """Drop `key`; its size (0 when absent)."""
        if key in self.main:
            size = self.main.pop(key)
            self.main_bytes -= size
            return size
        if key in self.tail:
            size = self.tail.pop(key)
            self.tail_bytes -= size
            return size
        return 0

    def resize(self, capacity: int) -> list[str]:
        """A new capacity; returns what no longer fits."""
        self.capacity = max(0, int(capacity))
        return self._settle()

    def _push(self, key: str, size: int) -> None:
        self.main[key] = size
        self.main_bytes += size
        self._settle(evict=False)

    def _settle(self, *, evict: bool = True) -> list[str]:
        main_capacity = self.capacity * (1.0 - self.tau)
        while self.main and self.main_bytes > main_capacity:
            key, size = self.main.popitem(last=False)
            self.main_bytes -= size
            self.tail[key] = size
            self.tail_bytes += size
        evicted: list[str] = []
        while evict and self.tail and self.used > self.capacity:
            key, size = self.tail.popitem(last=False)
            self.tail_bytes -= size
            evicted.append(key)
        return evicted


@dataclass
class WindowCounts:
    """The four counters of one tuning window (section 4.3), kept along the lookup path."""

    requests: int = 0
    image_misses: int = 0
    image_tail_hits: int = 0
    full_misses: int = 0
    latent_tail_hits: int = 0


@dataclass
class Totals:
    """Reads by the tier that answered them, since the node started (its /v1/stats figures)."""

    image_hits: int = 0
    latent_hits: int = 0
    misses: int = 0
    promotions: int = 0
    evictions: int = 0

    @property
    def reads(self) -> int:
        return self.image_hits + self.latent_hits + self.misses


@dataclass(frozen=True, slots=True)
class Found(Generic[V]):
    """A lookup's answer. `promote`: a latent hit whose counter reached h; the caller decodes the
    latent anyway to answer, then hands the image to `promote`."""

    tier: Tier
    value: V | None = None
    promote: bool = False


@dataclass
class DualFormatCache(Generic[V]):
    """Two LRU tiers sharing `capacity` bytes: `alpha` of it for decoded images (section 4.2)."""

    capacity: int
    alpha: float
    tau: float = 0.10
    promote_after: int = 8
    window: WindowCounts = field(default_factory=WindowCounts)
    totals: Totals = field(default_factory=Totals)

    def __post_init__(self) -> None:
        if self.capacity < 0:
            raise ValueError("the cache capacity must be at least 0 bytes")
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {self.alpha}")
        if self.promote_after < 0:
            raise ValueError("the promotion threshold h must be at least 0")
        image_capacity = round(self.capacity * self.alpha)
        self.images = LruTier(image_capacity, self.tau)
        self.latents = LruTier(self.capacity - image_capacity, self.tau)
        self._values: dict[str, V] = {}
        self._latent_hits: dict[str, int] = {}

    def tier_of(self, key: str) -> Tier:
        if key in self.images:
            return Tier.IMAGE
        return Tier.LATENT if key in self.latents else Tier.MISS

    def lookup(self, key: str) -> Found[V]:
        """Answer a read from the tiers, counting it in the window and the totals."""
        window = self.window
        window.requests += 1
        if key in self.images:
            window.image_tail_hits += self.images.touch(key)
            self.totals.image_hits += 1
            return Found(Tier.IMAGE, self._values[key])
        window.image_misses += 1
        if key in self.latents:
            window.latent_tail_hits += self.latents.touch(key)
            self.totals.latent_hits += 1
            hits = self._latent_hits.get(key, 0) + 1
            self._latent_hits[key] = hits
            promote = hits >= self.promote_after and self.images.capacity > 0
            return Found(Tier.LATENT, self._values[key], promote=promote)
        window.full_misses += 1
        self.totals.misses += 1
        return Found(Tier.MISS)

    def admit(
        self, key: str, *, latent: tuple[V, int] | None = None, image: tuple[V, int] | None = None
    ) -> Tier:
        """After a full miss: the fetched latent enters the latent tier (counter at zero). With no room
        for it there (alpha = 1, or too large) or no latent at all (a stored image was fetched), the
        image enters the image tier instead. Returns where the object went (MISS: nowhere)."""
        if key in self.images or key in self.latents:
            return self.tier_of(key)
        if latent is not None and self.latents.fits(latent[1]):
            self._values[key] = latent[0]
            self._latent_hits[key] = 0
            self._drop(self.latents.insert(key, latent[1]))
            return Tier.LATENT
        if image is not None and self.images.fits(image[1]):
            self._values[key] = image[0]
            self._drop(self.images.insert(key, image[1]))
            return Tier.IMAGE
        return Tier.MISS

    def promote(self, key: str, image: V, size: int) -> bool:
        """Move `key` from the latent tier to the image tier as the decoded `image`; False when it no
        longer sits in the latent tier or the image cannot fit."""
        if key not in self.latents or not self.images.fits(size):
            return False
        self.latents.remove(key)
        self._latent_hits.pop(key, None)
        self._values[key] = image
        self._drop(self.images.insert(key, size))
        self.totals.promotions += 1
        return True

    def forget(self, key: str) -> bool:
        """Drop `key` from whichever tier holds it (a deleted or expired job)."""
        found = bool(self.images.remove(key) or self.latents.remove(key))
        self._values.pop(key, None)
        self._latent_hits.pop(key, None)
        return found

    def set_alpha(self, alpha: float) -> None:
        """Re-split the budget; each tier evicts what no longer fits (section 4.3's step)."""
        self.alpha = min(1.0, max(0.0, alpha))
        image_capacity = round(self.capacity * self.alpha)
        self._drop(self.images.resize(image_capacity))
        self._drop(self.latents.resize(self.capacity - image_capacity))

    def close_window(self) -> WindowCounts:
        """The window's counters, which start again from zero."""
        closed, self.window = self.window, WindowCounts()
        return closed

    def clear(self) -> None:
        for key in [*self.images.main, *self.images.tail, *self.latents.main, *self.latents.tail]:
            self.forget(key)
        self.window = WindowCounts()
        self.totals = Totals()

    def _drop(self, evicted: list[str]) -> None:
        for key in evicted:
            self._values.pop(key, None)
            self._latent_hits.pop(key, None)
        self.totals.evictions += len(evicted)
