"""The simulator's cache: entries, their latent states and counters, an exact nearest-neighbour
index, and eviction and match prediction through the service's own policy code.

Policy decisions are not made here: a hit and its k come from the admit worker's own decision
(`jobs.admission.decide`: the table, the knob, k scaled to the request's T, holes, the final latent),
victims from `jobs.policies.eviction.plan_eviction`, and the match predictor is
`jobs.policies.predictor.fit_predictor` retrained on `needs_retrain`. This module only keeps
the state those functions read, the way the database keeps it for the service. As in the service,
a use is counted when the hit's run completes (`record_use`, workers.generation.reuse_job), not at
admission, and a hit whose entry or state was evicted meanwhile runs as a miss (`serves`). As admission
does (db.cache.lookup_prompt), an identical request finds the newest live entry of its prompt before
any prediction or search, at similarity 1: a simulated run's requests share T, size and guidance, so
identical means the same prompt text (core.prompt_key.normalised).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import numpy as np
import numpy.typing as npt

from core.prompt_key import normalised
from core.settings import get_settings
from core.vocabulary import EvictionPolicyName, HitPolicy, Route
from jobs.admission import Candidate, decide
from jobs.policies.eviction import INSERTION_USES, EntryUsage, StateUsage, plan_eviction
from jobs.policies.k_selection import ThresholdTable
from jobs.policies.predictor import (
    RETRAIN_CHANGE,
    RETRAIN_INSERTS,
    MatchPredictor,
    fit_predictor,
    needs_retrain,
)

SIM_EPOCH = datetime(2025, 1, 1, tzinfo=UTC)
"""Simulated second 0 as a datetime, for the policies that read timestamps."""

EVICT_SLACK = 0.02
"""Once an insert needs room, eviction frees down to (1 - EVICT_SLACK) x budget rather than exactly
what the insert needs (jobs.passes.eviction.ensure_room): the planner then runs once per ~2% of the budget
inserted instead of on every insert, which keeps a 5k-request simulation within seconds. The
victims are the policy's, in its order; the cache holds on average ~1% less than the budget."""

PREDICT_BATCH = 256
"""Upcoming queries scored per call to the predictor (one matrix product instead of 256)."""


SAMPLED_POLICIES = frozenset({EvictionPolicyName.LCBFU, EvictionPolicyName.LRBU})
"""Policies whose score moves with the clock: the service ranks a sample of a large scope (db.eviction)."""


def _configured_sampling() -> tuple[int, int]:
    """The deployment's REPRISE_EVICTION_SAMPLE_FACTOR and REPRISE_EVICTION_EXACT_ENTRIES."""
    settings = get_settings()
    return settings.eviction_sample_factor, settings.eviction_exact_entries


def sim_time(seconds: float) -> datetime:
    return SIM_EPOCH + timedelta(seconds=seconds)


@dataclass(slots=True)
class SimState:
    k: int
    bytes: int
    created_at: datetime
    access_count: int = INSERTION_USES
    last_access_at: datetime = SIM_EPOCH


@dataclass(slots=True)
class SimEntry:
    """A cached generation: its row in the index, its final latent's bytes, its states by k."""

    row: int
    entry_id: uuid.UUID
    bytes: int
    created_at: datetime
    last_access_at: datetime
    states: dict[int, SimState] = field(default_factory=dict)
    access_count: int = INSERTION_USES

    _usage: EntryUsage | None = field(default=None, init=False, repr=False)

    def total_bytes(self) -> int:
        return self.bytes + sum(state.bytes for state in self.states.values())

    def touched(self) -> None:
        """Its counters or states changed: the eviction view must be rebuilt."""
        self._usage = None

    def usage(self) -> EntryUsage:
        if self._usage is None:
            self._usage = self._build_usage()
        return self._usage

    def _build_usage(self) -> EntryUsage:
        return EntryUsage(
            entry_id=self.entry_id,
            bytes=self.bytes,
            access_count=self.access_count,
            created_at=self.created_at,
            last_access_at=self.last_access_at,
            states=tuple(
                StateUsage(self.entry_id, s.k, s.bytes, s.access_count, s.created_at, s.last_access_at)
                for s in self.states.values()
            ),
        )


@dataclass(frozen=True, slots=True)
class Lookup:
    """The result of admitting one query: k None is a miss; `predicted_miss` when the predictor
    skipped the search; `wall_ms` the wall time the policy path took here."""

    k: int | None
    similarity: float | None
    entry_row: int | None
    predicted_miss: bool
    wall_ms: float


@dataclass(slots=True)
class CacheCounters:
    inserted: int = 0
    evicted_entries: int = 0
    evicted_states: int = 0
    planner_calls: int = 0
    predictor_fits: int = 0
    predicted_misses: int = 0
    # The predictor against the truth (the search it skipped is run here, untimed, to know it):
    predicted_hit_true: int = 0  # predicted hit, the lookup hit
    predicted_hit_false: int = 0  # predicted hit, the lookup missed (a lookup wasted)
    hits_lost: int = 0  # predicted miss, the lookup would have hit
    hits_lost_k: int = 0  # the steps those hits would have saved
    searches: int = 0  # lookups run (timed)
    identical: int = 0  # admitted on the identical prompt's entry, before any search
    search_ms: float = 0.0  # their total wall time (nearest neighbour + decision)


class SimCache:
    """The cache of one scope under a byte budget.

    `hit_policy` and `steps` (T) are the deployment's: under resume an entry serves only the k it
    still stores (`cached_ks` are the states an entry is inserted with), under refine its final
    latent serves any k.
    """

    def __init__(
        self,
        *,
        queries: npt.NDArray[np.float32],
        capacity: int,
        table: ThresholdTable,
        knob: int,
        hit_policy: HitPolicy,
        steps: int,
        budget_bytes: int,
        policy: EvictionPolicyName,
        cached_ks: Sequence[int] | None,
        state_bytes: int,
        use_predictor: bool,
        final_latent_k: int,
        retrain_change: float = RETRAIN_CHANGE,
        retrain_inserts: int = RETRAIN_INSERTS,
        sampling: tuple[int, int] | None = None,
        seed: int = 0,
        keys: npt.NDArray[np.float32] | None = None,
        prompts: Sequence[str] | None = None,
    ) -> None:
        self._queries = queries
        # What an entry is found by: its prompt's vector (text-to-text), or its image's (`keys`).
        self._keys = queries if keys is None else keys
        # The live entries' embeddings, packed: row i of `_index` is entry `_index_rows[i]`.
        # A removal moves the last row into the hole, so a search scans live entries only.
        self._index = np.zeros((capacity, queries.shape[1]), dtype=np.float32)
        self._index_rows: list[int] = []
        self._position: dict[int, int] = {}
        self._entries: dict[int, SimEntry] = {}
        self._next_row = 0
        self.table = table
        self.knob = knob
        self.hit_policy = hit_policy
        self.steps = steps
        self.budget_bytes = budget_bytes
        self.policy = policy
        self.cached_ks = tuple(cached_ks) if cached_ks is not None else None
        self.state_bytes = state_bytes
        self.use_predictor = use_predictor
        self.bytes = 0
        self.counters = CacheCounters()
        self._predictor: MatchPredictor | None = None
        self._fit_size = 0
        self._changed_since_fit = 0
        self._inserted_since_fit = 0
        self.retrain_change = retrain_change
        self.retrain_inserts = retrain_inserts
        self._predicted: dict[int, bool] = {}
        self._final_latent_k = final_latent_k
        # (sample factor, exact below this many entries): the service's eviction pass (db.eviction).
        self.sample_factor, self.exact_entries = sampling if sampling is not None else _configured_sampling()
        self._rng = np.random.default_rng(seed)
        # Identical requests: each query row's prompt key, and the live entries made from each key.
        self._prompt_keys = [normalised(text) for text in prompts] if prompts is not None else None
        self._entry_key: dict[int, str] = {}
        self._by_prompt: dict[str, list[int]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    # --- admission -------------------------------------------------------------------------
    def lookup(self, query_row: int, now_s: float, *, upcoming: Sequence[int] = ()) -> Lookup:
        """Admit the query at `query_row` of the query matrix: predictor, nearest neighbour, then the
        admit worker's decision (jobs.admission.decide) on that candidate. Counts no use: the
        service counts one when the hit's run completes (`record_use`).

        `upcoming` are the query rows likely to follow (scored together with this one while the
        predictor is unchanged). `now_s` is unused: admission reads the cache, it does not touch it.
        """
        started = time.perf_counter()
        same = self._identical(query_row)
        if same is not None:
            self.counters.identical += 1
            return Lookup(
                same.k, same.similarity, same.entry_row, False, (time.perf_counter() - started) * 1000.0
            )
        predicted = self._likely_hit(query_row, upcoming) if self.use_predictor else None
        if predicted is False:
            wall_ms = (time.perf_counter() - started) * 1000.0
            self.counters.predicted_misses += 1
            would = self._search(query_row)
            if would.k is not None:
                self.counters.hits_lost += 1
                self.counters.hits_lost_k += would.k
            return Lookup(None, None, None, True, wall_ms)
        searched = time.perf_counter()
        found = self._search(query_row)
        self.counters.searches += 1
        self.counters.search_ms += (time.perf_counter() - searched) * 1000.0
        if predicted is True and self._predictor is not None:
            if found.k is not None:
                self.counters.predicted_hit_true += 1
            else:
                self.counters.predicted_hit_false += 1
        return Lookup(
            found.k, found.similarity, found.entry_row, False, (time.perf_counter() - started) * 1000.0
        )

    def _search(self, query_row: int) -> Lookup:
        """The exact nearest neighbour and the admission decision on it (wall_ms unset here)."""
        if not self._entries:
            return Lookup(None, None, None, False, 0.0)
        scores = self._index[: len(self._index_rows)] @ self._queries[query_row]
        best = int(np.argmax(scores))
        return self._decided(self._index_rows[best], float(scores[best]))

    def _identical(self, query_row: int) -> Lookup | None:
        """The decision on the newest live entry of the same prompt, at similarity 1; None without one."""
        if self._prompt_keys is None:
            return None
        rows = self._by_prompt.get(self._prompt_keys[query_row])
        return self._decided(rows[-1], 1.0) if rows else None

    def _decided(self, row: int, similarity: float) -> Lookup:
        """The admit worker's decision on the entry at `row` found at `similarity`."""
        entry = self._entries[row]
        # Every simulated entry keeps its final latent (the service stores it with every generation).
        candidate = Candidate(entry.entry_id, similarity, tuple(sorted(entry.states)), has_final_latent=True)
        decision = decide(
            candidate=candidate,
            table=self.table,
            knob=self.knob,
            hit_policy=self.hit_policy,
            steps=self.steps,
        )
        k = decision.k if decision.route is Route.HIT else None
        return Lookup(k, similarity, row, False, 0.0)

    def serves(self, entry_row: int, k: int) -> bool:
        """Whether the entry a hit was admitted to can still serve it when its run starts: the entry is
        cached and, under resume, still stores the state k (workers.generation.reuse_job reads that
        blob; SourceVanished sends the job to the miss queue)."""
        entry = self._entries.get(entry_row)
        if entry is None:
            return False
        return self.hit_policy is HitPolicy.REFINE or k in entry.states

    def record_use(self, entry_row: int, k: int, now_s: float) -> bool:
        """A hit's run completed: one use of the entry and, under resume, of its state k, stamped now
        (db.cache.record_use). False, counting nothing, when the entry was evicted meanwhile."""
        entry = self._entries.get(entry_row)
        if entry is None:
            return False
        now = sim_time(now_s)
        entry.access_count += 1
        entry.last_access_at = now
        state = entry.states.get(k) if self.hit_policy is HitPolicy.RESUME else None
        if state is not None:
            state.access_count += 1
            state.last_access_at = now
        entry.touched()
        return True

    def _likely_hit(self, query_row: int, upcoming: Sequence[int]) -> bool:
        if self._predictor is None:
            return True  # no fit yet: nothing to skip the search on
        if query_row not in self._predicted:
            rows = [query_row, *(r for r in upcoming if r not in self._predicted)][:PREDICT_BATCH]
            for row, likely in zip(rows, self._predictor.predict_many(self._queries[rows]), strict=True):
                self._predicted[row] = bool(likely)
        return self._predicted[query_row]

    # --- maintenance -----------------------------------------------------------------------
    def maintain_predictor(self) -> bool:
        """Refit the predictor when the retrain pass's rule says so (NIRVANA's 5%, or an insert burst;
        jobs.policies.predictor.needs_retrain), the beat's job. True if refitted."""
        if not self.use_predictor or not needs_retrain(
            self._fit_size,
            len(self._entries),
            self._changed_since_fit,
            self._inserted_since_fit,
            change=self.retrain_change,
            inserts=self.retrain_inserts,
        ):
            return False
        live = sorted(self._entries.values(), key=lambda e: e.last_access_at, reverse=True)
        rows = [self._position[entry.row] for entry in live]
        self._predictor = fit_predictor(
            self._index[rows], threshold=self.table.lowest_similarity, dim=self._index.shape[1]
        )
        self._fit_size, self._changed_since_fit, self._inserted_since_fit = len(live), 0, 0
        self._predicted.clear()
        self.counters.predictor_fits += 1
        return True

    # --- insertion and eviction ------------------------------------------------------------
    def insert(self, query_row: int, now_s: float) -> bool:
        """Cache the result of a generation of the prompt at `query_row`, evicting first what the
        budget needs (as jobs.passes.eviction.ensure_room does). False: the entry alone exceeds the budget."""
        if len(self._index_rows) >= self._index.shape[0]:
            raise RuntimeError("simulated cache index is full: capacity must cover the live entries")
        now = sim_time(now_s)
        incoming = self.state_bytes * (1 + len(self.cached_ks or ()))
        if incoming > self.budget_bytes:
            return False
        if self.bytes + incoming > self.budget_bytes:
            low_water = int(self.budget_bytes * (1.0 - EVICT_SLACK))
            self._evict(now, self.bytes + incoming - low_water)
        row = self._next_row
        self._next_row += 1
        self._position[row] = len(self._index_rows)
        self._index[len(self._index_rows)] = self._keys[query_row]
        self._index_rows.append(row)
        entry = SimEntry(
            row=row,
            entry_id=uuid.UUID(int=row + 1),
            bytes=self.state_bytes,
            created_at=now,
            last_access_at=now,
        )
        for k in self.cached_ks or ():
            entry.states[k] = SimState(k=k, bytes=self.state_bytes, created_at=now, last_access_at=now)
        self._entries[row] = entry
        if self._prompt_keys is not None:
            self._entry_key[row] = self._prompt_keys[query_row]
            self._by_prompt.setdefault(self._entry_key[row], []).append(row)
        self.bytes += entry.total_bytes()
        self._changed_since_fit += 1
        self._inserted_since_fit += 1
        self.counters.inserted += 1
        return True

    def _evict(self, now: datetime, bytes_to_free: int) -> None:
        plan = plan_eviction(
            (entry.usage() for entry in self._candidates(bytes_to_free)),
            bytes_to_free,
            self.policy,
            now,
            final_latent_k=self._final_latent_k,
        )
        self.counters.planner_calls += 1
        by_id = {entry.entry_id: entry for entry in self._entries.values()}
        for victim in plan.victims:
            entry = by_id[victim.entry_id]
            if victim.k is not None:
                self.bytes -= entry.states.pop(victim.k).bytes
                entry.touched()
                self.counters.evicted_states += 1
            else:
                self.bytes -= entry.total_bytes()
                del self._entries[entry.row]
                self._unindex(entry.row)
                self._changed_since_fit += 1
                self.counters.evicted_entries += 1

    def _candidates(self, bytes_to_free: int) -> list[SimEntry]:
        """The entries the planner ranks: all of them, or, as the service's pass does under LCBFU and
        LRBU on a scope of at least `exact_entries` entries, a uniformly random sample holding
        `sample_factor` x the bytes to free (db.eviction.candidate_ids)."""
        entries = list(self._entries.values())
        if (
            self.policy not in SAMPLED_POLICIES
            or self.sample_factor <= 0
            or len(entries) < self.exact_entries
        ):
            return entries
        target = self.sample_factor * bytes_to_free
        sample: list[SimEntry] = []
        held = 0
        for index in self._rng.permutation(len(entries)):
            if held >= target:
                break
            sample.append(entries[index])
            held += sample[-1].total_bytes()
        return sample

    def _unindex(self, row: int) -> None:
        key = self._entry_key.pop(row, None)
        if key is not None:
            self._by_prompt[key].remove(row)
        hole, last = self._position.pop(row), len(self._index_rows) - 1
        moved = self._index_rows.pop()
        if hole != last:
            self._index[hole] = self._index[last]
            self._index_rows[hole] = moved
            self._position[moved] = hole
