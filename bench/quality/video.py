"""`reprise lab quality --video`: how well the video model draws the moving world, judged.

The video model (REPRISE_VIDEO_MODEL's kind: `lab:video` by default here) generates fresh videos of
`prompts` captions of held-out moving scenes (lab.motion), every one all T steps from its own seed; the
video judge (lab.video.judge) scores each: the share of its caption's attributes, motion included,
read on its frames, averaged over frames. Beside it: the true renders of the same scenes (the ceiling),
each caption against another scene's true render (chance: a video that ignores its prompt), the share
of each attribute read, and the video judge's agreement on the generated videos with an analytic
tracker of the asked colour (lab.video.judge.tracked_motion): its accuracy where no label exists.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from core.params import VideoParams
from core.settings import Settings

FRAMES_SIZE = 64  # the lab's frames, pixels per side
BOOTSTRAP = 2000


def video_prompts(count: int, seed: int) -> tuple[list[str], list[Any], list[np.ndarray]]:
    """`count` captions of random moving scenes, the scenes, and a true render of each."""
    from lab.motion import render_video, sample_moving_scene
    from lab.motion_captions import caption

    rng = np.random.default_rng(seed)
    scenes = [sample_moving_scene(rng) for _ in range(count)]
    return [caption(scene, rng) for scene in scenes], scenes, [render_video(scene, rng) for scene in scenes]


def interval(scores: Sequence[float] | np.ndarray, seed: int = 0) -> tuple[float, float]:
    """A 95% bootstrap interval of the mean (percentile method, BOOTSTRAP resamples)."""
    rng = np.random.default_rng(seed)
    values = np.asarray(scores, dtype=np.float64)
    means = values[rng.integers(0, len(values), size=(BOOTSTRAP, len(values)))].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def video_summary(scores: Sequence[float], seconds: float = 0.0) -> dict[str, Any]:
    low, high = interval(scores)
    return {
        "mean": float(np.mean(scores)),
        "interval_95": [low, high],
        "p5": float(np.percentile(scores, 5)),
        "all_attributes": float(np.mean([score == 1.0 for score in scores])),
        "seconds": round(seconds, 1),
    }


def generate_videos(
    pipe: Any, prompts: Sequence[str], *, steps: int, guidance: float, frames: int, log: Callable[[str], None]
) -> list[np.ndarray]:
    """Each prompt's fresh video (seed: its index), all `steps` steps, decoded to uint8 frames."""
    from workers.runtime.video import decode_frames, generate_video

    videos = []
    for index, prompt in enumerate(prompts):
        params = VideoParams(
            prompt=prompt,
            seed=index,
            steps=steps,
            width=FRAMES_SIZE,
            height=FRAMES_SIZE,
            frames=frames,
            fps=8,
            guidance=guidance,
        )
        videos.append(decode_frames(pipe, generate_video(pipe, params).final_latent))
        if (index + 1) % 10 == 0:
            log(f"generated {index + 1}/{len(prompts)}")
    return videos


def attribute_rates(judge: Any, videos: Sequence[np.ndarray], prompts: Sequence[str]) -> dict[str, float]:
    """The share of videos (frame attributes: of frames) in which each asked attribute is read."""
    from lab.motion_captions import parse

    right: dict[str, int] = {}
    total: dict[str, int] = {}
    for (frames, motion), prompt in zip(judge.read(videos), prompts, strict=True):
        for name, value in (parse(prompt) or {}).items():
            readings = [motion] if name in motion else frames
            right[name] = right.get(name, 0) + sum(reading[name] == value for reading in readings)
            total[name] = total.get(name, 0) + len(readings)
    return {name: right[name] / total[name] for name in sorted(total)}


def tracker_agreement(judge: Any, videos: Sequence[np.ndarray], scenes: Sequence[Any]) -> dict[str, Any]:
    """The motion head's reading against the analytic tracker's, on the videos the tracker reads
    (the asked colour found in every frame)."""
    from lab.video.judge import tracked_motion

    tracked = [tracked_motion(video, scene.thing.color) for video, scene in zip(videos, scenes, strict=True)]
    readings = judge.read(videos)
    pairs = [(mine, reading[1]["motion"]) for mine, reading in zip(tracked, readings, strict=True) if mine]
    return {
        "tracked": len(pairs),
        "videos": len(videos),
        "agreement": float(np.mean([a == b for a, b in pairs])) if pairs else None,
    }


def compare_video(
    settings: Settings,
    *,
    prompts: int,
    seed: int,
    guidance: float,
    steps: int | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """The report (module doc) for settings.video_model_name."""
    import torch

    from lab.models import load_video_judge
    from lab.motion import FRAMES
    from lab.video.judge import tracked_motion
    from workers.runtime.video import load_video_pipeline, video_model_source

    judge = load_video_judge(settings)
    texts, scenes, truths = video_prompts(prompts, seed)
    shuffled = truths[1:] + truths[:1]
    pipe = load_video_pipeline(video_model_source(settings), device=torch.device("cpu"), dtype=torch.float32)
    started = time.perf_counter()
    videos = generate_videos(
        pipe, texts, steps=steps or settings.steps, guidance=guidance, frames=FRAMES, log=log
    )
    seconds = time.perf_counter() - started
    scores = [score or 0.0 for score in judge.score(videos, texts)]
    true_tracked = [
        tracked_motion(video, scene.thing.color) for video, scene in zip(truths, scenes, strict=True)
    ]
    return {
        "model": settings.video_model_name,
        "prompts": prompts,
        "steps": steps or settings.steps,
        "guidance": guidance,
        "seed": seed,
        "true_renders": video_summary([score or 0.0 for score in judge.score(truths, texts)]),
        "chance": video_summary([score or 0.0 for score in judge.score(shuffled, texts)]),
        "generated": video_summary(scores, seconds) | {"attributes": attribute_rates(judge, videos, texts)},
        "judge_on_generated": tracker_agreement(judge, videos, scenes),
        "tracker_on_true_renders": float(
            np.mean([mine == scene.motion for mine, scene in zip(true_tracked, scenes, strict=True)])
        ),
    }
