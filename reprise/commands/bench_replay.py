"""`reprise bench replay`: a trace through a running stack's HTTP API (bench.live), the measurement every
quality and throughput claim rests on."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from core.settings import get_settings
from reprise.commands.bench import (
    ArrivalsOpt,
    ConcurrencyOpt,
    CostsOpt,
    JsonOpt,
    LimitOpt,
    OrderOpt,
    PlotsOpt,
    ProcessOpt,
    QualitySampleOpt,
    RateOpt,
    SeedOpt,
    TimeScaleOpt,
    TraceOpt,
    VideoFramesOpt,
    bench_app,
)

GpuWorkersOpt = Annotated[
    int | None,
    typer.Option(
        "--gpu-workers", min=1, help="Large + small workers, for the vanilla estimate (default: /v1/stats)."
    ),
]
VanillaOpt = Annotated[
    bool,
    typer.Option(
        "--vanilla",
        help="Then replay the same requests with the cache off on the same stack (vanilla_measured_rps).",
    ),
]

WarmupOpt = Annotated[
    int,
    typer.Option(
        "--warmup",
        min=0,
        help="Cache-off requests sent before the counted runs (not counted), so that the configured run "
        "and vanilla's both find the stack warm.",
    ),
]
StackDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--stack-dir",
        help="The data directory of the local `reprise run` serving --base-url, whose processes' CPU per "
        "request the report gives by role (default: this checkout's REPRISE_DATA_DIR when a stack runs "
        "there; none for a remote stack).",
    ),
]


@bench_app.command("replay")
def replay_command(
    trace: TraceOpt = None,
    arrivals: ArrivalsOpt = None,
    process: ProcessOpt = None,
    order: OrderOpt = "trace",
    rate: RateOpt = None,
    concurrency: ConcurrencyOpt = 4,
    time_scale: TimeScaleOpt = 1.0,
    limit: LimitOpt = None,
    profile: str = typer.Option("configured", "--profile", help="vanilla, nirvana, modm or configured."),
    base_url: str = typer.Option("http://127.0.0.1:8000", "--base-url", help="The stack's API."),
    api_key: str | None = typer.Option(
        None, "--api-key", envvar="REPRISE_API_KEY", help="Default: a new key."
    ),
    tenant: str = typer.Option("bench", "--tenant", help="Tenant to issue a key for when no --api-key."),
    costs: CostsOpt = None,
    steps: int | None = typer.Option(None, "--steps", min=1, help="T per request (default: the server's)."),
    fetch_images: int = typer.Option(5, "--fetch-images", min=0, help="PNGs to download for png_bytes."),
    quality_sample: QualitySampleOpt = 64,
    gpu_workers: GpuWorkersOpt = None,
    vanilla: VanillaOpt = False,
    video_frames: VideoFramesOpt = None,
    json_path: JsonOpt = None,
    plots: PlotsOpt = None,
    seed: SeedOpt = 0,
    warmup: WarmupOpt = 16,
    stack_dir: StackDirOpt = None,
) -> None:
    """Replay a trace through a running stack's HTTP API and report hit rate, k, compute saved, latency."""
    from bench.live.runner import ReplayCliOptions, replay_main
    from bench.run.options import guarded, workload_options

    raise typer.Exit(
        guarded(
            lambda: replay_main(
                get_settings(),
                ReplayCliOptions(
                    workload=workload_options(
                        trace, arrivals, process, order, rate, concurrency, time_scale, limit, seed
                    ),
                    profile=profile,
                    base_url=base_url,
                    api_key=api_key,
                    tenant=tenant,
                    costs=costs,
                    steps=steps,
                    fetch_images=fetch_images,
                    quality_sample=quality_sample,
                    gpu_workers=gpu_workers,
                    json_path=json_path,
                    plots=plots,
                    video_frames=video_frames,
                    vanilla=vanilla,
                    warmup=warmup,
                    stack_dir=stack_dir if stack_dir is not None else get_settings().data_dir.resolve(),
                ),
            )
        )
    )
