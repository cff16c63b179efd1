"""The platform's per-job cost from a replay's measured stages (bench.sim.platform): what is charged,
how a worker runs it beside its batch, and what `bench simulate` says when it was or was not modelled."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bench.run.compare import NO_VANILLA
from bench.run.costs import StepCosts
from bench.run.options import PlatformHost, SimulateOptions, WorkloadOptions
from bench.run.profiles import build_profile
from bench.sim.config import SimConfig
from bench.sim.platform import (
    DEVICE_STAGES,
    GPU_ROLES,
    NOT_COST,
    PlatformCharge,
    load_platform_costs,
    platform_costs,
)
from bench.sim.pools import Worker
from bench.sim.runner import simulate_main
from bench.sim.simulate import run_simulation
from bench.sim.stack_lookup import stack_embeddings
from bench.workload.trace import ArrivalSpec, build_workload, load_prompts
from core.settings import Settings
from core.vocabulary import MonitorMode, Role

FIXTURE = Path(__file__).parent / "data" / "replay-stages.json"
LAB_TRACE = Path("bench/results/lab/trace/prompts.txt")  # a lab trace the repository holds
OLD_REPLAY = Path("bench/results/replay/lab-seed151-default-vanilla.json")  # recorded before the stages


def _replay() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(FIXTURE.read_text(encoding="utf-8"))
    return data


def _per_request(
    stages: dict[str, dict[str, dict[str, Any]]], names: tuple[str, ...], requests: int
) -> float:
    """The stages `names` of every route, in milliseconds per request."""
    total = sum(
        float(s["total_s"]) * 1000.0
        for by_stage in stages.values()
        for n, s in by_stage.items()
        if n in names
    )
    return total / requests


def test_a_shared_hosts_charges_account_for_every_process_cpu() -> None:
    """On a shared host the worker stages are converted into the workers' CPU: a request's charged
    platform and device work add up to the GPU workers' measured CPU, every other role's CPU is charged
    to each job, and waiting is no cost."""
    replay = _replay()
    costs = platform_costs(replay, host=PlatformHost.SHARED, source="fixture")
    assert costs is not None and costs.vanilla is not None
    for run, stages, cpu in (
        (costs.configured, replay["stages"], replay["cpu_ms_per_request"]),
        (costs.vanilla, replay["vanilla_stages"], replay["vanilla_cpu_ms_per_request"]),
    ):
        jobs = {route: max(s["jobs"] for s in by_stage.values()) for route, by_stage in stages.items()}
        requests = sum(jobs.values())
        worker = (
            sum(jobs[r] * (run.platform_ms[r] - run.other_ms + run.device_ms[r]) for r in jobs) / requests
        )
        assert worker == pytest.approx(sum(cpu[role] for role in GPU_ROLES))
        assert run.other_ms == pytest.approx(cpu["total"] - sum(cpu[role] for role in GPU_ROLES))
    waited = copy.deepcopy(replay)
    for by_stage in waited["stages"].values():
        for name in (*NOT_COST, "admission"):  # waiting, and the admit process's (charged by its role)
            by_stage[name]["total_s"] *= 3
    assert platform_costs(waited, host=PlatformHost.SHARED, source="fixture") == costs
    other = copy.deepcopy(replay)
    other["stages"]["heavy"] = {"complete": {"median_ms": 5.0, "total_s": 0.5, "jobs": 100}}
    other["stages"]["miss"]["defrost"] = {"median_ms": 5.0, "total_s": 0.5, "jobs": 100}
    listed = platform_costs(other, host=PlatformHost.SHARED, source="fixture")
    assert listed is not None and listed.configured.uncharged == ("defrost", "route heavy")
    assert set(listed.configured.platform_ms) == {"hit", "miss"}


def test_beside_a_gpu_the_worker_stages_are_charged_at_their_wall_time() -> None:
    replay = _replay()
    costs = platform_costs(replay, host=PlatformHost.BESIDE, source="fixture")
    assert costs is not None
    misses = replay["stages"]["miss"]
    platform = tuple(set(misses) - {*DEVICE_STAGES, "queue", "admission"})  # the worker's, on the worker
    expected = _per_request({"miss": misses}, platform, misses["complete"]["jobs"])
    assert costs.configured.platform_ms["miss"] == pytest.approx(expected)
    assert costs.configured.other_ms == 0.0 and costs.configured.cpu_per_wall == 1.0


def test_the_charges_keep_the_replays_ratio_of_platform_to_device_work() -> None:
    """Scaled on vanilla's device time: a vanilla job's charge over its simulated device time is what the
    replay measured; each route keeps its own cost; a replay with no vanilla run scales on its misses."""
    costs = platform_costs(_replay(), host=PlatformHost.SHARED, source="fixture")
    assert costs is not None and costs.vanilla is not None
    charge = costs.charge(sim_vanilla_device_ms=500.0)
    vanilla = costs.vanilla
    assert charge.vanilla_ms / 500.0 == pytest.approx(vanilla.platform_ms["miss"] / vanilla.device_ms["miss"])
    assert charge.hit_ms / charge.miss_ms == pytest.approx(
        costs.configured.platform_ms["hit"] / costs.configured.platform_ms["miss"]
    )
    alone = _replay()
    del alone["vanilla_stages"], alone["vanilla_cpu_ms_per_request"]
    lone = platform_costs(alone, host=PlatformHost.SHARED, source="fixture")
    assert lone is not None
    lone_charge = lone.charge(500.0)
    assert lone_charge.vanilla_ms == pytest.approx(lone_charge.miss_ms)
    assert "made no vanilla run" in str(lone_charge.as_json()["scaled_on"])


def test_a_shared_host_without_cpu_accounting_is_refused_and_old_replays_model_nothing() -> None:
    without = _replay()
    del without["cpu_ms_per_request"]
    with pytest.raises(ValueError, match="cpu_ms_per_request"):
        platform_costs(without, host=PlatformHost.SHARED, source="fixture")
    assert platform_costs(json.loads(OLD_REPLAY.read_text()), host=PlatformHost.SHARED, source="old") is None
    assert load_platform_costs(OLD_REPLAY, "configured", host=PlatformHost.SHARED) is None


def test_a_worker_runs_each_jobs_platform_work_alone_after_its_batched_steps() -> None:
    """Two jobs share their steps (a batch of two steps 1.5 times as long as one), then each does its
    platform work, which no batch shares: the worker ends when both are done, its time the batch's plus
    both jobs' platform work; without platform work it ends with the batch, as before."""

    def slowdown(n: int) -> float:
        return 1.5 if n == 2 else 1.0

    def run(platform_ms: float) -> tuple[float, float]:
        worker = Worker(0, Role.LARGE, capacity=2)
        for seq in (0, 1):
            worker.take(seq, 100.0, "large", {"large": 10.0}, platform_ms)
        now, ended = 0.0, 0.0
        while worker.jobs:
            done = worker.next_done(now, slowdown)
            assert done is not None
            worker.advance(done, slowdown)
            now = done
            if worker.finished():
                ended = now
        return ended * 1000.0, worker.device_ms

    assert run(0.0) == pytest.approx((150.0, 150.0))
    assert run(40.0) == pytest.approx((150.0 + 2 * 40.0, 150.0))


def _distinct_real_prompts(tmp_path: Path, count: int) -> Path:
    seen: list[str] = []
    for line in load_prompts(Path("bench/data/prompts/diffusiondb-first-5k.txt")).lines:
        if line.strip() and line not in seen:
            seen.append(line)
        if len(seen) == count:
            break
    path = tmp_path / "real.txt"
    path.write_text("\n".join(seen) + "\n", encoding="utf-8")
    return path


def test_with_no_hits_the_simulated_speedup_is_the_replays_cpu_ratio(
    tmp_path: Path, bench_settings: Settings
) -> None:
    """On a shared host a saturated stack serves in inverse proportion to its CPU per request. With no
    hit (real prompts under the lab's default) and the configured misses' model calls vanilla's (the
    same stages, on cores as busy), the simulated speedup over vanilla is the replay's CPU ratio,
    vanilla's over the configured run's, where the steps alone would predict vanilla's throughput."""
    replay = _replay()
    stages = replay["vanilla_stages"]["miss"] | {"cache_fill": replay["stages"]["miss"]["cache_fill"]}
    replay["stages"] = {"miss": stages}  # every request a miss that also fills the cache
    vanilla_cpu = replay["vanilla_cpu_ms_per_request"]
    worker_stages = tuple(set(stages) - {"queue", "admission"})
    vanilla_wall = _per_request(replay["vanilla_stages"], worker_stages, replay["requests"])
    wall = _per_request(replay["stages"], worker_stages, replay["requests"])
    cpu_per_wall = sum(vanilla_cpu[role] for role in GPU_ROLES) / vanilla_wall
    cpu = vanilla_cpu | {"large": cpu_per_wall * wall, "small": 0.0}
    cpu["postgres"] += 9.0  # the cache's rows, written on every miss
    replay["cpu_ms_per_request"] = cpu | {"total": sum(ms for role, ms in cpu.items() if role != "total")}
    costs = platform_costs(replay, host=PlatformHost.SHARED, source="fixture")
    assert costs is not None and costs.vanilla is not None
    assert costs.configured.device_ms["miss"] == pytest.approx(costs.vanilla.device_ms["miss"])

    workload = build_workload(
        load_prompts(_distinct_real_prompts(tmp_path, 120)), ArrivalSpec(concurrency=16)
    )
    profile = build_profile("configured", bench_settings)
    config = SimConfig(
        profile=profile, costs=StepCosts(), cache_bytes=10**12, large_workers=2, small_workers=0
    )
    embeddings = stack_embeddings(bench_settings, workload, [profile], None)
    vanilla = replace(config, profile=build_profile("vanilla", bench_settings), cache_bytes=0)
    device_ms = run_simulation(workload, vanilla, settings=bench_settings, embeddings=None).device_ms_per_job
    assert device_ms is not None
    charged = replace(config, platform=costs.charge(device_ms))
    report = run_simulation(workload, charged, settings=bench_settings, embeddings=embeddings).report
    assert report.hit_rate == 0.0
    assert report.throughput_rps is not None and report.vanilla_throughput_rps is not None
    ratio = vanilla_cpu["total"] / replay["cpu_ms_per_request"]["total"]
    assert report.throughput_rps / report.vanilla_throughput_rps == pytest.approx(ratio, rel=0.02)
    plain = run_simulation(workload, config, settings=bench_settings, embeddings=embeddings).report
    assert plain.throughput_rps == pytest.approx(plain.vanilla_throughput_rps, rel=0.02)  # steps alone: 1.0x


def _compared(tmp_path: Path, settings: Settings, replay: dict[str, Any]) -> Path:
    """The replay with the `stack` record a simulation of 1 large and 1 small worker, the pool monitor in
    throughput mode, runs (bench.live.stack)."""
    monitor = {"enabled": True, "mode": "throughput", "period_s": 60, "cohost": settings.cohosting}
    profile = build_profile("configured", settings).describe()
    timeline = [{"t": 0, "submitted": 0, "large": 1, "small": 1, "mode": None}]
    path = tmp_path / "replay.json"
    stack = {"monitor": monitor, "profile": profile, "steps": None, "timeline": timeline}
    path.write_text(json.dumps(replay | {"stack": stack}), encoding="utf-8")
    return path


def _simulate(settings: Settings, replay: Path, out: Path, **changes: Any) -> int:
    options = SimulateOptions(
        workload=WorkloadOptions(trace=LAB_TRACE, concurrency=16, limit=60),
        profiles=("configured",),
        large_workers=1,
        small_workers=1,
        monitor=MonitorMode.THROUGHPUT,
        compare=replay,
        json_path=out,
        progress=False,
        **changes,
    )
    return simulate_main(settings, options)


def test_compare_charges_the_replays_stages_and_says_what_it_did_not_check(
    tmp_path: Path, bench_settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "sim.json"
    _simulate(bench_settings, _compared(tmp_path, bench_settings, _replay()), out, no_throughput=True)
    simulated = json.loads(out.read_text())
    assert simulated["platform"]["modelled"] and simulated["platform"]["scaled_on"] == "the vanilla run's"
    charged = simulated["platform"]["charged_ms"]
    assert charged["miss"] > charged["vanilla"] > 0  # the fixture's misses fill the cache
    assert simulated["comparison"]["not_checked"] == ["speedup"]
    printed = capsys.readouterr().out
    assert "speedup NOT CHECKED" in printed and "platform cost (configured): hit" in printed
    alone = SimulateOptions(
        workload=WorkloadOptions(trace=LAB_TRACE), profiles=("configured",), no_throughput=True
    )
    with pytest.raises(ValueError, match="--no-throughput"):
        simulate_main(bench_settings, alone)


def test_compare_with_an_old_replay_models_no_platform_cost_and_fails_an_unmade_speedup(
    tmp_path: Path, bench_settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    """A replay from before the stages, made without --vanilla: the simulation runs on its steps alone
    and says so, and the speedup check it cannot make fails, saying why."""
    old = {k: v for k, v in _replay().items() if not k.startswith(("stages", "vanilla_", "cpu_", "device_"))}
    out = tmp_path / "sim.json"
    status = _simulate(bench_settings, _compared(tmp_path, bench_settings, old), out)
    assert status == 1
    simulated = json.loads(out.read_text())
    assert simulated["platform"]["modelled"] is False and "has no `stages`" in simulated["platform"]["why"]
    speedup = simulated["comparison"]["checks"]["speedup"]
    assert speedup["ok"] is False and speedup["checked"] and speedup["note"] == NO_VANILLA
    assert "NOT MODELLED" in capsys.readouterr().out
    with pytest.raises(ValueError, match="no `stages`"):
        _simulate(bench_settings, _compared(tmp_path, bench_settings, old), out, platform_costs=OLD_REPLAY)


def test_platform_charge_picks_the_route() -> None:
    charge = PlatformCharge(hit_ms=1.0, miss_ms=2.0, vanilla_ms=3.0)
    assert [charge.job_ms(hit=True, vanilla=False), charge.job_ms(hit=False, vanilla=False)] == [1.0, 2.0]
    assert charge.job_ms(hit=True, vanilla=True) == 3.0
