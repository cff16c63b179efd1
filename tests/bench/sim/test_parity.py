"""The simulator makes the decisions the live path makes: the admit worker's decision
(jobs.admission.decide, which scales k to T and checks the stored states), uses counted when a hit's run
completes, a hit whose source was evicted meanwhile run as a miss, and a replayed stack's allocation."""

from __future__ import annotations

import math
import uuid
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from bench.live.stack import ScheduledAllocation
from bench.run.costs import StepCosts
from bench.run.profiles import build_profile
from bench.sim.cache import SimCache
from bench.sim.config import SimConfig
from bench.sim.simulate import run_simulation
from bench.workload.embeddings import TraceEmbeddings
from bench.workload.trace import ArrivalSpec, Prompts, Request, Workload
from core.settings import Settings
from core.vocabulary import EvictionPolicyName, HitPolicy
from jobs.admission import Candidate, decide
from jobs.policies.eviction import INSERTION_USES
from jobs.policies.k_selection import PRESETS

TABLE = PRESETS["nirvana-t2t"]  # 0.95:25, 0.9:20, 0.85:15, 0.75:10, 0.65:5
STATE = 1000


def _pair(similarity: float) -> np.ndarray:
    """Two unit vectors in the plane with this cosine."""
    angle = math.acos(similarity)
    return np.array([[1.0, 0.0], [math.cos(angle), math.sin(angle)]], dtype=np.float32)


def _cache(
    queries: np.ndarray, *, hit_policy: HitPolicy, steps: int, cached_ks: tuple[int, ...] | None
) -> SimCache:
    return SimCache(
        queries=queries,
        capacity=len(queries),
        table=TABLE,
        knob=0,
        hit_policy=hit_policy,
        steps=steps,
        budget_bytes=10**12,
        policy=EvictionPolicyName.LCBFU,
        cached_ks=cached_ks,
        state_bytes=STATE,
        use_predictor=False,
        final_latent_k=0,
    )


@pytest.mark.parametrize(
    ("hit_policy", "steps", "cached_ks", "similarity", "expected"),
    [
        # T = 20: the profiled k 5 (of 50) is 2 steps; the old choose_k took the largest stored <= 5: 4
        (HitPolicy.RESUME, 20, (2, 4, 6, 8, 10), 0.7, 2),
        (HitPolicy.RESUME, 20, (2, 4, 6, 8, 10), 0.99, 10),  # 25 of 50 -> 10 of 20
        (HitPolicy.RESUME, 50, (5, 10, 15, 20, 25), 0.92, 20),
        # refine: a final latent serves any k, scaled to T (the old code skipped 25 of 20 steps)
        (HitPolicy.REFINE, 20, None, 0.99, 10),
        (HitPolicy.REFINE, 50, None, 0.8, 10),
        (HitPolicy.RESUME, 50, (5, 10, 15, 20, 25), 0.5, None),  # below the table: a miss
    ],
)
def test_the_simulated_admission_is_the_admit_workers_decision(
    hit_policy: HitPolicy,
    steps: int,
    cached_ks: tuple[int, ...] | None,
    similarity: float,
    expected: int | None,
) -> None:
    queries = _pair(similarity)
    cache = _cache(queries, hit_policy=hit_policy, steps=steps, cached_ks=cached_ks)
    cache.insert(0, 0.0)
    lookup = cache.lookup(1, 1.0)
    live = decide(
        candidate=Candidate(lookup_entry_id(cache), float(queries[0] @ queries[1]), cached_ks or (), True),
        table=TABLE,
        knob=0,
        hit_policy=hit_policy,
        steps=steps,
    )
    assert lookup.k == expected == live.k


def lookup_entry_id(cache: SimCache) -> uuid.UUID:
    return next(iter(cache._entries.values())).entry_id


def test_uses_are_counted_when_the_hit_completes_not_at_admission() -> None:
    queries = _pair(0.99)
    cache = _cache(queries, hit_policy=HitPolicy.RESUME, steps=50, cached_ks=(5, 10, 15, 20, 25))
    cache.insert(0, 0.0)
    entry = next(iter(cache._entries.values()))
    lookup = cache.lookup(1, 1.0)
    assert lookup.k == 25 and lookup.entry_row is not None
    assert entry.usage().access_count == INSERTION_USES  # admission reads, it does not count
    assert cache.record_use(lookup.entry_row, 25, 2.0)
    usage = entry.usage()
    assert usage.access_count == INSERTION_USES + 1
    assert {s.k: s.access_count for s in usage.states}[25] == INSERTION_USES + 1
    assert {s.k: s.access_count for s in usage.states}[5] == INSERTION_USES


def _synthetic(
    order: list[int], distinct: int, tmp_path: Path, concurrency: int
) -> tuple[Workload, TraceEmbeddings]:
    """A closed-loop workload of `order` (prompt indices) over `distinct` orthogonal prompts."""
    lines = tuple(f"prompt number {i}" for i in range(distinct))
    prompts = Prompts(path=tmp_path / "synthetic.txt", lines=lines, sha256="0" * 64)
    requests = tuple(Request(seq, idx, lines[idx], None) for seq, idx in enumerate(order))
    workload = Workload(prompts, ArrivalSpec(concurrency=concurrency), requests, skipped_empty=0)
    vectors = np.eye(distinct, dtype=np.float32)
    return workload, TraceEmbeddings(vectors=vectors, embed_ms_per_prompt=0.0, describe={"name": "synthetic"})


def test_a_hit_whose_entry_was_evicted_before_its_run_runs_as_a_miss(
    tmp_path: Path, bench_settings: Settings
) -> None:
    # One large worker, two clients, a budget of one entry: A misses; B and A's repeat are admitted
    # while A is cached; B's insert evicts A before the hit's run starts, so it runs as a miss.
    workload, embeddings = _synthetic([0, 1, 0], 2, tmp_path, concurrency=2)
    settings = bench_settings
    profile = replace(build_profile("nirvana", settings), predictor=False)
    entry_bytes = STATE * (1 + len(profile.capture_steps))
    config = SimConfig(
        profile=profile,
        costs=StepCosts(state_bytes=STATE),
        cache_bytes=entry_bytes,
        large_workers=1,
        small_workers=0,
    )
    result = run_simulation(workload, config, settings=settings, embeddings=embeddings)
    repeat = next(o for o in result.outcomes if o.seq == 2)
    assert not repeat.hit and repeat.k is None
    assert dict(repeat.denoiser_evaluations) == {"large": profile.steps}
    assert (
        result.counters is not None and result.counters.evicted_entries + result.counters.evicted_states > 0
    )


def test_a_replayed_allocation_moves_the_workers_at_its_request(
    tmp_path: Path, bench_settings: Settings
) -> None:
    # Every prompt twice in a row: each repeat hits. The stack moved its small worker to the large role
    # after request 10: hits after it run on the large model, as the live stack ran them.
    order = [i // 2 for i in range(40)]
    workload, embeddings = _synthetic(order, 20, tmp_path, concurrency=1)
    settings = bench_settings
    profile = build_profile("modm", settings)
    base = SimConfig(
        profile=profile,
        costs=StepCosts(state_bytes=STATE),
        cache_bytes=10**12,
        large_workers=1,
        small_workers=1,
        large_serves_hits=False,  # hits on the small worker while there is one
    )
    fixed = run_simulation(workload, base, settings=settings, embeddings=embeddings)
    moved = replace(base, allocation_schedule=(ScheduledAllocation(10, 2, 0),))
    replayed = run_simulation(workload, moved, settings=settings, embeddings=embeddings)
    assert all(set(o.denoiser_evaluations) == {"small"} for o in fixed.outcomes if o.hit)
    early = [o for o in replayed.outcomes if o.hit and o.seq < 10]
    late = [o for o in replayed.outcomes if o.hit and o.seq > 10]
    assert early and all(set(o.denoiser_evaluations) == {"small"} for o in early)
    assert late and all(set(o.denoiser_evaluations) == {"large"} for o in late)
    assert replayed.allocation_timeline is not None
    assert [(p.large, p.small) for p in replayed.allocation_timeline] == [(1, 1), (2, 0)]
    assert replayed.report.compute_saved is not None and fixed.report.compute_saved is not None
    assert replayed.report.compute_saved < fixed.report.compute_saved


def test_an_identical_request_finds_its_prompts_entry_before_any_search() -> None:
    """As db.cache.lookup_prompt: the same prompt (case and spaces aside) is a hit at similarity 1, even
    where its vectors are far apart (a lab image read otherwise than asked); another prompt is searched."""
    queries = _pair(0.1)  # far below the table's lowest row
    prompts = ["A red  circle", "a red circle"]
    searched = _cache(queries, hit_policy=HitPolicy.RESUME, steps=50, cached_ks=(5, 10, 15, 20, 25))
    searched.insert(0, 0.0)
    assert searched.lookup(1, 1.0).k is None  # no prompt keys: the search alone, a miss
    cache = _with_prompts(queries, prompts)
    cache.insert(0, 0.0)
    found = cache.lookup(1, 1.0)
    assert (found.k, found.similarity, cache.counters.identical) == (25, 1.0, 1)
    other = _with_prompts(queries, ["a red circle", "a blue circle"])
    other.insert(0, 0.0)
    assert other.lookup(1, 1.0).k is None and other.counters.identical == 0


def _with_prompts(queries: np.ndarray, prompts: list[str]) -> SimCache:
    return SimCache(
        queries=queries,
        capacity=len(queries),
        table=TABLE,
        knob=0,
        hit_policy=HitPolicy.RESUME,
        steps=50,
        budget_bytes=10**12,
        policy=EvictionPolicyName.LCBFU,
        cached_ks=(5, 10, 15, 20, 25),
        state_bytes=STATE,
        use_predictor=False,
        final_latent_k=0,
        prompts=prompts,
    )
