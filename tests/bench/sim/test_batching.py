"""Step-level batching in the simulator: a worker runs up to max_batch jobs that share each step, each
step of n jobs slower by the runtime bench's measured factor (StepCosts.slowdown)."""

from __future__ import annotations

import pytest

from bench.run.costs import StepCosts, costs_from_runtime_json
from bench.run.profiles import build_profile
from bench.sim.config import SimConfig
from bench.sim.pools import Worker
from bench.sim.simulate import run_simulation
from bench.workload.embeddings import TraceEmbeddings
from bench.workload.trace import ArrivalSpec, Prompts, Workload, build_workload
from core.errors import CostsError
from core.settings import Settings
from core.vocabulary import HitPolicy, Role

# `reprise bench runtime --batch 1,2,4,8 --json` on the lab's large model (CPU): step ms by batch size
RUNTIME = {
    "large_step_ms": 20.0,
    "small_step_ms": 12.0,
    "decode_ms": 5.0,
    "batch": {"1": {"step_ms": 20.0}, "2": {"step_ms": 25.0}, "4": {"step_ms": 36.0}, "8": {"step_ms": 60.0}},
}


def test_the_slowdown_is_read_from_the_batch_table_and_interpolated() -> None:
    costs = costs_from_runtime_json(RUNTIME, source="test")
    assert costs.batch_slowdown == ((1, 1.0), (2, 1.25), (4, 1.8), (8, 3.0))
    assert costs.slowdown(1) == 1.0 and costs.slowdown(8) == 3.0
    assert costs.slowdown(3) == pytest.approx(1.525)  # between 2 and 4
    assert costs.slowdown(12) == pytest.approx(4.2)  # past 8, along the 4..8 segment
    assert StepCosts().slowdown(8) == 1.0  # no table: nothing measured
    with pytest.raises(CostsError, match="batch size 1"):
        costs_from_runtime_json({**RUNTIME, "batch": {"2": {"step_ms": 25.0}}}, source="test")


def test_jobs_sharing_a_worker_end_as_their_shared_steps_allow() -> None:
    slowdown = costs_from_runtime_json(RUNTIME, source="test").slowdown
    worker = Worker(0, Role.LARGE, capacity=4)
    worker.jobs = {1: 1000.0, 2: 500.0}
    assert worker.next_done(0.0, slowdown) == pytest.approx(0.5 * 1.25)  # two share: each step 1.25x
    worker.advance(0.625, slowdown)
    assert worker.finished() == [2] and worker.jobs[1] == pytest.approx(500.0)
    assert worker.next_done(0.625, slowdown) == pytest.approx(1.125)  # alone again: full speed
    worker.jobs.update({3: 10.0, 4: 10.0, 5: 10.0})
    assert not worker.has_slot(0.625)  # four jobs: full


def test_a_worker_hosting_two_models_steps_their_batches_in_turn() -> None:
    """A co-hosting small worker: its hits (small model, 5 ms a step) and its misses on the large model
    (10 ms a step) are two UNet calls a step, not one batch; 10 steps of each take 10 rounds of 15 ms."""
    slowdown = costs_from_runtime_json(RUNTIME, source="test").slowdown
    steps = {"large": 10.0, "small": 5.0}
    worker = Worker(0, Role.SMALL, capacity=4)
    worker.take(1, 100.0, "large", steps)
    worker.take(2, 50.0, "small", steps)
    assert worker.rates(slowdown) == {1: pytest.approx(10 / 15), 2: pytest.approx(5 / 15)}
    assert worker.next_done(0.0, slowdown) == pytest.approx(0.150)
    worker.take(3, 100.0, "large", steps)  # two misses share the large model's call: 1.25x its step
    assert worker.rates(slowdown)[1] == pytest.approx(10 / (1.25 * 10 + 5))
    worker.advance(0.150, slowdown)
    assert worker.finished() == [] and worker.models.keys() == {1, 2, 3}
    one_model = Worker(1, Role.LARGE, capacity=4)
    one_model.take(1, 100.0, "large", steps)
    one_model.take(2, 100.0, "large", steps)
    assert one_model.rates(slowdown) == {1: pytest.approx(1 / 1.25), 2: pytest.approx(1 / 1.25)}


@pytest.fixture(scope="module")
def all_misses(repeat_prompts: Prompts) -> Workload:
    """60 requests, 16 closed-loop clients, nothing cached (vanilla)."""
    return build_workload(repeat_prompts, ArrivalSpec(concurrency=16))


def _vanilla(workload: Workload, settings: Settings, costs: StepCosts, max_batch: int) -> float:
    config = SimConfig(
        profile=build_profile("vanilla", settings),
        costs=costs,
        cache_bytes=0,
        large_workers=1,
        small_workers=0,
        max_batch=max_batch,
    )
    throughput = run_simulation(workload, config, settings=settings, embeddings=None).report.throughput_rps
    assert throughput is not None
    return throughput


def test_a_batching_worker_serves_the_tables_images_per_second(
    all_misses: Workload, bench_settings: Settings
) -> None:
    costs = costs_from_runtime_json(RUNTIME, source="test")
    one = _vanilla(all_misses, bench_settings, costs, 1)
    eight = _vanilla(all_misses, bench_settings, costs, 8)
    # 16 clients keep 8 jobs on the worker: 8 jobs in 3x a job's time, but the first jobs start
    # together and the last drain with fewer partners, so a little under 8 / 3.
    assert 2.3 < eight / one <= 8 / 3 + 1e-9
    four = _vanilla(all_misses, bench_settings, costs, 4)
    assert one < four < eight
    # Without a batch table the simulator does not guess: one job a worker, whatever max_batch says.
    assert _vanilla(all_misses, bench_settings, StepCosts(large_step_ms=20.0, decode_ms=5.0), 8) == (
        pytest.approx(_vanilla(all_misses, bench_settings, StepCosts(large_step_ms=20.0, decode_ms=5.0), 1))
    )


def test_a_cohosting_small_worker_serves_misses_when_no_hit_waits(
    all_misses: Workload, repeat_embeddings: TraceEmbeddings, bench_settings: Settings
) -> None:
    """No room in the cache, so no hit: one model per worker leaves the small worker idle and serves
    what one large worker serves; co-hosting (Settings.cohost) serves what two large workers serve."""
    costs = costs_from_runtime_json(RUNTIME, source="test")
    settings = bench_settings.model_copy(update={"hit_policy": HitPolicy.RESUME})
    served: dict[bool, float] = {}
    for cohost in (False, True):
        config = SimConfig(
            profile=build_profile("configured", settings),
            costs=costs,
            cache_bytes=0,
            large_workers=1,
            small_workers=1,
            max_batch=8,
            cohost=cohost,
        )
        result = run_simulation(all_misses, config, settings=settings, embeddings=repeat_embeddings)
        assert not any(outcome.hit for outcome in result.outcomes)
        assert result.report.throughput_rps is not None
        served[cohost] = result.report.throughput_rps
        evaluations = {model for o in result.outcomes for model in o.denoiser_evaluations}
        assert evaluations == {costs.large_model or "large"}  # every miss on the large model
    one_large = _vanilla(all_misses, bench_settings, costs, 8)
    assert served[False] == pytest.approx(one_large, rel=0.05)
    assert served[True] > 1.5 * served[False]
