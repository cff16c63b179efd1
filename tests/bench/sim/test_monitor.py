"""The simulator runs the service's pool monitor: under a rising load (a slice of the shared Azure-shaped
arrivals), a monitored cluster keeps up where the same cluster with a fixed allocation saturates.

The slice: the first 300 arrivals of azure-shaped-1to8qps.csv, times x3, so the offered rate rises from
about 0.35 to 1.4 requests per second over six minutes on 4 simulated GPUs (SD3.5-Large and SDXL costs,
bench.run.costs); both runs start with every GPU on the large model, the allocation a quality-minded
operator (or MoDM's quality mode at low load) picks. The prompts: a quarter new ones, the rest repeats
of prompts seen a while earlier, so most requests hit (MoDM's regime). The monitor decides every 15 s
of simulated time: the slice is short, and the service's 60 s would leave it a handful of decisions.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import ARRIVALS_DIR
from bench.run.costs import StepCosts
from bench.run.options import SimulateOptions, WorkloadOptions
from bench.run.profiles import build_profile
from bench.sim.config import SimConfig, SimResult
from bench.sim.monitor import LoadWindow, MonitorSpec, load_windows
from bench.sim.runner import simulate_main
from bench.sim.simulate import run_simulation
from bench.workload.embeddings import TraceEmbeddings, configured_embedder, trace_embeddings
from bench.workload.trace import (
    DEFAULT_PROMPTS,
    ArrivalKind,
    ArrivalSpec,
    Workload,
    build_workload,
    load_prompts,
)
from core.settings import Settings
from core.vocabulary import MonitorMode

ARRIVALS = ARRIVALS_DIR / "azure-shaped-1to8qps.csv"
REQUESTS = 300
TIME_SCALE = 3.0
GPUS = 4
PERIOD_S = 15.0


@pytest.fixture(scope="module")
def rising_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every 4th request a new prompt (all new for the first 40), the others repeats of prompts first
    seen 21 to 40 new prompts earlier: long done, so a repeat can hit."""
    distinct: list[str] = []
    for line in load_prompts(DEFAULT_PROMPTS).lines:
        if line.strip() and line not in distinct:
            distinct.append(line)
        if len(distinct) == 120:
            break
    lines: list[str] = []
    seen: list[str] = []
    for i in range(REQUESTS):
        if i % 4 == 0 or len(seen) < 40:
            seen.append(distinct[len(seen)])
            lines.append(seen[-1])
        else:
            lines.append(seen[-40 + (i * 7) % 20])
    path = tmp_path_factory.mktemp("rising") / "trace.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def rising(rising_trace: Path) -> Workload:
    spec = ArrivalSpec(kind=ArrivalKind.FILE, path=ARRIVALS, time_scale=TIME_SCALE)
    return build_workload(load_prompts(rising_trace), spec, limit=REQUESTS)


@pytest.fixture(scope="module")
def rising_embeddings(bench_settings: Settings, rising: Workload) -> TraceEmbeddings:
    return trace_embeddings(
        rising.prompts,
        [r.prompt_idx for r in rising.requests],
        configured_embedder(bench_settings),
        cache_dir=bench_settings.data_dir / "bench" / "embeddings",
    )


def run(
    workload: Workload, embeddings: TraceEmbeddings, settings: Settings, mode: MonitorMode | None
) -> SimResult:
    config = SimConfig(
        profile=build_profile("modm", settings),
        costs=StepCosts(),
        cache_bytes=10**12,
        large_workers=GPUS,
        small_workers=0,
        monitor=MonitorSpec.from_settings(settings, mode=mode, period_s=PERIOD_S) if mode else None,
    )
    return run_simulation(
        workload, config, settings=settings, embeddings=embeddings, vanilla_throughput_rps=0.0
    )


def quarters(result: SimResult) -> list[LoadWindow]:
    arrivals = [o.arrival_s for o in result.outcomes]
    completions = [o.completed_s for o in result.outcomes if o.completed_s is not None]
    return load_windows(arrivals, completions, (max(arrivals) - min(arrivals)) / 4)


def test_the_monitor_follows_a_rising_load_that_saturates_a_fixed_allocation(
    rising: Workload, rising_embeddings: TraceEmbeddings, bench_settings: Settings
) -> None:
    fixed = run(rising, rising_embeddings, bench_settings, None)
    monitored = run(rising, rising_embeddings, bench_settings, MonitorMode.THROUGHPUT)
    before, after = quarters(fixed), quarters(monitored)
    assert before[-1].offered_rps > 3 * before[0].offered_rps  # the load rises
    # Light load: both keep up alike.
    assert after[0].served_rps == pytest.approx(before[0].served_rps, rel=0.1)
    # The peak: four large workers saturate; the monitored cluster, with workers moved to the small
    # model, still serves what arrives.
    assert before[-1].served_rps < 0.75 * before[-1].offered_rps
    assert after[-1].served_rps > 0.9 * after[-1].offered_rps
    assert after[-1].served_rps > 1.25 * before[-1].served_rps
    assert monitored.report.latency_ms.p99 is not None and fixed.report.latency_ms.p99 is not None
    assert monitored.report.latency_ms.p99 < fixed.report.latency_ms.p99 / 2
    # The allocation: all large at first, then small workers, always GPUS in all and a large one.
    timeline = monitored.allocation_timeline
    assert timeline is not None and (timeline[0].large, timeline[0].small) == (GPUS, 0)
    assert all(p.large + p.small == GPUS and p.large >= 1 for p in timeline)
    assert max(p.small for p in timeline) >= 1
    assert fixed.allocation_timeline is None


def test_the_simulate_json_gains_the_allocation_timeline(
    rising_trace: Path, rising_embeddings: TraceEmbeddings, bench_settings: Settings, tmp_path: Path
) -> None:
    out = tmp_path / "monitored.json"
    status = simulate_main(
        bench_settings,
        SimulateOptions(
            workload=WorkloadOptions(trace=rising_trace, arrivals=ARRIVALS, time_scale=TIME_SCALE, limit=120),
            profiles=("modm",),
            large_workers=GPUS,
            small_workers=0,
            monitor=MonitorMode.QUALITY,
            monitor_period_s=PERIOD_S,
            json_path=out,
            progress=False,
        ),
    )
    assert status == 0
    report = json.loads(out.read_text())
    timeline = report["allocation_timeline"]
    assert timeline[0] == {"t": 0.0, "large": GPUS, "small": 0}
    assert [point["t"] for point in timeline[1:4]] == [PERIOD_S, 2 * PERIOD_S, 3 * PERIOD_S]
    assert all(set(point) == {"t", "large", "small"} for point in timeline)
    assert report["requests"] == 120 and report["profile"] == "modm"
