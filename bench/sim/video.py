"""The simulator's video profile: FlexCache's cache on a video trace at the paper's costs,
with whole-prompt lookup only (NIRVANA's, the baseline) or with decoupled object/background lookup.

Each request, in order, is served at once by the next free GPU of `workers` (the trace's maximum
throughput: every GPU busy, MoDM 6 "Maximum Throughput"), through the service's own policy code:
1. its phrases (jobs.policies.decoupling.split_prompt) and embeddings (the configured text embedder,
   real MiniLM weights): whole prompt, object, background;
2. the nearest live entry by each embedding (exact cosine), offered with the steps it still stores to
   jobs.policies.video_hits.choose_video_hit (4.2.1: max(Sim_whole, min(Sim_object, Sim_background)),
   the threshold table's k, holes);
3. the run costs (T - k) steps of `step_s` (2.3: VideoCrafter2, 64 frames at 320x512, 242 s for T = 50
   on an A100); a hit counts a use of the states it read (their LRBU counters);
4. it saves the capture steps states_to_save names (4.2.4: a miss all five, a hit at k < 25 those after
   k), each `state_bytes / compression` bytes (2.3: 2.5 MB a state; 3.1.1: 6.7x), plus its mask (4.3:
   40 kB), evicting by LRBU (jobs.policies.eviction, 4.2.3) down to the byte budget first.

compute_saved = sum(k) / (requests x T); throughput = requests / (sum of service times / workers);
the vanilla system runs T steps for every request: workers / (T x step_s).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import numpy as np
import numpy.typing as npt

from core.usage import EntryUsage, StateUsage
from core.vocabulary import EvictionPolicyName
from jobs.policies.decoupling import split_prompt
from jobs.policies.eviction import plan_eviction
from jobs.policies.k_selection import ThresholdTable
from jobs.policies.video_hits import HitKind, Match, VideoHit, choose_video_hit, states_to_save

Vectors = npt.NDArray[np.float32]
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class VideoCosts:
    """The paper's scale. steps, step_s: 2.3 (242 s for 50 steps); state_bytes: 2.3 (2.5 MB a latent
    state of 64 frames); compression: 3.1.1 (6.7x on average); mask_bytes: 4.3 (40 kB); capture:
    3.2 (steps 5 to 25)."""

    steps: int = 50
    step_s: float = 242.0 / 50
    state_bytes: int = 2_500_000
    compression: float = 6.7
    mask_bytes: int = 40_000
    capture: tuple[int, ...] = (5, 10, 15, 20, 25)
    workers: int = 1

    @property
    def stored_state_bytes(self) -> int:
        return int(self.state_bytes / self.compression)


@dataclass(slots=True)
class _Entry:
    whole: Vectors
    object: Vectors | None
    background: Vectors | None
    states: dict[int, StateUsage]
    created: datetime


@dataclass(frozen=True, slots=True)
class VideoSimResult:
    """One simulated run. hit_rate: hits / requests; by_kind: hits served whole or stitched."""

    decoupled_lookup: bool
    policy: str
    compression: float
    requests: int
    hit_rate: float
    by_kind: dict[str, int]
    mean_k: float
    compute_saved: float
    throughput_rps: float
    vanilla_throughput_rps: float
    evicted_states: int
    cache_bytes: int


class _PartIndex:
    """Unit rows of one part (whole, object or background) for exact cosine search; rows of removed
    entries are masked, not moved."""

    def __init__(self, dim: int) -> None:
        self.rows = np.zeros((64, dim), dtype=np.float32)
        self.alive = np.zeros(64, dtype=bool)
        self.ids: list[uuid.UUID] = []
        self.position: dict[uuid.UUID, int] = {}

    def add(self, entry_id: uuid.UUID, vector: Vectors) -> None:
        if len(self.ids) == len(self.rows):
            self.rows = np.concatenate([self.rows, np.zeros_like(self.rows)])
            self.alive = np.concatenate([self.alive, np.zeros_like(self.alive)])
        self.position[entry_id] = len(self.ids)
        self.rows[len(self.ids)], self.alive[len(self.ids)] = vector, True
        self.ids.append(entry_id)

    def remove(self, entry_id: uuid.UUID) -> None:
        where = self.position.pop(entry_id, None)
        if where is not None:
            self.alive[where] = False

    def nearest(self, vector: Vectors) -> tuple[uuid.UUID, float] | None:
        count = len(self.ids)
        if not self.alive[:count].any():
            return None
        similarities = np.where(self.alive[:count], self.rows[:count] @ vector, -np.inf)
        best = int(np.argmax(similarities))
        return self.ids[best], float(similarities[best])


@dataclass(slots=True)
class VideoCacheSim:
    """The cache as the simulator keeps it (entries, their states' LRBU counters, one exact index per
    part) and its byte budget."""

    table: ThresholdTable
    costs: VideoCosts
    budget_bytes: int
    decoupled: bool
    dim: int
    policy: EvictionPolicyName = EvictionPolicyName.LRBU
    entries: dict[uuid.UUID, _Entry] = field(default_factory=dict)
    indexes: dict[str, _PartIndex] = field(default_factory=dict)
    evicted: int = 0
    stored_bytes: int = 0

    def __post_init__(self) -> None:
        self.indexes = {part: _PartIndex(self.dim) for part in ("whole", "object", "background")}

    def nearest(self, vector: Vectors | None, part: str) -> Match | None:
        """The live entry with the highest cosine for this part, with the steps it still stores."""
        found = None if vector is None else self.indexes[part].nearest(vector)
        if found is None:
            return None
        return Match(found[0], found[1], tuple(self.entries[found[0]].states))

    def decide(self, whole: Vectors, parts: tuple[Vectors | None, Vectors | None]) -> VideoHit | None:
        object_match = self.nearest(parts[0], "object") if self.decoupled else None
        background_match = self.nearest(parts[1], "background") if self.decoupled else None
        return choose_video_hit(self.nearest(whole, "whole"), object_match, background_match, self.table)

    def use(self, hit: VideoHit, now: datetime) -> None:
        """A use of the state at k of every entry the hit read (their LRBU counters, 4.2.3)."""
        for entry_id in set(hit.entry_ids):
            state = self.entries[entry_id].states[hit.k]
            self.entries[entry_id].states[hit.k] = StateUsage(
                state.entry_id, state.k, state.bytes, state.access_count + 1, state.created_at, now
            )

    def insert(self, entry_id: uuid.UUID, entry: _Entry, now: datetime) -> None:
        """Evict down to the budget (the policy over every state: LRBU in FlexCache 4.2.4), then add it."""
        incoming = self.costs.mask_bytes + sum(state.bytes for state in entry.states.values())
        excess = self.stored_bytes + incoming - self.budget_bytes
        if excess > 0:
            usage = [
                EntryUsage(key, self.costs.mask_bytes, 0, e.created, e.created, tuple(e.states.values()))
                for key, e in self.entries.items()
            ]
            for victim in plan_eviction(usage, excess, self.policy, now).victims:
                self.stored_bytes -= victim.bytes
                if victim.k is None:
                    self._forget(victim.entry_id)
                else:
                    self.entries[victim.entry_id].states.pop(victim.k, None)
                    self.evicted += 1
        self.entries[entry_id] = entry
        self.stored_bytes += incoming
        for part in ("whole", "object", "background"):
            vector = getattr(entry, part)
            if vector is not None:
                self.indexes[part].add(entry_id, vector)

    def _forget(self, entry_id: uuid.UUID) -> None:
        self.entries.pop(entry_id, None)
        for index in self.indexes.values():
            index.remove(entry_id)


def simulate_video(
    whole: Vectors,
    parts: Sequence[tuple[Vectors | None, Vectors | None]],
    table: ThresholdTable,
    *,
    costs: VideoCosts = VideoCosts(),
    budget_bytes: int,
    decoupled: bool,
    policy: EvictionPolicyName = EvictionPolicyName.LRBU,
) -> VideoSimResult:
    """Serve the trace in order (module doc). `whole`: one unit row per request; `parts`: its object
    and background embeddings (None where the parser found none). NIRVANA's video baseline (FlexCache
    6.1) is decoupled=False, compression 1 and LCBFU."""
    cache = VideoCacheSim(
        table=table,
        costs=costs,
        budget_bytes=budget_bytes,
        decoupled=decoupled,
        dim=whole.shape[1],
        policy=policy,
    )
    busy_s, ks = 0.0, []
    by_kind = {HitKind.WHOLE.value: 0, HitKind.DECOUPLED.value: 0}
    for index, vector in enumerate(whole):
        now = EPOCH + timedelta(seconds=busy_s / costs.workers)
        hit = cache.decide(vector, parts[index])
        k = 0 if hit is None else hit.k
        if hit is not None:
            by_kind[hit.kind.value] += 1
            cache.use(hit, now)
        ks.append(k)
        busy_s += (costs.steps - k) * costs.step_s
        saved = states_to_save(None if hit is None else hit.k, costs.capture)
        if saved:
            entry_id = uuid.uuid4()
            done = EPOCH + timedelta(seconds=busy_s / costs.workers)
            states = {
                step: StateUsage(entry_id, step, costs.stored_state_bytes, 1, done, done) for step in saved
            }
            cache.insert(entry_id, _Entry(vector, parts[index][0], parts[index][1], states, done), done)
    requests = len(whole)
    return VideoSimResult(
        decoupled_lookup=decoupled,
        policy=policy.value,
        compression=costs.compression,
        requests=requests,
        hit_rate=round(sum(by_kind.values()) / requests, 4),
        by_kind=by_kind,
        mean_k=round(float(np.mean(ks)), 3),
        compute_saved=round(sum(ks) / (requests * costs.steps), 4),
        throughput_rps=round(requests / (busy_s / costs.workers), 6),
        vanilla_throughput_rps=round(costs.workers / (costs.steps * costs.step_s), 6),
        evicted_states=cache.evicted,
        cache_bytes=cache.stored_bytes,
    )


def prompt_parts(prompts: list[str]) -> list[tuple[str, str]]:
    """Each prompt's object and background phrases ("" where the parser found none)."""
    parts = [split_prompt(prompt) for prompt in prompts]
    return [(part.object, part.background) if part.decoupled else ("", "") for part in parts]
