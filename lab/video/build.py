"""The video parts of `reprise models train`: the video judge and the text-to-video model.

They run after every image component (lab.build), from what those left in the weights directory (the
image judge, vae-a, unet-large), each from the run's seed plus its own offset: the image components'
bytes do not depend on them, and `reprise models train --only video-judge,unet-video` trains them again
alone from the committed image weights, with the manifest's seed, to the bytes of the whole run.

Both train on VIDEO_THREADS thread with deterministic algorithms (the image components on
lab.training.THREADS), within the kernels lab.build pins. Seconds on one core of the shared 2-core
machine: the manifest's `seconds` (video-judge, video-pool, unet-video).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

from lab.judge import Judge
from lab.training import Log, deterministic
from lab.video.judge import SEED_OFFSET, VideoJudge, train_frame_reader, train_motion_head, validate
from lab.video.training import VIDEO, VIDEO_SMOKE, VIDEO_THREADS, VIDEO_UNET, train_video_model

VIDEO_JUDGE: Final = "video-judge"
VIDEO_PARTS: Final = (VIDEO_JUDGE, VIDEO_UNET)


@dataclass(frozen=True, slots=True)
class VideoJudgeRecipe:
    frame_steps: (
        int  # fine-tuning of the image judge's network on moving frames (8 videos + 64 stills a step)
    )
    motion_steps: int  # the motion head, 32 videos a step
    heldout: int  # held-out moving renders of the validation


JUDGE_RECIPE: Final = VideoJudgeRecipe(frame_steps=200, motion_steps=400, heldout=300)
JUDGE_SMOKE: Final = VideoJudgeRecipe(frame_steps=3, motion_steps=3, heldout=8)


def train_video(
    weights: Path, *, seed: int, smoke: bool, log: Log = print, only: tuple[str, ...] = VIDEO_PARTS
) -> dict[str, Any]:
    """Train the video parts named in `only` into `weights` (the image components there);
    {seconds, recipe, validation (None when the judge was not trained)}."""
    unknown = set(only) - set(VIDEO_PARTS)
    if unknown:
        raise ValueError(f"no video part {sorted(unknown)}: {list(VIDEO_PARTS)}")
    judge_recipe, model_recipe = (JUDGE_SMOKE, VIDEO_SMOKE) if smoke else (JUDGE_RECIPE, VIDEO)
    seconds: dict[str, float] = {}
    validation = None
    with deterministic(VIDEO_THREADS):
        if VIDEO_JUDGE in only:
            started = time.perf_counter()
            validation = train_video_judge(weights, judge_recipe, seed=seed, log=log)
            seconds[VIDEO_JUDGE] = time.perf_counter() - started
        if VIDEO_UNET in only:
            seconds |= train_video_model(weights, model_recipe, seed=seed, log=log)
    recipe = {"video_judge": asdict(judge_recipe), "video_model": asdict(model_recipe)}
    return {"seconds": seconds, "recipe": recipe, "validation": validation}


def train_video_judge(weights: Path, recipe: VideoJudgeRecipe, *, seed: int, log: Log) -> dict[str, Any]:
    """The frame reader (from weights/judge) and the motion head, validated and saved in
    weights/video-judge; returns the validation."""
    image_judge = Judge.load(weights / "judge", validated=False)
    frames = train_frame_reader(image_judge.network, recipe.frame_steps, seed=seed + SEED_OFFSET, log=log)
    motion = train_motion_head(recipe.motion_steps, seed=seed + SEED_OFFSET + 1, log=log)
    # validated as it is saved, in float16 (VideoJudge.save), and read back in float32
    judge = VideoJudge(frames.half().float(), motion.half().float())
    validation = validate(judge, image_judge, recipe.heldout)
    judge.save(weights / VIDEO_JUDGE, validation=validation)
    return validation


def manifest_entries(video: dict[str, Any], manifest: dict[str, Any] | None = None) -> dict[str, Any]:
    """The manifest's record of the video parts: their recipe, and the video judge's validation (kept
    from `manifest` when the judge was not trained again)."""
    kept = (manifest or {}).get("video_judge_validation")
    return {
        "video_recipe": video["recipe"],
        "video_threads": VIDEO_THREADS,
        "video_judge_validation": video["validation"] if video["validation"] is not None else kept,
    }
