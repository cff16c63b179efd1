"""`reprise bench video`: FlexCache in figures.

1. Compression (bench.video.compression): the video model's own captured states (the lab's trained
   model by default), stored by each technique, and the error of runs resumed from them, with i.i.d.
   noise or FreeNoise's windows (`noise_window`, the paper's set-up, 5); `compression` is what the
   cache stores at the configured error bound. On lab:video, the judged reuse too (bench.video.quality).
2. Hit rate, compute saved and throughput (bench.sim.video): a video prompt trace (bench.video.trace:
   the lab's world with motion, or a prompts file with motion added) through the simulator's video
   profile at the paper's costs, in FlexCache's configurations (6.2.2, Fig. 17):
       nirvana-video     whole-prompt lookup, uncompressed states, LCBFU (the paper's baseline, 6.1)
       + compression     the same with states compressed (6.7x, 3.1.1, or `--compression`)
       flexcache         + decoupled object/background lookup and LRBU (4.2)
   under one byte budget, `--budget-share` of what the trace's misses would store uncompressed (the
   paper fills a 1 TB cache first, 6.2.2; a share keeps the cache full at any trace length).

JSON (a contract): model, compression {intra, inter, total}, resume_error, hit_rate {whole_prompt,
decoupled} (the "+ compression" and "flexcache" runs: the same trace, budget and compression),
compute_saved and throughput_rps (flexcache's), vanilla_throughput_rps (no cache: every request runs T
steps), quality {miss_mean, whole_hit_drop, stitched_hit_drop} (null on a model the judge cannot read).
Further fields give each configuration's figures and the compression per technique.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from bench.sim.video import Vectors, VideoCosts, VideoSimResult, prompt_parts, simulate_video
from bench.video.compression import CompressionFigures, measure_compression
from bench.video.trace import lab_video_trace, motion_trace, moving_scene_trace
from bench.workload.embeddings import configured_embedder
from core.settings import Settings
from core.vocabulary import BUILTIN_VIDEO_MODELS, EvictionPolicyName, ModelSet
from jobs.policies.k_selection import NIRVANA_T2T, ThresholdTable

DEFAULT_BUDGET_SHARE = 0.1
"""The budget as a share of the trace's uncompressed misses: ours, small enough that eviction decides
(the paper's 1 TB holds 80k uncompressed videos against a 50k-prompt replay after a fill, 6.2.2)."""


DEFAULT_FRAMES = 16
"""Frames of the compression runs on a model with no judge: a video job's default length (docs/video.md)."""


def bench_frames(model: str, frames: int | None) -> int:
    """The frames the compression runs take: on the lab's trained video model, the frames its video judge
    reads (lab.motion.FRAMES, the length the model was trained on), since the judged reuse scores every
    run; on any other model `frames`, or DEFAULT_FRAMES. A length the judge cannot read is refused with
    the option that fixes it (ValueError)."""
    from lab.motion import FRAMES

    if model != BUILTIN_VIDEO_MODELS[ModelSet.LAB]:
        return DEFAULT_FRAMES if frames is None else frames
    if frames is not None and frames != FRAMES:
        raise ValueError(
            f"{model}'s video judge reads videos of {FRAMES} frames, the length the model was trained on: "
            f"pass --frames {FRAMES} (or leave --frames out), or --model tiny-video to measure "
            f"compression at {frames} frames without judging"
        )
    return FRAMES


@dataclass(frozen=True, slots=True)
class VideoBench:
    compression: dict[str, float]
    resume_error: float
    hit_rate: dict[str, float]
    compute_saved: float
    throughput_rps: float
    vanilla_throughput_rps: float
    trace: str
    requests: int
    noise_window: int | None
    k_table: str
    budget_bytes: int
    configurations: dict[str, dict[str, Any]]
    compression_detail: dict[str, Any]
    model: str = "tiny-video"
    quality: dict[str, Any] | None = None  # bench.video.quality; None on a model the judge cannot read

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def trace_prompts(trace: str, requests: int, seed: int) -> list[str]:
    """`lab` (bench.video.trace.lab_video_trace), `moving` (moving_scene_trace: the moving world
    lab:video was trained on) or a prompts file with motion added."""
    if trace == "lab":
        return lab_video_trace(requests, seed=seed)
    if trace == "moving":
        return moving_scene_trace(requests, seed=seed)
    path = Path(trace)
    if not path.is_file():
        raise ValueError(f"--trace {trace}: neither 'lab', 'moving' nor a prompts file")
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    return motion_trace(lines, requests, seed=seed)


def embed_trace(
    settings: Settings, prompts: list[str]
) -> tuple[Vectors, list[tuple[Vectors | None, Vectors | None]]]:
    """Whole-prompt rows and each prompt's (object, background) rows (None where none), embedded once
    per distinct text with the configured embedder."""
    parts = prompt_parts(prompts)
    texts = sorted(set(prompts) | {text for pair in parts for text in pair if text})
    vectors = configured_embedder(settings).embed(texts)
    row = {text: vectors[i] for i, text in enumerate(texts)}
    whole = np.stack([row[prompt] for prompt in prompts])
    return whole, [(row[o] if o else None, row[b] if b else None) for o, b in parts]


def simulate_configurations(
    whole: Vectors,
    parts: list[tuple[Vectors | None, Vectors | None]],
    table: ThresholdTable,
    costs: VideoCosts,
    budget_bytes: int,
) -> dict[str, VideoSimResult]:
    """The paper's three configurations (module doc) on one trace and budget."""
    uncompressed = replace(costs, compression=1.0)
    runs = {
        "nirvana-video": (uncompressed, False, EvictionPolicyName.LCBFU),
        "+ compression": (costs, False, EvictionPolicyName.LCBFU),
        "flexcache": (costs, True, EvictionPolicyName.LRBU),
    }
    return {
        name: simulate_video(
            whole,
            parts,
            table,
            costs=run_costs,
            budget_bytes=budget_bytes,
            decoupled=decoupled,
            policy=policy,
        )
        for name, (run_costs, decoupled, policy) in runs.items()
    }


def measure_video(
    settings: Settings,
    pipe: Any,
    *,
    trace: str = "lab",
    requests: int = 2000,
    seed: int = 0,
    budget_share: float = DEFAULT_BUDGET_SHARE,
    costs: VideoCosts = VideoCosts(),
    table: ThresholdTable = NIRVANA_T2T,
    compression_prompts: int = 4,
    frames: int = DEFAULT_FRAMES,
    compression_steps: int = 50,
    compression_capture: tuple[int, ...] | None = None,
    noise_window: int | None = None,
    model: str = "tiny-video",
    judged: JudgedReuse | None = None,
) -> VideoBench:
    """Both parts (module doc). `pipe`: a loaded video pipeline (workers.runtime.video) of `model`; the
    compression runs take `compression_steps` steps and cache `compression_capture` (default:
    FlexCache's). With `judged` (the lab's trained model and its video judge), the compression runs
    take captions of the moving world the model was trained on, and the reuse is judged
    (bench.video.quality)."""
    if not 0 < budget_share <= 1 or requests < 1 or compression_prompts < 1:
        raise ValueError("budget_share must be in (0, 1], requests and compression_prompts at least 1")
    prompts = trace_prompts(trace, requests, seed)
    compressed_prompts, quality, bound = prompts[:compression_prompts], None, settings.video_state_error_bound
    if judged is not None:
        compressed_prompts, quality = judged.measure(
            pipe, compression_prompts, seed, compression_steps, frames, bound
        )
    figures = measure_compression(
        pipe,
        compressed_prompts,
        frames=frames,
        steps=compression_steps,
        error_bound=bound,
        capture=compression_capture,
        noise_window=noise_window,
    )
    whole, parts = embed_trace(settings, prompts)
    budget = int(budget_share * requests * (len(costs.capture) * costs.state_bytes + costs.mask_bytes))
    runs = simulate_configurations(whole, parts, table, costs, budget)
    flex, compressed = runs["flexcache"], runs["+ compression"]
    return VideoBench(
        compression=figures.compression,
        resume_error=figures.resume_error,
        hit_rate={"whole_prompt": compressed.hit_rate, "decoupled": flex.hit_rate},
        compute_saved=flex.compute_saved,
        throughput_rps=flex.throughput_rps,
        vanilla_throughput_rps=flex.vanilla_throughput_rps,
        trace=trace,
        requests=requests,
        noise_window=noise_window,
        k_table=table.name,
        budget_bytes=budget,
        configurations={name: asdict(result) for name, result in runs.items()},
        compression_detail=_detail(figures),
        model=model,
        quality=quality,
    )


@dataclass(frozen=True, slots=True)
class JudgedReuse:
    """What judging the reuse needs: the video judge, how many requests, at which k (bench.video.quality)."""

    judge: Any
    requests: int
    k: int
    log: Callable[[str], None] = print

    def measure(
        self, pipe: Any, prompts: int, seed: int, steps: int, frames: int, error_bound: float | None
    ) -> tuple[list[str], dict[str, Any]]:
        """`prompts` captions of the moving world for the compression runs, and the judged reuse (hits
        resume from states as the cache stores them, at `error_bound`)."""
        from bench.quality.video import video_prompts
        from bench.video.quality import measure_reuse_quality

        quality = measure_reuse_quality(
            pipe,
            self.judge,
            requests=self.requests,
            steps=steps,
            k=self.k,
            frames=frames,
            error_bound=error_bound,
            log=self.log,
        )
        return video_prompts(prompts, seed)[0], quality


def _detail(figures: CompressionFigures) -> dict[str, Any]:
    detail = asdict(figures)
    detail.pop("compression")
    detail.pop("resume_error")
    return detail


def format_table(result: VideoBench) -> str:
    lines = [
        f"compression ({result.model}, {result.compression_detail['prompts']} prompts, stored "
        f"{result.compression_detail['stored']}, error bound {result.compression_detail['error_bound']}): "
        f"intra {result.compression['intra']}x, inter {result.compression['inter']}x, "
        f"total {result.compression['total']}x; resume error {result.resume_error}",
        f"trace {result.trace}, {result.requests} requests, table {result.k_table}, "
        f"budget {result.budget_bytes / 2**30:.1f} GiB",
        "configuration      hit rate  whole/decoupled  mean k  compute saved  throughput x vanilla",
    ]
    for name, run in result.configurations.items():
        kinds = f"{run['by_kind']['whole']}/{run['by_kind']['decoupled']}"
        speedup = run["throughput_rps"] / run["vanilla_throughput_rps"]
        lines.append(
            f"{name:<18} {run['hit_rate']:>8.3f}  {kinds:>15}  {run['mean_k']:>6.2f}  "
            f"{run['compute_saved']:>13.3f}  {speedup:>20.3f}"
        )
    if result.quality is not None:
        judged, detail = result.quality, result.quality["detail"]
        lines.append(
            f"judged ({judged['requests']} requests, k {judged['k']}): miss {judged['miss_mean']:.3f}; "
            f"drop of a whole-prompt hit {judged['whole_hit_drop']:+.3f} (95% {_span(detail['whole_hit'])}), "
            f"of a stitched hit {judged['stitched_hit_drop']:+.3f} (95% {_span(detail['stitched_hit'])})"
        )
    return "\n".join(lines)


def _span(row: dict[str, Any]) -> str:
    low, high = row["drop_interval_95"]
    return f"{low:+.3f}..{high:+.3f}"
