"""What `reprise bench simulate` does, behind its option parsing.

It builds a workload from the options the replay takes too (bench.run.options, bench.workload.trace),
simulates each profile (bench.sim.simulate), possibly in parallel processes, over cache sizes, policies
or rates, reports with the replay's contract (bench.run.report), prints a markdown table on stdout and
what it ran on to stderr, writes --json and --plots when asked, and with --compare runs what a replay's
stack ran (bench.live.stack) and checks that the two agree (bench.run.compare).

It looks prompts up as the stack does, whatever the trace: with the embedder and lookup mode the replay
recorded (its `embedder`) under --compare, else the configured ones; on the lab's default (image lookups
in the lab's attribute space) a prompt outside the lab's world gets the stack's vector for it, which
matches no cached image (bench.workload.lab_space). With a replay's measured stages (--compare, or
--platform-costs) each job is charged its route's platform cost (bench.sim.platform); without them none
is, and the report says so.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping, Sequence
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
from bench.run.compare import Comparison, compare_reports
from bench.run.costs import StepCosts, load_costs
from bench.run.options import SimulateOptions, parse_list, parse_size
from bench.run.plots import TraceCurve
from bench.run.profiles import Profile, build_profile
from bench.run.progress import ProgressBar
from bench.run.report import BenchReport, SweepPoint, markdown_table
from bench.sim.autoscale import AutoscalerSpec, fleet_summary
from bench.sim.cascade import CascadeSpec, cascade_for
from bench.sim.config import SimConfig, SimResult
from bench.sim.lookup import simulated_table
from bench.sim.monitor import MonitorSpec
from bench.sim.platform import (
    NOT_MODELLED,
    PlatformCharge,
    PlatformCosts,
    load_platform_costs,
    platform_costs,
)
from bench.sim.simulate import run_simulation
from bench.workload.embeddings import TraceEmbeddings, configured_embedder, trace_embeddings
from bench.workload.trace import Workload
from core.errors import ThresholdTableError
from core.settings import Settings
from core.vocabulary import LAB_ATTRIBUTES, MINILM_KINDS, EvictionPolicyName, HitPolicy, LookupMode

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


RECORDED = "the replay's embedder record"


def _stack_lookup(
    settings: Settings, profiles: Sequence[Profile], record: Mapping[str, Any] | None
) -> tuple[str | None, bool, str]:
    """The embedder the stack looked prompts up with, whether its lookups were text-to-image, and
    whence: the replay's `embedder` record where there is one (its name and lookup), else this
    process's settings and the caching profiles' lookup mode."""
    caching = [profile for profile in profiles if profile.caches]
    images = bool(caching) and all(profile.lookup is LookupMode.TEXT_TO_IMAGE for profile in caching)
    if record and record.get("name"):
        lookup = str(record.get("lookup") or "")
        images = lookup.startswith("text-to-image") if lookup else images
        name = str(record["name"])
        if not (images and name in {kind.value for kind in MINILM_KINDS} | {"minilm"}):
            return name, images, RECORDED
        # A replay from before the stack reported its lookup names the replay process's text embedder
        # (bench.live.stack.StackWatch.embedder), which embeds no image: the image side is the settings'.
        return settings.open_clip_model, images, "the configured settings (the replay names a text embedder)"
    return settings.open_clip_model if images else None, images, "the configured settings"


def _outside_lab_space(profiles: Sequence[Profile], k_table: str | None) -> list[str]:
    """The caching profiles whose threshold table cannot serve lookups in the lab's attribute space
    (a paper's CLIP-scale table, e.g. MoDM's modm-t2i: jobs.policies.k_selection refuses it there), each
    with the reason."""
    refused = []
    for profile in (p for p in profiles if p.caches):
        try:
            simulated_table(profile, k_table, lab_space=True)
        except ThresholdTableError as error:
            refused.append(f"profile {profile.name}: {error}")
    return refused


def _embeddings(
    settings: Settings,
    workload: Workload,
    profiles: Sequence[Profile],
    quality_profile: Path | None,
    record: Mapping[str, Any] | None = None,
    k_table: str | None = None,
) -> TraceEmbeddings:
    """The trace's vectors, as the stack would look its prompts up (`_stack_lookup`): in the lab's
    attribute space when the stack looked images up there (the lab's default), whatever the trace, each
    image read as the profile the quality model reads (`quality_profile`, else the shipped one) read its
    images (bench.workload.lab_space; a prompt outside the lab's world matches no image there), else the
    configured text embedder's."""
    name, images, whence = _stack_lookup(settings, profiles, record)
    lab_space = images and name is not None and name.split(" ")[0] == LAB_ATTRIBUTES
    refused = _outside_lab_space(profiles, k_table) if lab_space else []
    if refused:
        _note(
            "image lookups in the lab's attribute space, but "
            + "; ".join(refused)
            + ": the stack would refuse it there, so text-to-text stands in (one set of vectors serves "
            "every profile of the run)"
        )
    if lab_space and not refused:
        from bench.workload.lab_space import lab_space_embeddings, readings_of

        profiled = quality_profile or shipped_profile(HitPolicy.REFINE, True, LookupMode.TEXT_TO_IMAGE)
        shown, readings = QualityModel.from_profile(profiled).fresh, readings_of(profiled)
        read = f"as asked at {shown:.3f}"
        if readings:
            read = f"as one of the {len(readings)} readings of {profiled.name}"
        lines = list(workload.prompts.lines)
        world = "lab trace" if is_lab_trace(lines) else "a trace with prompts outside the lab's world"
        _note(
            f"{world}, image lookups ({whence}): the lab's attribute space, each image read {read}"
            + ("" if world == "lab trace" else "; a prompt outside the world matches no cached image")
        )
        indices = [r.prompt_idx for r in workload.requests]
        return lab_space_embeddings(
            workload.prompts, indices, shown=shown, dim=settings.image_embedding_dim, readings=readings
        )
    embedder = configured_embedder(settings)
    recorded = whence == RECORDED
    if recorded and not images and name is not None and name.split(":")[0] != embedder.name:
        raise ValueError(
            f"--compare: the replay's stack looked prompts up with {name}, this process's settings embed "
            f"with {embedder.name}: run the simulation with the stack's embedder settings"
        )
    if images:
        _note(
            f"image lookups with {name} ({whence}): no images in simulation, so text-to-text with "
            f"{embedder.name} stands in (the report's embedder says so)"
        )
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
    if options.no_throughput and options.compare is None:
        raise ValueError("--no-throughput leaves a --compare check unmade: pass it with --compare")
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
    record = _replayed_embedder(options, profiles)
    embeddings = (
        _embeddings(settings, workload, profiles, options.quality_profile, record, options.k_table)
        if caching
        else None
    )
    measured = _platform_costs(options, profiles)

    # 2. Plan the runs, 3. run them, then report.
    factory = _config_factory(settings, options, costs, cascade, replayed)
    charges = _charges(settings, factory, workload, measured)
    planned = _plan(settings, options, _charged(factory, charges), profiles, policies, workload)
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
    platform = [_platform_record(run.config.profile.name, charges, measured) for run, _, _ in planned]
    for profile in profiles:  # with a replay on stdout beside the comparison, else a note
        line = f"platform cost ({profile.name}): {_platform_text(profile.name, charges, measured)}"
        print(line) if given else _note(line)
    comparisons = (
        _compare(rows, options.compare, throughput=not options.no_throughput)
        if options.compare is not None
        else None
    )
    if options.json_path is not None:
        _write_json(options.json_path, output, results, platform if given else None, comparisons)
    if comparisons is not None:
        return 0 if all(c is not None and c.ok for c in comparisons) else 1
    return 0


_Measured = dict[str, tuple[PlatformCosts | None, str]]
"""Per profile: the replay's platform costs (None: none measured) and where they were looked for."""


def _replayed_embedder(options: SimulateOptions, profiles: Sequence[Profile]) -> dict[str, Any] | None:
    """With --compare: the `embedder` record of the replay of the caching profiles (the first that has
    one; a replay's processes share one stack, so one embedder)."""
    if options.compare is None:
        return None
    measured = read_comparison(options.compare)
    for profile in (p for p in profiles if p.caches):
        match = next((m for m in measured if m.get("profile") == profile.name), None)
        if match is not None and match.get("embedder"):
            return dict(match["embedder"])
    return None


def _platform_costs(options: SimulateOptions, profiles: Sequence[Profile]) -> _Measured:
    """Each profile's measured platform costs: --platform-costs' replay (which must have stages), else
    the --compare replay's where it has them."""
    found: _Measured = {}
    if options.platform_costs is not None:
        if options.rates:
            raise ValueError(
                "--platform-costs scales the replay's costs on one workload's vanilla run: drop --rates"
            )
        for profile in profiles:
            costs = load_platform_costs(options.platform_costs, profile.name, host=options.platform_host)
            if costs is None:
                raise ValueError(
                    f"--platform-costs {options.platform_costs}: its report has no `stages` (a replay "
                    "from before the stages were recorded): nothing to charge"
                )
            found[profile.name] = (costs, str(options.platform_costs))
        return found
    if options.compare is None:
        return {p.name: (None, "no replay given (--compare or --platform-costs)") for p in profiles}
    measured = read_comparison(options.compare)
    for profile in profiles:
        match = next((m for m in measured if m.get("profile") == profile.name), None)
        source = f"{options.compare} ({profile.name})"
        costs = platform_costs(match, host=options.platform_host, source=source) if match else None
        found[profile.name] = (costs, source if costs is not None else f"{source} has no `stages`")
    return found


def _charges(
    settings: Settings, config: _ConfigFor, workload: Workload, measured: _Measured
) -> dict[str, PlatformCharge]:
    """Each profile's per-job charges in the simulation's milliseconds, scaled on a vanilla run of the
    workload without platform work (bench.sim.platform: its device time per job)."""
    if not any(costs is not None for costs, _ in measured.values()):
        return {}
    vanilla = run_simulation(
        workload, config(build_profile("vanilla", settings), 0), settings=settings, embeddings=None
    )
    device_ms = vanilla.device_ms_per_job
    if not device_ms:
        raise ValueError("the vanilla simulation ran no job: no device time to scale the platform costs by")
    charges = {name: costs.charge(device_ms) for name, (costs, _) in measured.items() if costs is not None}
    for name, charge in charges.items():
        _note(
            f"platform ({name}): a hit {charge.hit_ms:.1f} ms, a miss {charge.miss_ms:.1f} ms, a vanilla "
            f"job {charge.vanilla_ms:.1f} ms on its worker beside its steps (replay's x {charge.scale:.3f})"
        )
    return charges


def _charged(config: _ConfigFor, charges: Mapping[str, PlatformCharge]) -> _ConfigFor:
    """The factory, each profile's runs (and the vanilla runs beside them) charged its costs. A vanilla
    run beside several profiles is charged the first's vanilla costs."""
    if not charges:
        return config
    first = next(iter(charges.values()))

    def charged(profile: Profile, cache_bytes: int) -> SimConfig:
        return replace(config(profile, cache_bytes), platform=charges.get(profile.name, first))

    return charged


def _platform_record(name: str, charges: Mapping[str, PlatformCharge], measured: _Measured) -> dict[str, Any]:
    """What the JSON says of a run's platform cost: the charges and their source, or why none."""
    if name in charges:
        return charges[name].as_json()
    if charges and name == "vanilla":
        return next(iter(charges.values())).as_json()
    return {**NOT_MODELLED, "why": measured.get(name, (None, "no replay given"))[1]}


def _platform_text(name: str, charges: Mapping[str, PlatformCharge], measured: _Measured) -> str:
    record = _platform_record(name, charges, measured)
    if not record["modelled"]:
        return f"NOT MODELLED ({record['why']}): each job costs its priced steps only"
    charged = record["charged_ms"]
    return (
        f"hit {charged['hit']:.1f} ms, miss {charged['miss']:.1f} ms, vanilla {charged['vanilla']:.1f} ms "
        f"a job beside its steps ({record['host']} host, from {record['source']}, "
        f"scaled on {record['scaled_on']})"
    )


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


def _compare(
    rows: Sequence[BenchReport | SweepPoint], measured_path: Path, *, throughput: bool
) -> list[Comparison | None]:
    """Each row checked against its profile's replay (None where the replay has none: a failure);
    `throughput` False leaves the speedup unchecked, and the verdict says so."""
    measured = read_comparison(measured_path)
    comparisons: list[Comparison | None] = []
    for row in rows:
        report = row.report if isinstance(row, SweepPoint) else row
        match = next((m for m in measured if m.get("profile") == report.profile), None)
        if match is None:
            _note(f"compare: no measured report of profile {report.profile} in {measured_path}")
            comparisons.append(None)
            continue
        comparison = compare_reports(report, match, throughput=throughput)
        print(f"\nsimulated vs measured ({report.profile}):\n{comparison.describe()}")
        comparisons.append(comparison)
    return comparisons
