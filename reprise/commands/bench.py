"""`reprise bench ...`: benchmarks. Each command measures with real components and writes JSON."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import httpx
import typer

from core.settings import Settings, get_settings

if TYPE_CHECKING:
    from bench.sim.reads import ReadSimSpec

bench_app = typer.Typer(help="Benchmarks (runtime, cache, replay, simulate).", no_args_is_help=True)

# The workload options replay and simulate share: the same trace, arrivals and clients, so that a
# replay and its simulation describe the same requests.
TraceOpt = Annotated[
    Path | None, typer.Option("--trace", help="Prompts file, one per line (default: shared 5k).")
]
ArrivalsOpt = Annotated[Path | None, typer.Option("--arrivals", help="CSV of arrival_ms,prompt_idx.")]
ProcessOpt = Annotated[
    str | None, typer.Option("--process", help="closed, poisson or file (default: from options).")
]
OrderOpt = Annotated[
    str, typer.Option("--order", help="trace (keeps locality) or file-index (low locality).")
]
RateOpt = Annotated[float | None, typer.Option("--rate", min=0.0, help="Poisson arrivals per second.")]
ConcurrencyOpt = Annotated[int, typer.Option("--concurrency", min=1, help="Closed-loop clients.")]
TimeScaleOpt = Annotated[
    float, typer.Option("--time-scale", help="Multiply the arrivals file's times by this.")
]
LimitOpt = Annotated[int | None, typer.Option("--limit", min=0, help="Only the first N requests.")]
CostsOpt = Annotated[Path | None, typer.Option("--costs", help="`reprise bench runtime --json` output.")]
JsonOpt = Annotated[Path | None, typer.Option("--json", help="Write the report(s) to this JSON file.")]
PlotsOpt = Annotated[Path | None, typer.Option("--plots", help="Write PNG figures into this directory.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed of the Poisson arrivals.")]

QualitySampleOpt = Annotated[
    int,
    typer.Option(
        "--quality-sample",
        min=0,
        help="Judged hits audited: generated again on the stack with the cache off, for their quality drop.",
    ),
]

# Options of `simulate` alone: the simulated deployment, sweeps and the pool monitor.
ProfilesOpt = Annotated[
    str,
    typer.Option(
        "--profile",
        help="vanilla, nirvana, nirvana-womp, modm, configured, diffserve, reprise; a comma list.",
    ),
]
AllocatorOpt = Annotated[
    str,
    typer.Option(
        "--allocator",
        help="Cascade profiles (diffserve, reprise): diffserve (the MILP sets threshold and split every "
        "--monitor-period-s) or modm (REPRISE_CASCADE_THRESHOLD fixed, the split provisioned for the peak).",
    ),
]
CascadePairOpt = Annotated[
    str, typer.Option("--cascade-pair", help="DiffServe 4.1's latencies: sd15 (SD-Turbo/SD 1.5) or sdxl.")
]
CascadeProfileOpt = Annotated[
    Path | None,
    typer.Option(
        "--cascade-profile", help="`reprise cascade train --json` output (default: the lab's shipped)."
    ),
]
BatchTableOpt = Annotated[
    Path | None,
    typer.Option(
        "--batch-table",
        help="A `reprise bench runtime --batch --json` output: how much slower a step of n jobs is "
        "(default: the --costs file's table; none: one job a worker).",
    ),
]
StepCacheCostsOpt = Annotated[
    Path | None,
    typer.Option(
        "--step-cache-costs",
        help="A `reprise bench runtime --json` output measured under the stack's REPRISE_STEP_CACHE: the "
        "caching profiles' steps are priced at it, vanilla's (every cache off) at --costs.",
    ),
]
CacheBytesOpt = Annotated[
    str | None, typer.Option("--cache-bytes", help="Budget, e.g. 1GiB (default: settings).")
]
LargeWorkersOpt = Annotated[int, typer.Option("--large-workers", min=0, help="GPUs hosting the large model.")]
SmallWorkersOpt = Annotated[int, typer.Option("--small-workers", min=0, help="GPUs hosting the small model.")]
AutoscaleOpt = Annotated[
    str | None,
    typer.Option(
        "--autoscale",
        help="MIN:MAX GPU workers: KEDA's queue-depth autoscaler sets the fleet, the monitor its split "
        "(bench.sim.autoscale); --large-workers/--small-workers are the fleet at the start.",
    ),
]
SweepOpt = Annotated[
    bool, typer.Option("--sweep", help="Sweep cache sizes and policies (adds cache_bytes, policy).")
]
SizesOpt = Annotated[str | None, typer.Option("--sizes", help="Sweep budgets, e.g. 16MiB,256MiB,4GiB.")]
PoliciesOpt = Annotated[str | None, typer.Option("--policies", help="Sweep policies, a comma list, or all.")]
RatesOpt = Annotated[
    str | None, typer.Option("--rates", help="Poisson rates (per second) to sweep, a comma list.")
]
KTableOpt = Annotated[str | None, typer.Option("--k-table", help="Threshold table for the simulated lookup.")]
QualityProfileOpt = Annotated[
    Path | None,
    typer.Option("--quality-profile", help="`reprise profile k --json` output (default: the lab's shipped)."),
]
QualityFromOpt = Annotated[
    Path | None,
    typer.Option(
        "--quality-from",
        help="A `bench replay --json` output: its audited drops per (similarity bin, k) replace the "
        "profile's in bins of at least 16 hits (bench.quality.model).",
    ),
]
SwitchOpt = Annotated[
    float, typer.Option("--switch-s", min=0.0, help="Seconds a worker takes to change model.")
]
MonitorOpt = Annotated[
    str,
    typer.Option(
        "--monitor",
        help="MoDM's global monitor moving GPUs between the pools: off (fixed allocation), quality or "
        "throughput (MoDM 5.3). Adds allocation_timeline to the JSON.",
    ),
]
MonitorPeriodOpt = Annotated[
    float | None,
    typer.Option("--monitor-period-s", min=1.0, help="Seconds between decisions (default: settings, 60)."),
]
VideoFramesOpt = Annotated[
    int | None,
    typer.Option("--video-frames", min=1, max=128, help="Submit video jobs of this many frames (FlexCache)."),
]
CompareOpt = Annotated[Path | None, typer.Option("--compare", help="A replay's JSON to validate against.")]
NoThroughputOpt = Annotated[
    bool,
    typer.Option(
        "--no-throughput",
        help="With --compare: leave the speedup over vanilla unchecked (a replay without --vanilla cannot "
        "check it, and then fails); the report says it was not checked.",
    ),
]
PlatformCostsOpt = Annotated[
    Path | None,
    typer.Option(
        "--platform-costs",
        help="A `bench replay --json` output with `stages`: each job is charged its route's measured "
        "platform cost beside its steps (default: the --compare replay's, where it has stages).",
    ),
]
PlatformHostOpt = Annotated[
    str,
    typer.Option(
        "--platform-host",
        help="Where the replay's platform work ran: shared (every process on the model calls' cores, as "
        "on the 2-core CPU host of the repository's replays) or beside (cores beside the GPUs).",
    ),
]
JobsOpt = Annotated[int, typer.Option("--jobs", min=1, help="Simulations to run in parallel processes.")]
ProgressOpt = Annotated[bool, typer.Option("--progress/--no-progress", help="Progress bar on stderr.")]


@bench_app.command("runtime")
def runtime_command(
    json_path: Path | None = typer.Option(None, "--json", help="Also write the results to this JSON file."),
    repeats: int = typer.Option(3, min=1, help="Timed generations per model (after one warm-up)."),
    batch: str | None = typer.Option(None, "--batch", help="Step-level batch sizes, e.g. 1,2,4,8,16."),
    model: str = typer.Option("large", "--model", help="The model --batch runs: large or small."),
    operators: bool = typer.Option(
        False, "--operators", help="With --batch: a step's time by operator class (one more batch a size)."
    ),
) -> None:
    """Time the configured models per denoising step and per decode; codec ratio, entry and PNG bytes;
    with --batch, images per second of batches of each size and their exactness, and with --operators
    where a step's time goes."""
    from bench.run.options import guarded, parse_batch_model, parse_batch_sizes

    def main() -> int:
        from bench.run.runtime import format_table, measure_runtime  # torch loads only for this command

        sizes = parse_batch_sizes(batch) if batch is not None else []
        report = measure_runtime(
            get_settings(),
            repeats=repeats,
            batch_sizes=sizes,
            batch_role=parse_batch_model(model),
            operators=operators,
        )
        typer.echo(format_table(report))
        if json_path is not None:
            json_path.write_text(json.dumps(report.as_json(), indent=2) + "\n")
            typer.echo(f"wrote {json_path}")
        return 0

    raise typer.Exit(guarded(main))


@bench_app.command("simulate")
def simulate_command(
    trace: TraceOpt = None,
    arrivals: ArrivalsOpt = None,
    process: ProcessOpt = None,
    order: OrderOpt = "trace",
    rate: RateOpt = None,
    concurrency: ConcurrencyOpt = 4,
    time_scale: TimeScaleOpt = 1.0,
    limit: LimitOpt = None,
    profile: ProfilesOpt = "nirvana",
    costs: CostsOpt = None,
    batch_table: BatchTableOpt = None,
    step_cache_costs: StepCacheCostsOpt = None,
    cache_bytes: CacheBytesOpt = None,
    large_workers: LargeWorkersOpt = 3,
    small_workers: SmallWorkersOpt = 1,
    autoscale: AutoscaleOpt = None,
    sweep: SweepOpt = False,
    sizes: SizesOpt = None,
    policies: PoliciesOpt = None,
    rates: RatesOpt = None,
    k_table: KTableOpt = None,
    quality_profile: QualityProfileOpt = None,
    quality_from: QualityFromOpt = None,
    switch_s: SwitchOpt = 0.0,
    monitor: MonitorOpt = "off",
    monitor_period_s: MonitorPeriodOpt = None,
    allocator: AllocatorOpt = "diffserve",
    cascade_pair: CascadePairOpt = "sd15",
    cascade_profile: CascadeProfileOpt = None,
    json_path: JsonOpt = None,
    plots: PlotsOpt = None,
    compare: CompareOpt = None,
    no_throughput: NoThroughputOpt = False,
    platform_costs: PlatformCostsOpt = None,
    platform_host: PlatformHostOpt = "shared",
    seed: SeedOpt = 0,
    jobs: JobsOpt = 1,
    progress: ProgressOpt = True,
) -> None:
    """Simulate a trace with profiled costs and the service's own policies (no GPU, no images)."""
    given = dict(locals())  # every option by its name, before anything else is named here
    from bench.run.options import guarded, simulate_options
    from bench.sim.runner import simulate_main

    def main() -> int:
        options = simulate_options(given)
        return simulate_main(get_settings(), options)

    raise typer.Exit(guarded(main))


@bench_app.command("chaos")
def chaos_command(
    scenarios: str = typer.Option(
        "redis,redis-empty,postgres,kill-large,kill-small,kill-admit,kill-decode,kill-io,webhook-outage,"
        "webhook-slow,webhook-hang,webhook-huge,"
        "network,disk-full,node-loss,load,cancel-storm",
        "--scenarios",
        help="Comma list, run in this order.",
    ),
    base_url: str | None = typer.Option(
        None, "--base-url", help="A running stack (same settings as this process). Unset: start one."
    ),
    jobs: int = typer.Option(100, min=1, help="Jobs per fault scenario."),
    load_jobs: int = typer.Option(500, "--load-jobs", min=1, help="Submissions of the load scenario."),
    concurrency: int = typer.Option(32, min=1, help="Clients of the load scenario."),
    outage_s: str = typer.Option(
        "8,60", "--outage-s", help="Seconds each fault lasts; a comma list runs each outage scenario at each."
    ),
    proxy_ports: str | None = typer.Option(
        None, "--proxy-ports", help="With --base-url: REDIS,POSTGRES ports its workers use."
    ),
    bound_s: float = typer.Option(
        300.0, "--bound-s", min=1.0, help="After a fault, seconds before a job is lost."
    ),
    workdir: Path | None = typer.Option(
        None, help="Where the bench's own stack lives (default: a temp dir)."
    ),
    json_path: JsonOpt = None,
) -> None:
    """Break the stack on purpose (kill Redis, Postgres, each pool; Redis back empty; a lossy network; a full
    disk; a lost node; a webhook outage; load; a cancel storm) and report per scenario: accepted, succeeded,
    failed, lost, duplicated, recovery, unavailable, 5xx."""
    from bench.chaos.run import ChaosOptions
    from bench.chaos.runner import run_against, run_isolated
    from bench.run.options import guarded, parse_list

    def main() -> int:
        outages = tuple(float(value) for value in parse_list(outage_s))
        options = ChaosOptions(
            jobs=jobs, load_jobs=load_jobs, concurrency=concurrency, outages_s=outages, bound_s=bound_s
        )
        names = parse_list(scenarios)
        try:
            if base_url is not None:
                ports = [int(port) for port in parse_list(proxy_ports or "")]
                report = run_against(base_url, get_settings(), names, options, proxy_ports=ports)
            else:
                report = run_isolated(names, options, workdir)
        except RuntimeError as error:  # the stack cannot be driven: say why, no traceback
            print(f"error: {error}", file=sys.stderr)
            return 2
        text = json.dumps(report, indent=2)
        if json_path is not None:
            json_path.write_text(text + "\n")
        print(text)
        bad = [name for name, row in report["scenarios"].items() if row["lost"] or row["duplicated"]]
        return 1 if bad else 0

    raise typer.Exit(guarded(main))


@bench_app.command("reads")
def reads_command(
    jobs: int | None = typer.Option(
        None, "--jobs", min=2, help="Objects (jobs generated; live default 100, simulated 150,000)."
    ),
    reads: int | None = typer.Option(
        None, "--reads", min=10, help="Reads in the trace (live default 4,000, simulated 1,000,000)."
    ),
    zipf: float = typer.Option(1.11, "--zipf", min=0.0, help="Popularity exponent (LatentBox O1: 1.11)."),
    cache_fraction: float | None = typer.Option(
        None, "--cache-fraction", min=0.0, help="Each node's cache, a share of the PNG bytes (0.1; sim 0.01)."
    ),
    window: int | None = typer.Option(
        None, "--window", min=1, help="Reads per tuning window W (200; sim 2000)."
    ),
    promote_after: int = typer.Option(8, "--promote-after", min=0, help="Latent hits before promotion, h."),
    warmup: float = typer.Option(0.2, "--warmup", min=0.0, max=0.9, help="Share of the trace not measured."),
    concurrency: int = typer.Option(8, "--concurrency", min=1, help="Closed-loop readers (live)."),
    steps: int = typer.Option(10, "--steps", min=1, help="T of the generated jobs (live)."),
    base_url: str = typer.Option("http://127.0.0.1:8000", "--base-url", help="The stack's API (live)."),
    api_key: str | None = typer.Option(
        None, "--api-key", envvar="REPRISE_API_KEY", help="Default: a new key."
    ),
    tenant: str = typer.Option("bench-reads", "--tenant", help="Tenant for a new key (no --api-key)."),
    simulate: bool = typer.Option(False, "--simulate", help="The simulator at the paper's scale, no stack."),
    nodes: int = typer.Option(3, "--nodes", min=1, help="Decode nodes (simulated; LatentBox 6.1: 3)."),
    rate: float = typer.Option(50.0, "--rate", min=0.1, help="Reads per second (simulated)."),
    theta: float = typer.Option(4.0, "--theta", min=0.0, help="Spillover queue depth (simulated; inf: off)."),
    seed: SeedOpt = 0,
    json_path: JsonOpt = None,
) -> None:
    """LatentBox's read path: four set-ups (images_only, latents_only, fixed, adaptive) on one skewed,
    decaying read trace, then a burst of 100 identical reads; on a running stack, or --simulate."""
    from bench.live.reads import ReadBenchOptions, run_read_bench, write_report
    from bench.run.options import guarded
    from bench.sim.reads import simulate_reads

    def main() -> int:
        if simulate:
            spec = _read_sim_spec(jobs, reads, nodes, rate, zipf, cache_fraction, window)
            write_report(
                simulate_reads(
                    replace(spec, promote_after=promote_after, theta=theta, warmup=warmup, seed=seed)
                ),
                json_path,
            )
            return 0
        settings = get_settings()
        options = ReadBenchOptions(
            base_url=base_url,
            api_key=api_key or _bench_key(settings, tenant),
            jobs=jobs or 100,
            reads=reads or 4000,
            zipf=zipf,
            warmup=warmup,
            window=window or 200,
            cache_fraction=0.1 if cache_fraction is None else cache_fraction,
            promote_after=promote_after,
            concurrency=concurrency,
            steps=steps,
            seed=seed,
        )
        try:
            write_report(run_read_bench(settings, options), json_path)
        except (RuntimeError, httpx.HTTPError) as error:
            print(f"error: {error!r}", file=sys.stderr)
            return 2
        return 0

    raise typer.Exit(guarded(main))


@bench_app.command("streams")
def streams_command(
    jobs: int = typer.Option(24, "--jobs", min=1, help="Jobs per round (full generations, cache off)."),
    streams: int = typer.Option(200, "--streams", min=1, help="Event streams open in the loaded round."),
    steps: int = typer.Option(30, "--steps", min=1, help="T of the jobs."),
    base_url: str = typer.Option("http://127.0.0.1:8000", "--base-url", help="The stack's API."),
    api_key: str | None = typer.Option(
        None, "--api-key", envvar="REPRISE_API_KEY", help="Default: a new key."
    ),
    api_metrics_url: str | None = typer.Option(
        None, "--api-metrics-url", help="The API's /metrics, to report its CPU seconds per round."
    ),
    seed: SeedOpt = 0,
    json_path: JsonOpt = None,
) -> None:
    """Whether open event streams slow the workers: the same batch without, with N streams, and without."""
    from bench.live.streams import StreamBenchOptions, report_text, run_stream_bench

    key = api_key or _bench_key(get_settings(), "bench-streams")
    options = StreamBenchOptions(
        base_url=base_url,
        api_key=key,
        jobs=jobs,
        streams=streams,
        steps=steps,
        seed=seed,
        api_metrics_url=api_metrics_url,
    )
    try:
        text = report_text(run_stream_bench(options))
    except httpx.HTTPError as error:
        print(f"error: {error!r} (is the stack up at {base_url}?)", file=sys.stderr)
        raise typer.Exit(2) from None
    if json_path is not None:
        json_path.write_text(text + "\n")
    print(text)


def _read_sim_spec(
    jobs: int | None,
    reads: int | None,
    nodes: int,
    rate: float,
    zipf: float,
    cache_fraction: float | None,
    window: int | None,
) -> ReadSimSpec:
    """The simulation's defaults are the paper's scale: 150k objects, 1 M reads, 1% per node."""
    from bench.sim.reads import ReadSimSpec

    return ReadSimSpec(
        objects=jobs or 150_000,
        reads=reads or 1_000_000,
        nodes=nodes,
        rate=rate,
        zipf=zipf,
        cache_fraction=0.01 if cache_fraction is None else cache_fraction,
        window=window or 2000,
    )


def _bench_key(settings: Settings, tenant: str) -> str:
    from db.engine import session_scope
    from db.tenants import issue_key

    with session_scope(settings) as session:
        return issue_key(session=session, name=tenant).api_key
