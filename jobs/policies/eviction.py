"""Which cached work to forget first: per-state scores and an eviction planner.

The unit of eviction is one intermediate state (entry, k), as in NIRVANA 5.4 and FlexCache
4.2.3: evicting a state leaves a *hole* that k selection steps over (k_selection.choose_k).
An entry whose states are all gone is *dirty*: it leaves the index with its own blobs (the
final latent), which is when those bytes are freed (NIRVANA 5.4, "Only when all the
intermediate-states for a prompt ... turn into holes, LCBFU marks that prompt embedding as
dirty and removes it").

What happens to an entry's own bytes (its final latent), policy by policy:
- FIFO (MoDM 5.4, a sliding window over generated images): whole entries go, oldest first,
  final latent and every state together. MoDM caches final images, not states, so its unit
  is the entry.
- LCBFU, LRU, LFU, LRBU: states go one by one; the final latent goes with the last state.
  An entry that has no states at all (e.g. a cached hit result holding only a final latent)
  is scored as one unit from the entry's own counters, with `final_latent_k` as the steps
  one use of it saves (0 when such an entry cannot serve a hit: under NIRVANA's resume, a
  hit needs a state).

Every score: lower = evicted first. Ties go to the older item (created first), then the
smaller k, then the entry id, so plans are deterministic.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from types import MappingProxyType

from core.usage import (
    INSERTION_USES,
    MIN_IDLE_SECONDS,
    EntryUsage,
    EvictionPlan,
    StateUsage,
    Victim,
)
from core.vocabulary import EvictionPolicyName

__all__ = [
    "INSERTION_USES",
    "MIN_IDLE_SECONDS",
    "EntryUsage",
    "EvictionPlan",
    "StateUsage",
    "Victim",
    "plan_eviction",
]


ScoreFn = Callable[[StateUsage, datetime], float]


def lcbfu_score(state: StateUsage, now: datetime) -> float:
    """NIRVANA 5.4: f_i x K_i, the access frequency times the steps the state saves per use.

    f_i is a frequency: accesses per second cached (at least MIN_IDLE_SECONDS). Read as a raw
    count, old popular states outrank every newcomer forever and a small cache freezes:
    `reprise bench simulate --profile nirvana --sweep --sizes 16MiB --policies lcbfu,lru` hit 0.057
    under the count against 0.245 under LRU, where NIRVANA's Table 3 has LCBFU's hit rate
    comparable to LRU's. Between states cached at the same time the paper's worked example holds
    unchanged: 100 uses at K=25 (2500) outrank 200 uses at K=5 (1000).
    """
    age = max((now - state.created_at).total_seconds(), MIN_IDLE_SECONDS)
    return state.access_count * state.k / age


def lfu_score(state: StateUsage, now: datetime | None = None) -> float:
    """Least frequently used: accesses."""
    return float(state.access_count)


def lru_score(state: StateUsage, now: datetime | None = None) -> float:
    """Least recently used: the time of the last access."""
    return state.last_access_at.timestamp()


def fifo_score(state: StateUsage, now: datetime | None = None) -> float:
    """First in, first out (MoDM 5.4): the time the item was cached."""
    return state.created_at.timestamp()


def lrbu_score(state: StateUsage, now: datetime) -> float:
    """FlexCache 4.2.3, Eq. 3: (f_i x step_i) / (Capacity_i x Duration_i).

    step_i is k (steps saved per use), Capacity_i the state's bytes, Duration_i the seconds
    since its last access at `now` (at least MIN_IDLE_SECONDS).
    """
    idle = max((now - state.last_access_at).total_seconds(), MIN_IDLE_SECONDS)
    return state.access_count * state.k / (max(state.bytes, 1) * idle)


SCORES: Mapping[EvictionPolicyName, ScoreFn] = MappingProxyType(
    {
        EvictionPolicyName.LCBFU: lcbfu_score,
        EvictionPolicyName.FIFO: fifo_score,
        EvictionPolicyName.LRU: lru_score,
        EvictionPolicyName.LFU: lfu_score,
        EvictionPolicyName.LRBU: lrbu_score,
    }
)


def _entry_as_state(entry: EntryUsage, k: int) -> StateUsage:
    return StateUsage(
        entry.entry_id, k, entry.bytes, entry.access_count, entry.created_at, entry.last_access_at
    )


def _order_key(score: float, item: StateUsage) -> tuple[float, datetime, int, int]:
    # A uuid's int orders as its bytes do (big-endian), as Postgres orders uuids: the SQL rankings'
    # tie-break (db/eviction.py), without building 16 bytes per unit.
    return (score, item.created_at, item.k, item.entry_id.int)


def plan_eviction(
    entries: Iterable[EntryUsage],
    bytes_to_free: int,
    policy: EvictionPolicyName,
    now: datetime,
    *,
    final_latent_k: int = 0,
) -> EvictionPlan:
    """Victims, lowest score first, until at least `bytes_to_free` bytes are freed (or nothing is left).

    Contract: every victim names an item of `entries`; a state appears at most once; an entry
    appears whole (k None) at most once, right after its last state, and then none of its states
    follow. `bytes_freed` is the sum of the victims' bytes. Nothing is planned when
    `bytes_to_free <= 0`.
    """
    if bytes_to_free <= 0:
        return EvictionPlan((), 0)
    entry_list = list(entries)
    if policy is EvictionPolicyName.FIFO:
        return _plan_whole_entries(entry_list, bytes_to_free)

    score = SCORES[policy]
    units: list[tuple[tuple[float, datetime, int, int], EntryUsage, StateUsage | None]] = []
    for entry in entry_list:
        if entry.states:
            units.extend(
                ((score(state, now), state.created_at, state.k, state.entry_id.int), entry, state)
                for state in entry.states
            )  # _order_key, inline: a pass plans over ~40,000 units
        else:
            as_state = _entry_as_state(entry, final_latent_k)
            units.append((_order_key(score(as_state, now), as_state), entry, None))
    units.sort(key=lambda unit: unit[0])

    remaining = {entry.entry_id: len(entry.states) for entry in entry_list}
    victims: list[Victim] = []
    freed = 0
    for _, entry, state in units:
        if freed >= bytes_to_free:
            break
        if state is not None:
            victims.append(Victim(entry.entry_id, state.k, state.bytes))
            freed += state.bytes
            remaining[entry.entry_id] -= 1
            if remaining[entry.entry_id]:
                continue
        victims.append(Victim(entry.entry_id, None, entry.bytes))
        freed += entry.bytes
    return EvictionPlan(tuple(victims), freed)


def _plan_whole_entries(entries: list[EntryUsage], bytes_to_free: int) -> EvictionPlan:
    ordered = sorted(entries, key=lambda entry: (entry.created_at, entry.entry_id.bytes))
    victims: list[Victim] = []
    freed = 0
    for entry in ordered:
        if freed >= bytes_to_free:
            break
        victims.append(Victim(entry.entry_id, None, entry.total_bytes))
        freed += entry.total_bytes
    return EvictionPlan(tuple(victims), freed)
