"""The simulator on a 60-prompt slice with exact repeats, embedded with the real MiniLM."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bench.run.costs import StepCosts, load_costs
from bench.run.options import SimulateOptions, WorkloadOptions
from bench.run.profiles import build_profile
from bench.run.report import SWEEP_FIELDS
from bench.sim.config import SimConfig, SimResult
from bench.sim.pools import MonitorSnapshot, PoolTargets
from bench.sim.runner import _config_factory, simulate_main
from bench.sim.simulate import run_simulation
from bench.workload.embeddings import TraceEmbeddings
from bench.workload.trace import ArrivalKind, ArrivalSpec, Prompts, Workload, build_workload
from core.settings import Settings
from core.vocabulary import EvictionPolicyName

STATE = 1000  # bytes per latent state, so budgets read as counts of states
COSTS = StepCosts(state_bytes=STATE)  # default step costs (SD3.5-Large / SDXL, see bench.run.costs)
T = 50
UNBOUNDED = 10**12


def simulate(
    workload: Workload,
    embeddings: TraceEmbeddings | None,
    settings: Settings,
    profile: str,
    *,
    cache_bytes: int = UNBOUNDED,
    policy: EvictionPolicyName | None = None,
    monitor: object = None,
) -> SimResult:
    chosen = build_profile(profile, settings)
    if policy is not None:
        chosen = chosen.with_eviction(policy)
    return run_simulation(
        workload,
        SimConfig(profile=chosen, costs=COSTS, cache_bytes=cache_bytes),
        settings=settings,
        embeddings=embeddings,
        monitor=monitor,  # type: ignore[arg-type]
    )


def test_exact_repeats_hit_with_the_largest_k(
    repeat_workload: Workload, repeat_embeddings: TraceEmbeddings, bench_settings: Settings
) -> None:
    result = simulate(repeat_workload, repeat_embeddings, bench_settings, "nirvana")
    by_seq = {o.seq: o for o in result.outcomes}
    # NIRVANA caches misses only: a repeat of a miss finds itself (similarity 1.0, the top row).
    repeats_of_misses = [by_seq[seq] for seq in range(30, 60) if not by_seq[seq - 30].hit]
    assert result.report.hit_rate is not None and result.report.hit_rate > 0
    assert sum(o.hit for o in repeats_of_misses) >= len(repeats_of_misses) // 2  # the predictor may skip some
    assert all(o.k == 25 for o in repeats_of_misses if o.hit)
    assert dict(result.report.k_histogram) == dict(Counter(o.k for o in result.outcomes if o.hit))


def test_nirvana_compute_saved_is_its_k_histogram(
    repeat_workload: Workload, repeat_embeddings: TraceEmbeddings, bench_settings: Settings
) -> None:
    report = simulate(repeat_workload, repeat_embeddings, bench_settings, "nirvana").report
    skipped = sum(k * count for k, count in report.k_histogram.items())
    # Hits resume on the large model: each saves exactly k of T large-model steps.
    assert report.compute_saved == pytest.approx(skipped / (report.requests * T))


def test_modm_compute_saved_adds_the_small_models_discount(
    repeat_workload: Workload, repeat_embeddings: TraceEmbeddings, bench_settings: Settings
) -> None:
    report = simulate(repeat_workload, repeat_embeddings, bench_settings, "modm").report
    ratio = COSTS.small_step_ms / COSTS.large_step_ms
    skipped = sum(k * n for k, n in report.k_histogram.items()) / (report.requests * T)
    all_small = sum((k + (T - k) * (1 - ratio)) * n for k, n in report.k_histogram.items())
    all_small /= report.requests * T
    assert report.hit_rate is not None and report.hit_rate > 0
    assert report.compute_saved is not None
    assert skipped < report.compute_saved <= all_small + 1e-12
    assert report.embedder["lookup"].startswith("text-to-text, standing in for text-to-image")


def test_vanilla_has_no_hits_and_saves_nothing(repeat_workload: Workload, bench_settings: Settings) -> None:
    report = simulate(repeat_workload, None, bench_settings, "vanilla").report
    assert report.hit_rate == 0.0
    assert report.compute_saved == 0.0
    assert dict(report.k_histogram) == {}
    assert report.vanilla_throughput_rps == report.throughput_rps
    # Closed loop, 4 clients on 4 GPUs: nobody waits, every request takes one full generation.
    assert report.latency_ms.p99 == pytest.approx(COSTS.full_generation_ms(T))
    assert report.slo_violations.x2 == 0.0


def test_caching_beats_vanilla_throughput(
    repeat_workload: Workload, repeat_embeddings: TraceEmbeddings, bench_settings: Settings
) -> None:
    report = simulate(repeat_workload, repeat_embeddings, bench_settings, "nirvana").report
    assert report.throughput_rps is not None and report.vanilla_throughput_rps is not None
    assert report.throughput_rps > report.vanilla_throughput_rps


@pytest.mark.parametrize(("profile", "states"), [("nirvana", 5), ("modm", 1)])
def test_a_smaller_cache_never_hits_more(
    repeat_workload: Workload,
    repeat_embeddings: TraceEmbeddings,
    bench_settings: Settings,
    profile: str,
    states: int,
) -> None:
    # 30 prompts then the same 30: an entry is reused 30 requests after it is cached, so a cache
    # of a few entries loses the repeats that an unbounded one serves.
    entry = states * STATE + STATE  # captured states + the final latent
    runs = [
        simulate(repeat_workload, repeat_embeddings, bench_settings, profile, cache_bytes=size)
        for size in (2 * entry, 10 * entry, UNBOUNDED)
    ]
    rates = [run.report.hit_rate or 0.0 for run in runs]
    assert rates == sorted(rates)
    assert rates[0] < rates[-1]


def test_a_budget_below_one_entry_caches_nothing(
    repeat_workload: Workload, repeat_embeddings: TraceEmbeddings, bench_settings: Settings
) -> None:
    result = simulate(repeat_workload, repeat_embeddings, bench_settings, "nirvana", cache_bytes=STATE)
    assert result.report.hit_rate == 0.0
    assert result.counters is not None and result.counters.inserted == 0


def test_open_loop_overload_violates_the_slo(
    repeat_prompts: Prompts, repeat_embeddings: TraceEmbeddings, bench_settings: Settings
) -> None:
    light = build_workload(repeat_prompts, ArrivalSpec(kind=ArrivalKind.POISSON, rate_rps=0.05, seed=1))
    heavy = build_workload(repeat_prompts, ArrivalSpec(kind=ArrivalKind.POISSON, rate_rps=5.0, seed=1))
    calm = simulate(light, None, bench_settings, "vanilla").report
    flooded = simulate(heavy, None, bench_settings, "vanilla").report
    assert calm.slo_violations.x2 is not None and calm.slo_violations.x2 < 0.1
    assert flooded.slo_violations.x4 is not None and flooded.slo_violations.x4 > 0.3
    assert flooded.throughput_rps is not None and flooded.throughput_rps < 1.0  # 4 GPUs cap it near 0.55


@dataclass
class AllLarge:
    """A pool monitor that moves every GPU to the large model at its first call."""

    period_s: float = 10.0
    calls: int = 0

    def __call__(self, snapshot: MonitorSnapshot) -> PoolTargets | None:
        self.calls += 1
        return PoolTargets(large=snapshot.targets.total, small=0)


def test_a_pool_monitor_moves_workers_between_roles(
    repeat_workload: Workload, repeat_embeddings: TraceEmbeddings, bench_settings: Settings
) -> None:
    before = simulate(repeat_workload, repeat_embeddings, bench_settings, "modm")
    assert any("small" in o.denoiser_evaluations for o in before.outcomes)
    monitor = AllLarge()
    after = simulate(repeat_workload, repeat_embeddings, bench_settings, "modm", monitor=monitor)
    assert monitor.calls > 0
    settled_s = 2 * monitor.period_s + COSTS.full_generation_ms(T) / 1000  # the first call, and a job's end
    late = [o for o in after.outcomes if o.arrival_s > settled_s]
    assert late and all(set(o.denoiser_evaluations) == {"large"} for o in late)


def test_sweep_writes_points_with_cache_bytes_and_policy(
    repeat_trace: Path, repeat_embeddings: TraceEmbeddings, bench_settings: Settings, tmp_path: Path
) -> None:
    out = tmp_path / "sweep.json"
    status = simulate_main(
        bench_settings,
        SimulateOptions(
            workload=WorkloadOptions(trace=repeat_trace),
            profiles=("nirvana",),
            sweep=True,
            sizes=(2**20, 2**30),
            policies=("lcbfu", "fifo"),
            json_path=out,
            plots=tmp_path / "plots",
            progress=False,
        ),
    )
    assert status == 0
    points = json.loads(out.read_text())
    expected = [("lcbfu", 2**20), ("lcbfu", 2**30), ("fifo", 2**20), ("fifo", 2**30)]
    assert [(p["policy"], p["cache_bytes"]) for p in points] == expected
    assert all(set(p) == set(SWEEP_FIELDS) for p in points)
    assert (tmp_path / "plots" / "against-cache-size.png").stat().st_size > 0


def test_the_simulate_command_writes_the_contract(
    repeat_trace: Path,
    repeat_embeddings: TraceEmbeddings,
    bench_settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from core.settings import get_settings
    from reprise.cli import app

    monkeypatch.setenv("REPRISE_DATA_DIR", str(bench_settings.data_dir))  # the warm embedding cache
    get_settings.cache_clear()
    out = tmp_path / "report.json"
    try:
        args = ["bench", "simulate", "--trace", str(repeat_trace), "--profile", "nirvana", "--json", str(out)]
        result = CliRunner().invoke(app, [*args, "--no-progress", "--limit", "40"])
        bad = CliRunner().invoke(app, ["bench", "replay", "--order", "sideways"])
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["profile"] == "nirvana" and report["requests"] == 40
    assert report["embedder"]["model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert report["embedder"]["weights"].startswith("real")
    assert "| nirvana |" in result.output
    assert bad.exit_code == 2 and "--order 'sideways'" in bad.output


def test_large_workers_leave_hits_to_the_small_pool_when_told(
    repeat_workload: Workload, repeat_embeddings: TraceEmbeddings, bench_settings: Settings
) -> None:
    def hits_on_large(serves: bool) -> int:
        config = SimConfig(
            profile=build_profile("modm", bench_settings),
            costs=COSTS,
            cache_bytes=UNBOUNDED,
            large_serves_hits=serves,
        )
        result = run_simulation(
            repeat_workload, config, settings=bench_settings, embeddings=repeat_embeddings
        )
        return sum(1 for o in result.outcomes if o.hit and "large" in o.denoiser_evaluations)

    assert hits_on_large(True) > 0  # an idle large worker takes a waiting hit
    assert hits_on_large(False) == 0


def test_step_cache_costs_price_the_caching_profiles_and_vanilla_keeps_the_full_steps(
    bench_settings: Settings, tmp_path: Path
) -> None:
    """A stack running a step cache: its caching runs at the step cache's measured step (bench runtime
    under REPRISE_STEP_CACHE), vanilla (every cache off, the step cache too) at the full one."""
    full = tmp_path / "full.json"
    cached = tmp_path / "step-cache.json"
    full.write_text(json.dumps({"large_step_ms": 20.0, "small_step_ms": 12.0, "decode_ms": 9.0}))
    cached.write_text(json.dumps({"large_step_ms": 8.0, "small_step_ms": 10.0, "decode_ms": 9.0}))
    options = SimulateOptions(
        workload=WorkloadOptions(trace=tmp_path / "unused.txt"),
        profiles=("configured", "vanilla"),
        costs=full,
        step_cache_costs=cached,
        progress=False,
    )
    config = _config_factory(bench_settings, options, load_costs(full))
    configured = config(build_profile("configured", bench_settings), 2**20)
    vanilla = config(build_profile("vanilla", bench_settings), 2**20)
    assert (configured.costs.large_step_ms, configured.costs.small_step_ms) == (8.0, 10.0)
    assert (vanilla.costs.large_step_ms, vanilla.costs.small_step_ms) == (20.0, 12.0)
    plain = _config_factory(bench_settings, replace(options, step_cache_costs=None), load_costs(full))
    assert plain(build_profile("configured", bench_settings), 2**20).costs.large_step_ms == 20.0
