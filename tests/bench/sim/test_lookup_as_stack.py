"""The simulator looks every trace up as the stack does: the stack's embedder and lookup mode, whatever
the trace, taken from a replay's `embedder` record when comparing with one."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from bench.run.costs import load_costs
from bench.run.options import workload_options
from bench.run.profiles import build_profile
from bench.sim.config import SimConfig
from bench.sim.simulate import run_simulation
from bench.sim.stack_lookup import stack_embeddings, stack_lookup
from bench.workload.trace import Request, Workload
from core.prompt_key import normalised
from core.settings import Settings
from core.vocabulary import LAB_ATTRIBUTES, LookupMode

REAL = Path("bench/data/prompts/diffusiondb-first-5k.txt")
ARRIVALS = Path("bench/data/arrivals/azure-shaped-1to8qps.csv")  # docs/results/throughput.md's real runs
COSTS = Path("bench/results/runtime/batch-lab-large.json")  # the lab's measured step costs


def _real_workload(limit: int) -> Workload:
    """The real prompts as docs/results/throughput.md replays them: the arrivals file's order, closed
    loop, 16 clients."""
    return workload_options(REAL, ARRIVALS, "closed", "file-index", None, 16, 1.0, limit, 0).workload()


def test_real_prompts_under_the_labs_default_hit_only_their_identical_repeats(
    bench_settings: Settings,
) -> None:
    """200 DiffusionDB prompts under the lab's default (image lookups in the lab's attribute space): no
    prompt finds a cached image by similarity, as on the stack; the only hits are the words-for-word
    repeats admission's prompt key finds."""
    assert bench_settings.open_clip_model == LAB_ATTRIBUTES  # the lab's default, as the stack runs it
    workload = _real_workload(200)
    profile = build_profile("configured", bench_settings)
    embeddings = stack_embeddings(bench_settings, workload, [profile], None)
    assert embeddings.keys is not None and embeddings.describe["name"] == LAB_ATTRIBUTES
    config = SimConfig(
        profile=profile, costs=load_costs(COSTS), cache_bytes=10**12, large_workers=1, small_workers=1
    )
    result = run_simulation(workload, config, settings=bench_settings, embeddings=embeddings)
    hits = [outcome for outcome in result.outcomes if outcome.hit]
    assert result.counters is not None and result.counters.identical == len(hits)
    assert all(outcome.similarity == 1.0 for outcome in hits)
    keys = [normalised(workload.prompts.lines[request.prompt_idx]) for request in workload.requests]
    assert len(hits) <= len(keys) - len(set(keys))  # at most one hit per repeated request
    assert str(result.report.embedder["name"]) == LAB_ATTRIBUTES


def test_distinct_real_prompts_under_the_labs_default_never_hit(bench_settings: Settings) -> None:
    workload = _real_workload(200)
    seen: set[str] = set()
    distinct: list[Request] = []
    for request in workload.requests:
        key = normalised(workload.prompts.lines[request.prompt_idx])
        if key not in seen:
            seen.add(key)
            distinct.append(replace(request, seq=len(distinct)))
    workload = replace(workload, requests=tuple(distinct))
    profile = build_profile("configured", bench_settings)
    embeddings = stack_embeddings(bench_settings, workload, [profile], None)
    config = SimConfig(profile=profile, costs=load_costs(COSTS), cache_bytes=10**12)
    report = run_simulation(workload, config, settings=bench_settings, embeddings=embeddings).report
    assert report.requests == len(distinct) and report.hit_rate == 0.0


def test_a_replays_embedder_record_decides_the_lookup(bench_settings: Settings) -> None:
    """The replay's record wins over this process's settings: a text stack is simulated with text
    lookups under the lab's settings, a lab stack in the lab's space under text settings, and a stack
    whose embedder this process does not run is refused, naming both."""
    profiles = [build_profile("configured", bench_settings)]
    text = {"name": "minilm", "lookup": "text-to-text"}
    assert stack_lookup(bench_settings, profiles, text) == ("minilm", False, "the replay's embedder record")
    assert stack_lookup(bench_settings, profiles, None)[:2] == (LAB_ATTRIBUTES, True)
    # A replay from before the stack reported its lookup names its own text embedder beside image lookups
    # (bench/results/replay/diffusiondb-file-index-default-vanilla-16.json): the image side is the settings'.
    older = {"name": "minilm", "lookup": "text-to-image"}
    assert stack_lookup(bench_settings, profiles, older)[:2] == (LAB_ATTRIBUTES, True)
    text_settings = bench_settings.model_copy(
        update={"lookup_mode": LookupMode.TEXT_TO_TEXT, "open_clip_model": None}
    )
    workload = _real_workload(20)
    lab = {"name": LAB_ATTRIBUTES, "lookup": "text-to-image"}
    embedded = stack_embeddings(text_settings, workload, profiles, None, lab)
    assert embedded.keys is not None and embedded.describe["name"] == LAB_ATTRIBUTES
    with pytest.raises(ValueError, match=r"ViT-B-32.*minilm"):
        stack_embeddings(
            text_settings, workload, profiles, None, {"name": "ViT-B-32", "lookup": "text-to-text"}
        )
