"""The simulator's video profile (bench.sim.video) and its traces (bench.video.trace): whole-prompt vs
decoupled lookup through the service's policies, LRBU under a byte budget, and the cost accounting."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from bench.sim.video import Vectors, VideoCosts, prompt_parts, simulate_video
from bench.video.trace import lab_video_trace, motion_trace
from core.vocabulary import EvictionPolicyName
from jobs.policies.k_selection import NIRVANA_T2T

DIM = 32


def unit(vector: npt.NDArray[np.floating[Any]]) -> Vectors:
    unit_vector: Vectors = (vector / np.linalg.norm(vector)).astype(np.float32)
    return unit_vector


def combinations(pairs: list[tuple[int, int]]) -> tuple[Vectors, list[tuple[Vectors | None, Vectors | None]]]:
    """Requests made of object o and background b: the whole prompt is their normalised sum, so two
    requests sharing only one part are 0.5 alike as wholes (a miss) and 1.0 alike in that part."""
    rng = np.random.default_rng(0)
    objects = [unit(rng.normal(size=DIM)) for _ in range(4)]
    backgrounds = [unit(rng.normal(size=DIM)) for _ in range(4)]
    whole = np.stack([unit(objects[o] + backgrounds[b]) for o, b in pairs])
    return whole, [(objects[o], backgrounds[b]) for o, b in pairs]


def test_a_combination_never_cached_whole_hits_by_its_parts() -> None:
    # (0,0) and (1,1) are cached; (0,1) takes object 0 from the first and background 1 from the second.
    whole, parts = combinations([(0, 0), (1, 1), (0, 1), (0, 1)])
    costs = VideoCosts()
    budget = 10**12
    plain = simulate_video(whole, parts, NIRVANA_T2T, costs=costs, budget_bytes=budget, decoupled=False)
    split = simulate_video(whole, parts, NIRVANA_T2T, costs=costs, budget_bytes=budget, decoupled=True)

    assert plain.by_kind == {"whole": 1, "decoupled": 0}  # only the repeat of (0,1) hits whole
    # (0,1) is stitched both times: a hit at k = 25 saves no state (4.2.4), so it never enters whole
    assert split.by_kind == {"whole": 0, "decoupled": 2}
    assert split.hit_rate == 0.5 > plain.hit_rate == 0.25
    # identical parts: similarity 1.0 > 0.95 -> k 25 (NIRVANA's table), a hit at 25 saves nothing
    assert split.mean_k == 25 * 2 / 4 and split.compute_saved == 50 / (4 * 50)
    served_s = (4 * 50 - 50) * costs.step_s
    assert split.throughput_rps == round(4 / served_s, 6)
    assert split.vanilla_throughput_rps == round(1 / (50 * costs.step_s), 6)


def test_the_budget_bounds_the_cache_and_evicts_states() -> None:
    whole, parts = combinations([(o, b) for o in range(4) for b in range(4)])
    costs = VideoCosts()
    entry = len(costs.capture) * costs.stored_state_bytes + costs.mask_bytes
    for policy in (EvictionPolicyName.LRBU, EvictionPolicyName.LCBFU):
        run = simulate_video(
            whole, parts, NIRVANA_T2T, costs=costs, budget_bytes=3 * entry, decoupled=True, policy=policy
        )
        assert run.cache_bytes <= 3 * entry and run.evicted_states > 0
        unbounded = simulate_video(
            whole, parts, NIRVANA_T2T, costs=costs, budget_bytes=10**12, decoupled=True
        )
        assert unbounded.evicted_states == 0 and unbounded.hit_rate >= run.hit_rate


def test_compressed_states_fit_more_entries_in_the_same_budget() -> None:
    whole, parts = combinations([(o, b) for o in range(4) for b in range(4)] * 2)
    costs = VideoCosts()
    budget = 6 * (len(costs.capture) * costs.state_bytes + costs.mask_bytes)
    raw = simulate_video(
        whole, parts, NIRVANA_T2T, costs=VideoCosts(compression=1.0), budget_bytes=budget, decoupled=False
    )
    compressed = simulate_video(whole, parts, NIRVANA_T2T, costs=costs, budget_bytes=budget, decoupled=False)
    assert compressed.hit_rate > raw.hit_rate


def test_lab_video_prompts_recur_by_part_and_split_into_object_and_background() -> None:
    prompts = lab_video_trace(300, seed=3)
    assert prompts == lab_video_trace(300, seed=3) and prompts != lab_video_trace(300, seed=4)
    parts = prompt_parts(prompts)
    assert all(obj and background for obj, background in parts)
    distinct_pairs = len(set(parts))
    assert len({obj for obj, _ in parts}) < distinct_pairs and len({b for _, b in parts}) < distinct_pairs


def test_a_motion_trace_adds_motion_to_real_prompts() -> None:
    prompts = motion_trace(["a cat on the moon", "portrait of a knight,"], 50, seed=1)
    assert len(prompts) == 50 and all(
        p.startswith(("a cat on the moon, ", "portrait of a knight, ")) for p in prompts
    )
