"""`reprise bench cache` and `reprise bench video`, registered on the bench command group
(reprise/commands/bench.py is full)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from core.settings import Settings, get_settings
from reprise.commands.bench import bench_app


@bench_app.command("cache")
def cache_command(
    entries: int = typer.Option(
        10_000, "--entries", min=1, help="Cache entries to fill the bench scopes with."
    ),
    scopes: int = typer.Option(
        1, "--scopes", min=1, help="Tenant scopes (Zipf sizes) plus a shared one; 1: one."
    ),
    queries: int = typer.Option(
        200, "--queries", min=1, help="Near-duplicate lookups, spread over size classes."
    ),
    exact_max: int | None = typer.Option(
        None,
        "--exact-max",
        min=0,
        help="Small-scope exact path bound (default REPRISE_LOOKUP_EXACT_MAX; 0: off).",
    ),
    compare_exact: list[int] = typer.Option([], "--compare-exact", help="Also measure with this exact_max."),
    compare_ef: list[int] = typer.Option([], "--compare-ef", help="Also measure with this hnsw.ef_search."),
    bulk_build: bool = typer.Option(False, "--bulk-build", help="Fill, then build the index (dedicated DB)."),
    churn_rounds: int = typer.Option(
        0, "--churn-rounds", min=0, help="Then replace 10% of the largest scope this many times, re-measure."
    ),
    seed: int = typer.Option(0, "--seed", help="Random seed."),
    json_path: Path | None = typer.Option(None, "--json", help="Also write the results to this JSON file."),
) -> None:
    """Lookup latency and recall@1 by scope size, index size and one eviction pass (configured database)."""
    from bench.cache.index import format_table, measure_cache

    result = measure_cache(
        get_settings(),
        entries=entries,
        queries=queries,
        scopes=scopes,
        exact_max=exact_max,
        seed=seed,
        bulk_build=bulk_build,
        compare_exact=tuple(compare_exact),
        compare_ef=tuple(compare_ef),
        churn_rounds=churn_rounds,
    )
    typer.echo(format_table(result))
    _write_json(json_path, result)


def _write_json(path: Path | None, result: Any) -> None:
    """Also write the results (their as_json()) to `path`, when one was given (--json)."""
    if path is not None:
        path.write_text(json.dumps(result.as_json(), indent=2) + "\n")
        typer.echo(f"wrote {path}")


def _video_model(settings: Settings, model: str, quality_requests: int, quality_k: int) -> tuple[Any, Any]:
    """The video model's pipeline on the CPU, and on lab:video the judged reuse its judge measures."""
    import torch

    from bench.video.runner import JudgedReuse
    from lab.models import load_video_judge
    from workers.runtime.video import LAB_VIDEO_MODEL, load_video_pipeline, video_model_source

    pipe = load_video_pipeline(video_model_source(settings), device=torch.device("cpu"), dtype=torch.float32)
    if model != LAB_VIDEO_MODEL:
        return pipe, None
    return pipe, JudgedReuse(load_video_judge(settings), quality_requests, quality_k, log=typer.echo)


@bench_app.command("video")
def video_command(
    trace: str = typer.Option(
        "lab",
        "--trace",
        help="'lab' (the lab's world with motion), 'moving' (the moving world lab:video was trained on) "
        "or a prompts file.",
    ),
    requests: int = typer.Option(2000, "--requests", min=1, help="Requests in the simulated trace."),
    budget_share: float = typer.Option(
        0.1, "--budget-share", help="Cache budget: this share of the trace's misses, uncompressed."
    ),
    compression_prompts: int = typer.Option(
        4, "--compression-prompts", min=1, help="Prompts run on the video model for compression."
    ),
    frames: int | None = typer.Option(
        None,
        "--frames",
        min=1,
        help="Frames of those runs. Default: on lab:video the frames its judge reads (8), else 16.",
    ),
    noise_window: int | None = typer.Option(
        None, "--noise-window", min=1, help="FreeNoise's window for those runs (default: i.i.d. noise)."
    ),
    seed: int = typer.Option(0, "--seed", help="Random seed."),
    json_path: Path | None = typer.Option(None, "--json", help="Also write the results to this JSON file."),
    model: str | None = typer.Option(
        None,
        "--model",
        help="The video model: lab:video (the lab's trained one) or tiny-video (random). "
        "Default: REPRISE_VIDEO_MODEL's.",
    ),
    quality_requests: int = typer.Option(
        8,
        "--quality-requests",
        min=1,
        help="lab:video: requests whose miss, whole and stitched hit are judged.",
    ),
    quality_k: int = typer.Option(10, "--quality-k", min=1, help="lab:video: the step those hits resume at."),
) -> None:
    """FlexCache: compression (at REPRISE_VIDEO_STATE_ERROR_BOUND) and resume error on the video model's
    states; hit rate, compute saved and throughput of whole-prompt vs decoupled lookup on a video trace
    at the paper's costs (simulated); on lab:video, the judged quality of misses, whole-prompt and
    stitched hits."""
    from bench.video.runner import bench_frames, format_table, measure_video

    settings = get_settings()
    model = model or settings.video_model_name
    try:
        run_frames = bench_frames(model, frames)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--frames") from None
    settings = settings.model_copy(update={"video_model": model})
    pipe, judged = _video_model(settings, model, quality_requests, quality_k)
    result = measure_video(
        settings,
        pipe,
        trace=trace,
        requests=requests,
        seed=seed,
        budget_share=budget_share,
        compression_prompts=compression_prompts,
        frames=run_frames,
        noise_window=noise_window,
        model=model,
        judged=judged,
    )
    typer.echo(format_table(result))
    _write_json(json_path, result)


@bench_app.command("video-trace")
def video_trace_command(
    out: Path = typer.Option(..., "--out", help="The prompts file to write (one prompt a line)."),
    trace: str = typer.Option(
        "lab",
        "--trace",
        help="'lab' (the lab's world, a motion phrase added), 'moving' (the moving world lab:video was "
        "trained on) or a prompts file.",
    ),
    requests: int = typer.Option(200, "--requests", min=1, help="Prompts to write."),
    seed: int = typer.Option(0, "--seed", help="Random seed."),
) -> None:
    """Write the video trace `bench video` simulates, for `bench replay --video-frames N --trace FILE` to
    send through a running stack (the figures measured on the stack)."""
    from bench.video.runner import trace_prompts

    if not out.parent.is_dir():
        raise typer.BadParameter(f"{out.parent} is not a directory: create it or choose another --out")
    out.write_text("".join(f"{prompt}\n" for prompt in trace_prompts(trace, requests, seed)))
    typer.echo(f"wrote {requests} prompts to {out}")
