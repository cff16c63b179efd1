"""The read-side simulator (bench.sim.reads): the report's contract, the event model's costs, and each
of the paper's mechanisms (coalescing, spillover with write-back, marginal-hit tuning) doing its job."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bench.sim.reads import (
    IMAGE,
    JOINED,
    LATENT,
    MISS,
    SETUPS,
    ReadSimSpec,
    build_world,
    burst_decodes,
    replay,
    simulate_reads,
)

SMALL = ReadSimSpec(objects=3000, reads=30_000, window=300, seed=1)
# One node whose cache holds everything: the event model's costs with nothing evicted.
ONE_NODE = ReadSimSpec(objects=10, reads=10, nodes=1, cache_fraction=1.0, warmup=0.0)


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    return simulate_reads(SMALL)


def test_the_report_keeps_the_contract(report: dict[str, Any]) -> None:
    json.dumps(report, allow_nan=False)  # plain JSON: no NaN, no inf
    assert set(report) == {"setups", "burst", "parameters"}
    assert set(report["setups"]) == {"images_only", "latents_only", "fixed", "adaptive"}
    contract = {"stored_bytes_ratio", "decodes_per_read", "image_tier_hit", "latent_tier_hit"}
    contract |= {"read_ms", "mean_ms", "spilled", "alpha_final"}
    for figures in report["setups"].values():
        assert contract <= figures.keys()
        assert figures["read_ms"]["p50"] <= figures["read_ms"]["p99"]
        assert figures["reads"] == 24_000  # 20% of the trace warms the caches
        assert isinstance(figures["alpha_final"], float) and isinstance(figures["spilled"], int)
    trajectory = report["setups"]["adaptive"]["alpha_trajectory"]
    assert len(trajectory) == SMALL.nodes and all(len(windows) >= 20 for windows in trajectory)
    assert report["parameters"]["theta"] == 4.0 and report["parameters"]["t_decode_s"] == 0.04


def test_the_image_store_never_decodes_nor_queues(report: dict[str, Any]) -> None:
    images = report["setups"]["images_only"]
    assert images["stored_bytes_ratio"] == 1.0 and images["decodes_per_read"] == 0.0
    assert images["latent_tier_hit"] == 0.0 and images["alpha_final"] == 1.0
    assert images["read_ms"]["p50"] == 10.0  # most reads are image hits: the transfer alone
    assert images["read_ms"]["p99"] <= 150.0  # a miss: fetch + transfer, never a GPU queue


def test_latents_only_decodes_every_read_but_the_coalesced(report: dict[str, Any]) -> None:
    latents = report["setups"]["latents_only"]
    assert 0.17 < latents["stored_bytes_ratio"] < 0.23  # Table 1b: 0.277 MB against 1.4 MB
    assert latents["image_tier_hit"] == 0.0
    assert latents["coalesced"] > 0
    assert latents["decodes_per_read"] == round(1 - latents["coalesced"] / latents["reads"], 4)
    assert latents["read_ms"]["p50"] >= 50.0  # decode + transfer at the least


def test_the_dual_format_cache_cuts_decodes(report: dict[str, Any]) -> None:
    setups = report["setups"]
    for name in ("fixed", "adaptive"):
        assert setups[name]["image_tier_hit"] > 0.3 and setups[name]["latent_tier_hit"] > 0.0
        assert setups[name]["decodes_per_read"] < 0.7 * setups["latents_only"]["decodes_per_read"]
        assert setups[name]["mean_ms"] < setups["latents_only"]["mean_ms"]
    # the latent tier covers more objects than images alone do: fewer reads go to the store
    assert setups["fixed"]["miss"] < setups["images_only"]["miss"]


def test_a_fetch_does_not_hold_the_gpu() -> None:
    world = build_world(ONE_NODE)
    times = [0.0, 0.0, 1.0, 2.0, 2.01, 2.02]
    record = replay(ONE_NODE, world, SETUPS["latents_only"], [1, 2, 2, 3, 2, 1], times).record
    # two misses at once: each fetch 140 ms, then the two decodes share the GPU one after the other
    assert record.outcome[:2] == [MISS, MISS]
    assert [round(latency, 3) for latency in record.latency[:2]] == [0.19, 0.23]
    # a latent hit costs decode + transfer
    assert record.outcome[2] == LATENT and round(record.latency[2], 3) == 0.05
    # while object 3 is being fetched, the GPU decodes latent hits without waiting for it
    assert record.outcome[3:] == [MISS, LATENT, LATENT]
    assert [round(latency, 3) for latency in record.latency[4:]] == [0.05, 0.08]
    assert round(record.queue_wait[5], 3) == 0.03


def test_a_burst_on_an_uncached_object_costs_one_decode(report: dict[str, Any]) -> None:
    assert report["burst"] == {"reads": 100, "decodes": 1, "coalesced": 99}
    assert burst_decodes(SMALL) == report["burst"]


def test_a_read_after_the_flight_ends_decodes_again() -> None:
    world = build_world(ONE_NODE)
    record = replay(ONE_NODE, world, SETUPS["latents_only"], [4, 4, 4], [0.0, 0.1, 1.0]).record
    assert record.outcome == [MISS, JOINED, LATENT]
    assert record.decoder == [0, -1, 0]
    assert round(record.latency[1], 3) == 0.09  # it waits for the rest of the first read's decode


def test_an_image_hit_is_answered_without_the_gpu() -> None:
    spec = ReadSimSpec(objects=10, reads=10, nodes=1, cache_fraction=1.0, promote_after=1, warmup=0.0)
    record = replay(spec, build_world(spec), SETUPS["fixed"], [5, 5, 5], [0.0, 1.0, 2.0]).record
    assert record.outcome == [MISS, LATENT, IMAGE]  # h = 1: one latent hit promotes
    assert record.decoder[2] == -1 and record.latency[2] == spec.transfer_s


def test_a_spilled_decode_is_written_back_to_its_owner() -> None:
    spec = ReadSimSpec(objects=200, reads=10, nodes=2, cache_fraction=1.0, theta=1.0, warmup=0.0)
    world = build_world(spec)
    a, b, c, fresh = [obj for obj in range(spec.objects) if world.owner[obj] == 0][:4]
    objects = [a, b, c, a, b, c, fresh, fresh]
    times = [0.0, 1.0, 2.0, 10.0, 10.0, 10.0, 10.0, 20.0]
    path = replay(spec, world, SETUPS["latents_only"], objects, times)
    record = path.record
    assert record.outcome[3:6] == [LATENT] * 3
    # a and b queue on the owner (depth 0, then 1 <= theta); c finds 2 there and decodes on node 1
    assert record.decoder[3:6] == [0, 0, 1] and record.spilled[3:6] == [False, False, True]
    assert round(record.latency[5], 3) == 0.05  # no wait behind a and b
    # a miss spilled to node 1 (owner 2 deep, node 1 1 deep): node 1 fetches and decodes it...
    assert record.outcome[6] == MISS and record.decoder[6] == 1 and record.spilled[6]
    # ...and the latent lands in the owner's cache, not in node 1's
    assert record.outcome[7] == LATENT and record.decoder[7] == 0
    assert path.nodes[1].cache.tier_of(world.keys[fresh]).value == "miss"
    assert path.nodes[1].cache.totals.reads == 0  # node 1 lent its GPU, never its cache


# 3000 objects read 30,000 times, tuned every 100 reads by steps of 0.02 (LatentBox 4.3)
TUNING_WORKLOAD: dict[str, Any] = {
    "objects": 3000,
    "reads": 30_000,
    "window": 100,
    "step": 0.02,
    "rate": 5.0,
    "seed": 1,
}


def test_a_costly_decode_moves_alpha_toward_images() -> None:
    # Zipf 1.11 over 3000 objects: a small hot set whose decodes cost 0.5 s each
    base = dict(TUNING_WORKLOAD)
    up = simulate_reads(ReadSimSpec(**base, t_decode_s=0.5, t_fetch_s=0.01), setups=("adaptive",))
    assert min(up["setups"]["adaptive"]["alpha_nodes"]) > 0.6


def test_coverage_worth_more_than_decodes_moves_alpha_toward_latents() -> None:
    # a broad catalogue (Zipf 0.8), fetches of 1 s, decodes of 1 ms: covering more objects pays
    base = dict(TUNING_WORKLOAD)
    broad = ReadSimSpec(**base, zipf=0.8, t_decode_s=0.001, t_fetch_s=1.0)
    down = simulate_reads(broad, setups=("adaptive",))["setups"]["adaptive"]
    assert max(down["alpha_nodes"]) < 0.3
    assert all(abs(windows[0] - 0.5) <= 0.02 for windows in down["alpha_trajectory"])  # from 0.5


def test_spillover_cuts_the_tail_of_a_loaded_node() -> None:
    loaded = ReadSimSpec(objects=3000, reads=20_000, rate=80.0, seed=1)
    with_spill = simulate_reads(loaded, setups=("latents_only",))["setups"]["latents_only"]
    unspilled = ReadSimSpec(objects=3000, reads=20_000, rate=80.0, seed=1, theta=float("inf"))
    hash_only = simulate_reads(unspilled, setups=("latents_only",))["setups"]["latents_only"]
    assert with_spill["spilled"] > 0 and hash_only["spilled"] == 0
    assert with_spill["read_ms"]["p99"] < 0.9 * hash_only["read_ms"]["p99"]
    assert with_spill["queue_wait_ms"]["p99"] < hash_only["queue_wait_ms"]["p99"]


@pytest.mark.parametrize("bad", [{"warmup": 1.0}, {"rate": 0.0}, {"nodes": 0}, {"t_decode_s": 0.0}])
def test_a_simulation_refuses_impossible_parameters(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        ReadSimSpec(**bad)


def test_an_unknown_setup_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown set-ups"):
        simulate_reads(ReadSimSpec(objects=10, reads=10), setups=("mixed",))
