"""Cache usage records: what the cache remembers of each cached state and entry (sizes, counters,
ages), the form in which db/ reads them and the eviction policies (jobs/policies/eviction.py) rank
them, and an eviction plan, the policies' answer that db/ applies. Plain data, no behaviour.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

MIN_IDLE_SECONDS = 1.0
"""LRBU's Duration_i floor: a state used this very second would otherwise divide by zero."""


@dataclass(frozen=True, slots=True)
class StateUsage:
    """One cached state as eviction sees it: its size, its k and its access counters."""

    entry_id: uuid.UUID
    k: int
    bytes: int
    access_count: int
    created_at: datetime
    last_access_at: datetime


@dataclass(frozen=True, slots=True)
class EntryUsage:
    """One live cache entry: its own bytes (final latent), counters and remaining states."""

    entry_id: uuid.UUID
    bytes: int
    access_count: int
    created_at: datetime
    last_access_at: datetime
    states: tuple[StateUsage, ...] = ()

    @property
    def total_bytes(self) -> int:
        return self.bytes + sum(state.bytes for state in self.states)


@dataclass(frozen=True, slots=True)
class Victim:
    """One eviction step. k is the state evicted; k None: the whole entry goes (it is dirty)."""

    entry_id: uuid.UUID
    k: int | None
    bytes: int


@dataclass(frozen=True, slots=True)
class EvictionPlan:
    """Victims in eviction order, and the bytes they free together."""

    victims: tuple[Victim, ...]
    bytes_freed: int

    @property
    def states(self) -> tuple[Victim, ...]:
        """The single states evicted (holes), in order."""
        return tuple(victim for victim in self.victims if victim.k is not None)

    @property
    def entries(self) -> tuple[uuid.UUID, ...]:
        """Entries that leave whole (dirty): the final latent and whatever states they still had."""
        return tuple(victim.entry_id for victim in self.victims if victim.k is None)


# A new entry and its states count the generation that produced them as their first use. Starting
# at 0 made every newcomer the first victim of the frequency policies (LCBFU = accesses x k, LFU,
# LRBU), freezing small caches: `reprise bench simulate` at 16 MiB hit 0.064 under LCBFU against
# 0.245 under LRU. NIRVANA 5.4 leaves the initial count open.
INSERTION_USES = 1
