"""What `reprise bench simulate` does, behind its option parsing.

It builds a workload from the options the replay takes too (bench.run.options, bench.workload.trace),
simulates each profile (bench.sim.simulate), possibly in parallel processes, over cache sizes, policies
or rates, reports with the replay's contract (bench.run.report), prints a markdown table on stdout and
what it ran on to stderr, writes --json and --plots when asked, and with --compare runs what a replay's
stack ran (bench.live.stack) and checks that the two agree (bench.run.compare).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench.live.stack import (
    ScheduledAllocation,
    StackRecord,
    differences,
    read_comparison,
    timeline_text,
)
from bench.quality.model import QualityModel, is_lab_trace, shipped_profile
from bench.run import plots
from bench.run.compare import compare_reports
from bench.run.costs import StepCosts, load_costs
from bench.run.options import SimulateOptions, parse_list, parse_size
from bench.run.plots import TraceCurve
from bench.run.profiles import Profile, build_profile
from bench.run.progress import ProgressBar
from bench.run.report import BenchReport, SweepPoint, markdown_table, write_json
from bench.sim.autoscale import AutoscalerSpec, fleet_summary
from bench.sim.cascade import CascadeSpec, cascade_for
from bench.sim.config import SimConfig, SimResult
from bench.sim.monitor import MonitorSpec, write_simulation_json
from bench.sim.simulate import run_simulation
from bench.workload.embeddings import TraceEmbeddings, configured_embedder, trace_embeddings
from bench.workload.trace import Workload
from core.settings import Settings
from core.vocabulary import LAB_ATTRIBUTES, EvictionPolicyName, HitPolicy, LookupMode

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


def _embeddings(
    settings: Settings, workload: Workload, profiles: Sequence[Profile], quality_profile: Path | None
) -> TraceEmbeddings:
    """The trace's vectors: in the lab's attribute space when every caching profile looks images up
    there (the lab's default) on a lab trace, each image read as the profile the quality model reads
    (`quality_profile`, else the shipped one) read its images (bench.workload.lab_space), else the
    configured text embedder's."""
    caching = [profile for profile in profiles if profile.caches]
    images = all(profile.lookup is LookupMode.TEXT_TO_IMAGE for profile in caching)
    if images and settings.open_clip_model == LAB_ATTRIBUTES and is_lab_trace(list(workload.prompts.lines)):
        from bench.workload.lab_space import lab_space_embeddings, readings_of

        profiled = quality_profile or shipped_profile(HitPolicy.REFINE, True, LookupMode.TEXT_TO_IMAGE)
        shown, readings = QualityModel.from_profile(profiled).fresh, readings_of(profiled)
        read = f"as asked at {shown:.3f}"
        if readings:
            read = f"as one of the {len(readings)} readings of {profiled.name}"
        _note(f"lab trace, image lookups: the lab's attribute space, each image read {read}")
        indices = [r.prompt_idx for r in workload.requests]
        return lab_space_embeddings(
            workload.prompts, indices, shown=shown, dim=settings.image_embedding_dim, readings=readings
        )
    embedder = configured_embedder(settings)
    cache_dir = settings.data_dir / "bench" / "embeddings"
    _note(f"embedding {len(workload.requests)} prompts with {embedder.name} (cached in {cache_dir})")
    return trace_embeddings(
        workload.prompts, [r.prompt_idx for r in workload.requests], embedder, cache_dir=cache_dir
    )


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


def simulate_main(settings: Settings, options: SimulateOptions) -> int:
    """Run the simulations the options ask for; 0 on success, 1 when --compare disagrees.

    Plain: one report per profile. --sweep: every caching profile x policy x size. --rates: every
    profile at each Poisson rate. Each run is compared with a vanilla run of the same workload.
    --compare: each profile's run must be what the replay ran (bench.live.stack), or nothing runs.
    """
    # 1. Check the options and load what every run shares.
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
    profiles = [build_profile(name, settings) for name in options.profiles]
    for profile in (p for p in profiles if p.name == "nirvana"):
        _note(f"nirvana: match predictor {'on' if profile.predictor else 'off (REPRISE_PREDICTOR_ENABLED)'}")
    policies = ALL_POLICIES if options.policies == ("all",) else options.policies
    for policy in policies:
        EvictionPolicyName(policy)  # a ValueError names an unknown policy before any work
    replayed = _replayed_schedules(options, profiles, cohost=settings.cohosting)
    workload = options.workload.workload()
    caching = any(p.caches for p in profiles)
    embeddings = _embeddings(settings, workload, profiles, options.quality_profile) if caching else None

    # 2. Plan the runs, 3. run them, then report.
    planned = _plan(
        settings,
        options,
        _config_factory(settings, options, costs, cascade, replayed),
        profiles,
        policies,
        workload,
    )
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
    if options.json_path is not None:
        _write_json(options.json_path, output, results)
    if options.compare is not None:
        return _compare(rows, options.compare)
    return 0


_Planned = tuple[_Run, int, str]
"""A run, its cache budget and its policy label (the sweep's columns)."""
_ConfigFor = Callable[[Profile, int], SimConfig]


def _replayed_schedules(
    options: SimulateOptions, profiles: Sequence[Profile], *, cohost: bool
) -> dict[str, tuple[ScheduledAllocation, ...]] | None:
    """With --compare: each profile's allocation as its replay recorded it (bench.live.stack), after
    checking that the options simulate what the stack ran. ValueError names every difference."""
    if options.compare is None:
        return None
    if options.sweep or options.rates:
        raise ValueError("--compare checks one run per profile against its replay: drop --sweep and --rates")
    measured = read_comparison(options.compare)
    schedules: dict[str, tuple[ScheduledAllocation, ...]] = {}
    problems: list[str] = []
    followed = ""
    for profile in profiles:
        match = next((m for m in measured if m.get("profile") == profile.name), None)
        if match is None or match.get("stack") is None:
            problems.append(
                f"{options.compare} has no replay of profile {profile.name}"
                + (" with its `stack` record (replay again to record it)" if match is not None else "")
            )
            continue
        record = StackRecord.from_json(match["stack"])
        found = differences(
            record,
            profile=profile,
            large_workers=options.large_workers,
            small_workers=options.small_workers,
            monitor=options.monitor,
            cohost=cohost,
        )
        problems.extend(f"{profile.name}: {line}" for line in found)
        schedules[profile.name] = record.schedule()
        followed = f"{followed}\n  {profile.name}: {timeline_text(record.timeline)}"
    if problems:
        raise ValueError(
            "--compare: this simulation would not run what the replay ran:\n  " + "\n  ".join(problems)
        )
    _note(f"compare: the pools follow the replayed stack's:{followed}")
    return schedules


def _config_factory(
    settings: Settings,
    options: SimulateOptions,
    costs: StepCosts,
    cascade: CascadeSpec | None = None,
    replayed: dict[str, tuple[ScheduledAllocation, ...]] | None = None,
) -> _ConfigFor:
    """The deployment every run simulates, for a profile and a cache budget: `cascade` goes to the
    profiles that have one. With a replay to compare with (`replayed`), the allocation follows the
    stack's instead of a monitor of the simulator's."""

    def config(profile: Profile, cache_bytes: int) -> SimConfig:
        return SimConfig(
            profile=profile,
            costs=costs,
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
    config: _ConfigFor,
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
    path: Path, output: BenchReport | list[BenchReport] | list[SweepPoint], results: Sequence[SimResult]
) -> None:
    """The reports as JSON, with each run's allocation timeline when a pool monitor ran."""
    timelines = [r.allocation_timeline for r in results]
    if any(timeline is not None for timeline in timelines):
        write_simulation_json(path, output, timelines)
    else:
        write_json(path, output)
    _note(f"wrote {path}")


def _compare(rows: Sequence[BenchReport | SweepPoint], measured_path: Path) -> int:
    measured = read_comparison(measured_path)
    status = 0
    for row in rows:
        report = row.report if isinstance(row, SweepPoint) else row
        match = next((m for m in measured if m.get("profile") == report.profile), None)
        if match is None:
            _note(f"compare: no measured report of profile {report.profile} in {measured_path}")
            status = 1
            continue
        comparison = compare_reports(report, match)
        print(f"\nsimulated vs measured ({report.profile}):\n{comparison.describe()}")
        status = status or (0 if comparison.ok else 1)
    return status
