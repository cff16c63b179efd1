"""What `reprise bench simulate` does, behind its option parsing.

It builds a workload from the options the replay takes too (bench.run.options, bench.workload.trace),
simulates each profile (bench.sim.simulate), possibly in parallel processes, over cache sizes, policies
or rates, reports with the replay's contract (bench.run.report), prints a markdown table on stdout and
what it ran on to stderr, writes --json and --plots when asked, and with --compare runs what a replay's
stack ran (bench.live.stack) and checks that the two agree (bench.run.compare): bench.sim.compare_replay.

It looks prompts up as the stack does, whatever the trace (bench.sim.stack_lookup). With a replay's
measured stages (--compare, or --platform-costs) each job is charged its route's platform cost
(bench.sim.platform_charges); without them none is, and the report says so.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench.live.stack import ScheduledAllocation
from bench.run import plots
from bench.run.compare import Comparison
from bench.run.costs import StepCosts, load_costs
from bench.run.options import SimulateOptions, parse_list, parse_size
from bench.run.plots import TraceCurve
from bench.run.profiles import Profile, build_profile
from bench.run.progress import ProgressBar
from bench.run.report import BenchReport, SweepPoint, markdown_table
from bench.sim.autoscale import AutoscalerSpec, fleet_summary
from bench.sim.cascade import CascadeSpec, cascade_for
from bench.sim.compare_replay import compare_with_replay, replayed_schedules
from bench.sim.config import ConfigFor, SimConfig, SimResult
from bench.sim.monitor import MonitorSpec
from bench.sim.platform_charges import (
    charged,
    measured_costs,
    platform_charges,
    platform_record,
    platform_text,
)
from bench.sim.simulate import run_simulation
from bench.sim.stack_lookup import replayed_embedder, stack_embeddings
from bench.workload.embeddings import TraceEmbeddings
from bench.workload.trace import Workload
from core.settings import Settings
from core.vocabulary import EvictionPolicyName

DEFAULT_SWEEP_SIZES = "16MiB,64MiB,256MiB,1GiB,4GiB"
"""Budgets around the bytes the 5k trace would cache whole (~4 GiB of NIRVANA entries at the
default 277 KB per latent state), so each profile goes from a tiny cache to an unbounded one
(NIRVANA Table 3 sweeps 1 GB to 1000 GB over 2M prompts; MoDM Fig. 9, 1k to 100k images)."""
ALL_POLICIES = tuple(policy.value for policy in EvictionPolicyName)
CASCADE_PROFILES = (
    "diffserve",
    "reprise",
)  # their runs (and vanilla's beside them) run at a DiffServe pair's costs


def _note(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


@dataclass(frozen=True, slots=True)
class _Run:
    """One simulation to run: a workload under a config, with the vanilla throughput it compares to."""

    workload: Workload
    config: SimConfig
    vanilla_rps: float | None


_WORKER_STATE: dict[str, Any] = {}


def _init_worker(settings: Settings, embeddings: TraceEmbeddings | None) -> None:
    _WORKER_STATE.update(settings=settings, embeddings=embeddings)


def _run_in_worker(run: _Run) -> SimResult:
    return run_simulation(
        run.workload,
        run.config,
        settings=_WORKER_STATE["settings"],
        embeddings=_WORKER_STATE["embeddings"],
        vanilla_throughput_rps=run.vanilla_rps,
    )


def _execute(
    runs: Sequence[_Run],
    *,
    settings: Settings,
    embeddings: TraceEmbeddings | None,
    jobs: int,
    progress: bool,
) -> list[SimResult]:
    """Run every simulation, in `jobs` processes when more than one; results in the runs' order.
    A single run shows its own progress bar, several share one bar counting runs."""
    if len(runs) == 1:
        run = runs[0]
        result = run_simulation(
            run.workload,
            run.config,
            settings=settings,
            embeddings=embeddings,
            vanilla_throughput_rps=run.vanilla_rps,
            show_progress=progress,
        )
        return [result]
    bar = ProgressBar(len(runs), label="simulations") if progress else None
    results: list[SimResult] = []
    if jobs <= 1:
        _init_worker(settings, embeddings)
        for run in runs:
            results.append(_run_in_worker(run))
            if bar is not None:
                bar.update(
                    len(results), note=f"{run.config.profile.name} {run.config.profile.eviction.value}"
                )
    else:
        with ProcessPoolExecutor(
            max_workers=jobs, initializer=_init_worker, initargs=(settings, embeddings)
        ) as pool:
            for result in pool.map(_run_in_worker, runs):
                results.append(result)
                if bar is not None:
                    bar.update(len(results))
    if bar is not None:
        bar.close()
    return results


def _step_costs(settings: Settings, options: SimulateOptions) -> tuple[StepCosts, CascadeSpec | None]:
    """The step costs every run is priced at (a cascade's pair's unless --costs, the batch slowdowns of
    --batch-table), and the cascade every profile runs beside, if any; both noted on stderr."""
    cascade = cascade_for(settings, options)  # with it, every profile runs at its pair's costs
    costs = (
        cascade.pair.costs() if cascade is not None and options.costs is None else load_costs(options.costs)
    )
    if options.batch_table is not None:  # how a batch's step slows down, measured on another run
        costs = replace(costs, batch_slowdown=load_costs(options.batch_table).batch_slowdown)
    if cascade is not None:  # the MILP chooses batch sizes up to max_batch where a table was measured
        cascade = replace(cascade, batch_slowdown=costs.batch_slowdown, max_batch=settings.max_batch)
    _note(
        f"costs: large {costs.large_step_ms:.1f} ms/step, small {costs.small_step_ms:.1f} ms/step, "
        f"decode {costs.decode_ms:.1f} ms ({costs.source})"
    )
    if costs.batch_slowdown and settings.max_batch > 1:
        table = ", ".join(f"{n}: {x:.2f}x" for n, x in costs.batch_slowdown)
        _note(f"batching: a worker runs up to {settings.max_batch} jobs, a step of n slower by ({table})")
    else:
        _note("batching: one job a worker (the costs carry no `bench runtime --batch` table, or max_batch 1)")
    return costs, cascade


def simulate_main(settings: Settings, options: SimulateOptions) -> int:
    """Run the simulations the options ask for; 0 on success, 1 when --compare disagrees.

    Plain: one report per profile. --sweep: every caching profile x policy x size. --rates: every
    profile at each Poisson rate. Each run is compared with a vanilla run of the same workload.
    --compare: each profile's run must be what the replay ran (bench.live.stack), or nothing runs.
    """
    # 1. Check the options and load what every run shares.
    if options.no_throughput and options.compare is None:
        raise ValueError("--no-throughput leaves a --compare check unmade: pass it with --compare")
    costs, cascade = _step_costs(settings, options)
    profiles = [build_profile(name, settings) for name in options.profiles]
    for profile in (p for p in profiles if p.name == "nirvana"):
        _note(f"nirvana: match predictor {'on' if profile.predictor else 'off (REPRISE_PREDICTOR_ENABLED)'}")
    policies = ALL_POLICIES if options.policies == ("all",) else options.policies
    for policy in policies:
        EvictionPolicyName(policy)  # a ValueError names an unknown policy before any work
    replayed = replayed_schedules(options, profiles, cohost=settings.cohosting)
    workload = options.workload.workload()
    caching = any(p.caches for p in profiles)
    record = replayed_embedder(options, profiles)
    embeddings = (
        stack_embeddings(settings, workload, profiles, options.quality_profile, record, options.k_table)
        if caching
        else None
    )
    measured = measured_costs(options, profiles)

    # 2. Plan the runs, 3. run them, then report.
    factory = _config_factory(settings, options, costs, cascade, replayed)
    charges = platform_charges(settings, factory, workload, measured)
    planned = _plan(settings, options, charged(factory, charges), profiles, policies, workload)
    results = _execute(
        [run for run, _, _ in planned],
        settings=settings,
        embeddings=embeddings,
        jobs=options.jobs,
        progress=options.progress,
    )
    output = _output(options, planned, results, costs)
    rows: Sequence[BenchReport | SweepPoint] = [output] if isinstance(output, BenchReport) else output
    print(markdown_table(rows))
    given = options.compare is not None or options.platform_costs is not None
    platform = [platform_record(run.config.profile.name, charges, measured) for run, _, _ in planned]
    for profile in profiles:  # with a replay on stdout beside the comparison, else a note
        line = f"platform cost ({profile.name}): {platform_text(profile.name, charges, measured)}"
        print(line) if given else _note(line)
    comparisons = (
        compare_with_replay(rows, options.compare, throughput=not options.no_throughput)
        if options.compare is not None
        else None
    )
    if options.json_path is not None:
        _write_json(options.json_path, output, results, platform if given else None, comparisons)
    if comparisons is not None:
        return 0 if all(c is not None and c.ok for c in comparisons) else 1
    return 0


def _step_cache_costs(options: SimulateOptions, costs: StepCosts) -> StepCosts | None:
    """The step costs of a stack whose runs reuse work inside the denoiser (REPRISE_STEP_CACHE): its
    steps at `bench runtime`'s mean over whole runs under it. A batch slows as the full runs' batch
    does (--costs' table), since a batched step calls the model on the rows of the members due a full
    call only (workers.runtime.step_cache); the step cache's own batch table, medians of steps of two
    costs, would price a batch of one at its cheap step. Only the caching profiles run these costs:
    vanilla turns every cache off, the step cache too."""
    if options.step_cache_costs is None:
        return None
    measured = load_costs(options.step_cache_costs)
    _note(
        f"step cache: caching profiles at large {measured.large_step_ms:.1f} ms/step, small "
        f"{measured.small_step_ms:.1f} ms/step ({measured.source}); vanilla at --costs"
    )
    return replace(measured, batch_slowdown=costs.batch_slowdown)


_Planned = tuple[_Run, int, str]
"""A run, its cache budget and its policy label (the sweep's columns)."""


def _config_factory(
    settings: Settings,
    options: SimulateOptions,
    costs: StepCosts,
    cascade: CascadeSpec | None = None,
    replayed: dict[str, tuple[ScheduledAllocation, ...]] | None = None,
) -> ConfigFor:
    """The deployment every run simulates, for a profile and a cache budget: `cascade` goes to the
    profiles that have one. With a replay to compare with (`replayed`), the allocation follows the
    stack's instead of a monitor of the simulator's."""

    step_cached = _step_cache_costs(options, costs)

    def config(profile: Profile, cache_bytes: int) -> SimConfig:
        return SimConfig(
            profile=profile,
            costs=step_cached if profile.caches and step_cached is not None else costs,
            cache_bytes=cache_bytes,
            large_workers=options.large_workers,
            small_workers=options.small_workers,
            maintenance_period_s=settings.beat_period_s,
            switch_s=options.switch_s,
            k_table=options.k_table,
            quality_profile=options.quality_profile,
            quality_from=options.quality_from,
            large_serves_hits=settings.large_serves_hits,
            monitor=MonitorSpec.from_settings(
                settings, mode=options.monitor, period_s=options.monitor_period_s
            )
            if options.monitor is not None and replayed is None
            else None,
            allocation_schedule=replayed.get(profile.name, ()) if replayed is not None else (),
            cascade=cascade if profile.cascade else None,
            slo_s=cascade.pair.slo_s if cascade is not None else None,  # every profile beside a cascade
            max_batch=settings.max_batch,
            autoscaler=AutoscalerSpec.parse(options.autoscale) if options.autoscale else None,
            cohost=settings.cohost,
        )

    return config


def _plan(
    settings: Settings,
    options: SimulateOptions,
    config: ConfigFor,
    profiles: Sequence[Profile],
    policies: Sequence[str],
    workload: Workload,
) -> list[_Planned]:
    """The runs the options ask for, each with the vanilla throughput of its workload (run here)."""

    def vanilla_rps(work: Workload) -> float | None:
        vanilla = config(build_profile("vanilla", settings), 0)
        return run_simulation(work, vanilla, settings=settings, embeddings=None).report.throughput_rps

    budget = options.cache_bytes if options.cache_bytes is not None else settings.cache_budget_bytes
    planned: list[_Planned] = []
    if options.rates:
        for rate in options.rates:
            work = options.workload.workload(rate=rate)
            baseline = vanilla_rps(work)
            for profile in profiles:
                label = profile.eviction.value if profile.caches else "none"
                planned.append((_Run(work, config(profile, budget), baseline), budget, label))
    elif options.sweep:
        baseline = vanilla_rps(workload)
        sizes = options.sizes or tuple(parse_size(s) for s in parse_list(DEFAULT_SWEEP_SIZES))
        for profile in (p for p in profiles if p.caches):
            for policy in policies or (profile.eviction.value,):
                variant = profile.with_eviction(EvictionPolicyName(policy))
                planned.extend(
                    (_Run(workload, config(variant, size), baseline), size, policy) for size in sizes
                )
    else:
        baseline = vanilla_rps(workload) if any(p.caches for p in profiles) else None
        planned.extend(
            (_Run(workload, config(p, budget), baseline), budget, p.eviction.value) for p in profiles
        )
    return planned


def _output(
    options: SimulateOptions, planned: Sequence[_Planned], results: Sequence[SimResult], costs: StepCosts
) -> BenchReport | list[BenchReport] | list[SweepPoint]:
    """What the runs report: sweep points for --rates and --sweep, else one report per profile;
    the figures too when --plots asks."""
    if options.rates or options.sweep:
        points = [
            SweepPoint(r.report, size, label) for r, (_, size, label) in zip(results, planned, strict=True)
        ]
        if options.plots is not None:
            figures = (
                [
                    plots.plot_against_rate(points, options.plots / "throughput-vs-rate.png"),
                    plots.plot_slo_against_rate(points, options.plots / "slo-vs-rate.png"),
                ]
                if options.rates
                else [plots.plot_against_cache(points, options.plots / "against-cache-size.png")]
            )
            _note(f"wrote {', '.join(str(figure) for figure in figures)}")
        return points
    reports = [r.report for r in results]
    for result in results if options.autoscale else ():
        _note_fleet(result)
    if options.plots is not None:
        curves = [TraceCurve(r.report.profile, r.outcomes, r.prices, costs.large_step_ms) for r in results]
        _note(f"wrote {plots.plot_over_trace(curves, options.plots / 'over-trace.png')}")
    return reports[0] if len(reports) == 1 else reports


def _note_fleet(result: SimResult) -> None:
    """The autoscaled fleet of a run: its range and its time-weighted mean."""
    ends = [o.completed_s for o in result.outcomes if o.completed_s is not None]
    mean, low, high = fleet_summary(result.allocation_timeline or (), max(ends, default=0.0))
    _note(f"autoscale {result.report.profile}: fleet {low} to {high} workers, {mean:.2f} on average")


def _write_json(
    path: Path,
    output: BenchReport | list[BenchReport] | list[SweepPoint],
    results: Sequence[SimResult],
    platform: Sequence[Mapping[str, Any]] | None,
    comparisons: Sequence[Comparison | None] | None,
) -> None:
    """The reports as JSON (bench.run.report's fields), each run's object gaining its allocation timeline
    when its pools moved, with a replay given `platform` (the platform cost charged, or why none was)
    and, with --compare, `comparison` (each check and what was not checked)."""
    items: list[BenchReport | SweepPoint] = [output] if isinstance(output, BenchReport) else list(output)
    payload = []
    for n, (item, result) in enumerate(zip(items, results, strict=True)):
        data = item.as_json()
        if result.allocation_timeline is not None:
            data["allocation_timeline"] = [point.as_json() for point in result.allocation_timeline]
        if platform is not None:
            data["platform"] = dict(platform[n])
        comparison = comparisons[n] if comparisons is not None else None
        if comparison is not None:
            data["comparison"] = comparison.as_json()
        payload.append(data)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(payload[0] if isinstance(output, BenchReport) else payload, indent=2)
    path.write_text(text + "\n", encoding="utf-8")
    _note(f"wrote {path}")
