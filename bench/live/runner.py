"""What `reprise bench replay` does, behind its option parsing.

It builds a workload from the options the simulator takes too (bench.run.options, bench.workload.trace),
replays it through a running stack (bench.live.replay), reports with the simulator's contract
(bench.run.report), prints a markdown table on stdout and what the stack ran on to stderr, and writes
--json (with the stack's record, bench.live.stack) and --plots when asked. With --vanilla it then replays
the same requests with the cache off on the same stack: the measured baseline (vanilla_measured_rps).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.live.stack import timeline_text, write_replay_json
from bench.live.stages import device_s_per_request, stage_summary, stages_text
from bench.live.video import video_summary
from bench.run import plots
from bench.run.costs import load_costs
from bench.run.options import WorkloadOptions
from bench.run.outcomes import step_ms_by_model
from bench.run.plots import TraceCurve
from bench.run.profiles import build_profile, settings_mismatches
from bench.run.report import markdown_table
from bench.workload.embeddings import configured_embedder
from core.settings import Settings

if TYPE_CHECKING:
    from bench.live.records import JobRecord
    from bench.live.replay import ReplayOptions
    from bench.live.stack import StackRecord
    from bench.run.costs import StepCosts
    from bench.run.report import BenchReport
    from bench.workload.trace import Workload
    from core.scoring import Scorer


def _note(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


@dataclass(frozen=True, slots=True)
class ReplayCliOptions:
    """What `reprise bench replay` was asked for, parsed (bench.run.options)."""

    workload: WorkloadOptions
    profile: str
    base_url: str
    api_key: str | None = None
    tenant: str = "bench"
    costs: Path | None = None
    steps: int | None = None
    fetch_images: int = 5
    quality_sample: int = 64  # judged hits audited afresh (cache off) for their drop (bench.run.replayed)
    gpu_workers: int | None = None
    json_path: Path | None = None
    plots: Path | None = None
    progress: bool = True
    video_frames: int | None = None  # video jobs: no image fetched (judged and audited where judged)
    vanilla: bool = False  # then the same requests with the cache off on the same stack
    warmup: int = 16  # cache-off requests sent before the counted runs, so that both find the stack warm
    stack_dir: Path | None = None  # a local stack's data directory: its CPU is read (bench.live.cpu)


def _vanilla_run(
    settings: Settings,
    workload: Workload,
    options: ReplayOptions,
    configured: BenchReport,
    stack_dir: Path | None,
    scorer: Scorer | None,
) -> dict[str, Any]:
    """The same requests again with the cache off (every one a full generation on the large model), on
    the stack as the configured run left it: the measured baseline the configured run's throughput is
    compared with (vanilla_measured_rps; vanilla_throughput_rps stays the estimate from costs), with its
    stages, device seconds and CPU per request beside the configured run's."""
    from bench.live.replay import run_replay

    _note("vanilla: the same requests with the cache off, on the same stack")
    vanilla, records, _, cpu_ms = run_replay(
        cold_prompts(workload),
        options,
        profile=build_profile("vanilla", settings),
        costs=load_costs(None),
        costs_measured=False,
        embedder={},
        show_progress=True,
        stack_dir=stack_dir,
        scorer=scorer,
    )
    measured, served = vanilla.throughput_rps, configured.throughput_rps
    ratio = round(served / measured, 4) if measured and served is not None else None
    _note(f"vanilla measured: {measured} rps; configured/vanilla = {ratio}")
    figures = _accounting(records, cpu_ms, prefix="vanilla_")
    return {"vanilla_measured_rps": measured, "vs_vanilla_measured": ratio} | figures


VANILLA_PROMPT_SUFFIX = " "
"""Appended to each of vanilla's prompts. The text encoders' tokenizers strip it (vanilla's images are the
configured run's misses' bit for bit: tests/workers/runtime/test_prompts.py), but a worker keeps the prompt
embeddings it computed by their exact text (workers.runtime.prompts): without it, vanilla's requests would
find the configured run's prompts encoded already and skip the encoder calls a cold vanilla pays."""


def _comparison(warmup: int, vanilla: bool) -> dict[str, Any]:
    """How the runs were made comparable: the warm-up before them, their order, vanilla's marked prompts."""
    if not vanilla:
        return {"warmup_requests": warmup, "order": "one run"}
    marked = f"marked with {VANILLA_PROMPT_SUFFIX!r}: no prompt embedding the configured run kept serves them"
    return {"warmup_requests": warmup, "order": "configured, then vanilla", "vanilla_prompts": marked}


def cold_prompts(workload: Workload) -> Workload:
    """The workload with each prompt marked (VANILLA_PROMPT_SUFFIX) so that no embedding kept from an
    earlier run serves it."""
    marked = tuple(replace(r, prompt=r.prompt + VANILLA_PROMPT_SUFFIX) for r in workload.requests)
    return replace(workload, requests=marked)


def _accounting(
    records: Sequence[JobRecord], cpu_ms: dict[str, float] | None, *, prefix: str = ""
) -> dict[str, Any]:
    """A run's stages per route, device seconds and stack CPU per request (bench.live.stages,
    bench.live.cpu), under its keys (`prefix`: vanilla_ for the vanilla run), said on stderr."""
    jobs = [record.job for record in records]
    summary = stage_summary(jobs)
    device = device_s_per_request(jobs)
    name = prefix.rstrip("_") or "configured"
    _note(f"{name} stages, median ms: {stages_text(summary) or 'none recorded'}")
    _note(f"{name} device s/request: {device}; stack CPU ms/request: {cpu_ms or 'not read (no local stack)'}")
    return {
        f"{prefix}stages": summary,
        f"{prefix}device_s_per_request": device,
        f"{prefix}cpu_ms_per_request": cpu_ms,
    }


def _api_key(settings: Settings, options: ReplayCliOptions) -> str:
    if options.api_key:
        return options.api_key
    from db.engine import session_scope
    from db.tenants import issue_key

    with session_scope(settings) as session:  # an admin key: the replay reads the stack's global /v1/stats
        return issue_key(session=session, name=options.tenant, admin=True).api_key


def _video_figures(records: Sequence[JobRecord], throughput_rps: float | None) -> dict[str, Any]:
    """FlexCache's figures from the jobs, their judged quality by kind against the audited hits' fresh
    generations (bench.live.video), and the replay's throughput."""
    figures = video_summary([r.job for r in records], fresh=[r.fresh_quality for r in records])
    return figures | {"throughput_rps": throughput_rps}


def _noted_stack(stack: StackRecord | None, records: Sequence[JobRecord]) -> dict[str, dict[str, float]]:
    """Say what the stack ran (its pools, from /v1/stats) and how long its steps took under this load;
    return the latter (records.stack_step_ms)."""
    from bench.live.records import stack_step_ms

    if stack is not None:
        _note(
            f"stack: pool monitor {stack.monitor_mode() or 'unknown'}; pools {timeline_text(stack.timeline)}"
        )
    else:
        _note("stack: /v1/stats could not be read; the report records no pool configuration")
    steps = stack_step_ms(records)
    _note(f"stack: a denoising step under this load, by model: {steps}")
    return steps


def _costs(path: Path | None) -> StepCosts:
    if path is None:
        _note(
            "no --costs: compute_saved weighs the small model by the default cost ratio "
            "(run `reprise bench runtime --json FILE` on the stack's models and pass it)"
        )
    return load_costs(path)


def replay_main(settings: Settings, options: ReplayCliOptions) -> int:
    """Replay against a running stack and report; 0 when every request succeeded, 1 otherwise."""
    from bench.live.judging import configured_scorer_of
    from bench.live.records import outcome_from_record
    from bench.live.replay import ReplayOptions, run_replay, warm_up

    profile = build_profile(options.profile, settings)
    for line in settings_mismatches(profile, settings):
        _note(f"warning: the stack may not run profile {profile.name}: {line}")
    costs = _costs(options.costs)
    workload = options.workload.workload()
    replay_options = ReplayOptions(
        base_url=options.base_url,
        api_key=_api_key(settings, options),
        steps=options.steps,
        fetch_images=0 if options.video_frames else options.fetch_images,
        quality_sample=options.quality_sample,
        video_frames=options.video_frames,
        step_cache=settings.step_cache_setting.on and profile.caches,
    )
    embedder = {
        **configured_embedder(settings).describe,
        "lookup": "text-to-text" if profile.lookup.value == "text" else "text-to-image",
    }
    scorer = configured_scorer_of(settings)  # reads the images the workers did not judge
    if options.warmup:
        warmed = warm_up(workload, replace(replay_options, fetch_images=0, quality_sample=0), options.warmup)
        _note(f"warm-up: {warmed} of {options.warmup} cache-off requests before the counted runs")
    report, records, stack, cpu_ms = run_replay(
        workload,
        replay_options,
        profile=profile,
        costs=costs,
        costs_measured=options.costs is not None,
        embedder=embedder,
        gpu_workers=options.gpu_workers,
        show_progress=options.progress,
        stack_dir=options.stack_dir,
        scorer=scorer,
    )
    print(markdown_table([report]))
    body = report.as_json() | {"stack_step_ms": _noted_stack(stack, records)} | _accounting(records, cpu_ms)
    body["comparison"] = _comparison(options.warmup, options.vanilla and profile.caches)
    if options.vanilla and profile.caches:
        unaudited = replace(replay_options, fetch_images=0, quality_sample=0)
        body |= _vanilla_run(settings, workload, unaudited, report, options.stack_dir, scorer)
    if options.video_frames:
        body["video"] = _video_figures(records, report.throughput_rps)
        _note(f"video: {body['video']}")
    if options.json_path is not None:  # with the stack's record when /v1/stats could be read
        write_replay_json(options.json_path, body, stack)
        _note(f"wrote {options.json_path}")
    if options.plots is not None:
        outcomes = [outcome_from_record(r) for r in records]
        prices = step_ms_by_model(costs, outcomes)
        curve = TraceCurve(profile.name, outcomes, prices, costs.large_step_ms)
        _note(f"wrote {plots.plot_over_trace([curve], options.plots / 'replay-over-trace.png')}")
    return 0 if all(r.job is not None and r.job.get("status") == "succeeded" for r in records) else 1
