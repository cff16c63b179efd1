"""The judged quality of FlexCache's reuse on the lab's trained video model (`reprise bench video`).

For each of `requests` held-out moving scenes (lab.motion), with a caption c (the request):
- miss: c generated fresh, all T steps, from the request's seed;
- whole-prompt hit: another caption of the same scene (a paraphrase, lab.motion_captions) generated
  from another seed and captured at k; c resumes from that state (NIRVANA 2.2, FlexCache 3.2);
- stitched hit (FlexCache 4.2.2): an object entry (the same object and motion on another background)
  and a background entry (another object and motion on the same background and pan), each generated
  from its own seed and captured at k; their states at k are stitched by each entry's object mask,
  found by the service's segmenter on the entry's final latent (workers.runtime.stitching: the trained
  model's own latent statistics, not a judge's localisation), and c resumes from the stitched state.
Hits resume from the entries' states as the cache stores them: each entry's captured states (FlexCache's
key steps, and k) through db.codec.video at `error_bound` (the cache's, settings.video_state_error_bound)
and back. The whole-prompt hit also resumes from the exact state: `codec_drop` is what storing cost it.
The video judge (lab.video.judge) scores every video for c; a hit's drop is the miss's quality less
the hit's, per request, with a 95% bootstrap interval of its mean. k is one of NIRVANA's key steps
(`k`, default 10 of T = 50: mid-table, where a cached state already holds the layout).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from bench.quality.video import FRAMES_SIZE, interval
from core.params import VideoParams
from db.codec.video import decode_video_state, encode_video_states

DEFAULT_K = 10
DEFAULT_REQUESTS = 8
QUALITY_SEED = 910_000  # held-out scenes: a seed no training run uses


def _params(prompt: str, seed: int, steps: int, frames: int, guidance: float) -> VideoParams:
    return VideoParams(
        prompt=prompt,
        seed=seed,
        steps=steps,
        width=FRAMES_SIZE,
        height=FRAMES_SIZE,
        frames=frames,
        fps=8,
        guidance=guidance,
    )


def _requests(count: int, seed: int) -> list[dict[str, Any]]:
    """Per request: the scene's caption, a paraphrase, and captions of its object and background entries."""
    from lab.motion import sample_moving_scene
    from lab.motion_captions import caption

    rng = np.random.default_rng(seed)
    requests = []
    for _ in range(count):
        scene = sample_moving_scene(rng)
        other = sample_moving_scene(rng)
        while other.background_color == scene.background_color or other.thing == scene.thing:
            other = sample_moving_scene(rng)
        # the object on the other scene's background; the other scene's object on this background
        on_other = replace(
            scene,
            background_color=other.background_color,
            background_texture=other.background_texture,
            background_motion=other.background_motion,
        )
        under_other = replace(
            other,
            background_color=scene.background_color,
            background_texture=scene.background_texture,
            background_motion=scene.background_motion,
        )
        requests.append(
            {
                "prompt": caption(scene, rng),
                "paraphrase": caption(scene, rng),
                "object": caption(on_other, rng),
                "background": caption(under_other, rng),
            }
        )
    return requests


def measure_reuse_quality(
    pipe: Any,
    judge: Any,
    *,
    requests: int = DEFAULT_REQUESTS,
    steps: int = 50,
    k: int = DEFAULT_K,
    frames: int = 8,
    guidance: float = 7.5,
    error_bound: float | None = None,
    log: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """{miss_mean, whole_hit_drop, stitched_hit_drop} and their detail (module doc)."""
    from workers.runtime.stitching import object_mask, stitch
    from workers.runtime.video import CAPTURE_STEPS, decode_frames, generate_video

    def run(prompt: str, seed: int, start: Any = None) -> Any:
        params = _params(prompt, seed, steps, frames, guidance)
        if start is None:
            return generate_video(pipe, params, capture={k, *(s for s in CAPTURE_STEPS if s < steps)})
        return generate_video(pipe, params, start_latent=start, start_step=k, capture=set())

    def stored(entry: Any) -> Any:
        return stored_state(entry.captured, k, error_bound)

    scores: dict[str, list[float]] = {"miss": [], "whole_hit": [], "stitched_hit": [], "whole_hit_exact": []}
    for index, request in enumerate(_requests(requests, QUALITY_SEED)):
        seed = QUALITY_SEED + 10 * index
        miss = run(request["prompt"], seed)
        source = run(request["paraphrase"], seed + 1)
        whole = run(request["prompt"], seed, start=stored(source))
        exact = run(request["prompt"], seed, start=source.captured[k])
        objects, backgrounds = run(request["object"], seed + 2), run(request["background"], seed + 3)
        stitched_state = stitch(
            stored(objects),
            object_mask(objects.final_latent),
            stored(backgrounds),
            object_mask(backgrounds.final_latent),
        )
        stitched = run(request["prompt"], seed, start=stitched_state)
        results = (miss, whole, stitched, exact)
        videos = [decode_frames(pipe, result.final_latent) for result in results]
        judged = judge.score(videos, [request["prompt"]] * len(results))
        for name, score in zip(scores, judged, strict=True):
            scores[name].append(float(score or 0.0))
        log(f"reuse quality {index + 1}/{requests}")
    settings = {"requests": requests, "steps": steps, "k": k, "frames": frames, "guidance": guidance}
    return _report(scores, **settings, error_bound=error_bound)


def stored_state(captured: dict[int, Any], k: int, error_bound: float | None) -> Any:
    """State k of an entry whose captured states went through the cache's codec (db.codec.video)."""
    states = {step: np.asarray(latent, dtype=np.float32) for step, latent in captured.items()}
    encoded = encode_video_states(states, family="bench", error_bound=error_bound)
    return decode_video_state(encoded.states[k], encoded.base)


def _report(scores: dict[str, list[float]], **settings: Any) -> dict[str, Any]:
    miss = np.asarray(scores["miss"])
    detail: dict[str, Any] = {"miss": {"mean": float(miss.mean()), "interval_95": list(interval(miss))}}
    exact = np.asarray(scores["whole_hit_exact"]) - np.asarray(scores["whole_hit"])
    detail["codec"] = {"drop": float(exact.mean()), "drop_interval_95": list(interval(exact))}
    drops = {}
    for name in ("whole_hit", "stitched_hit"):
        values = np.asarray(scores[name])
        drop = miss - values
        drops[name] = float(drop.mean())
        detail[name] = {
            "mean": float(values.mean()),
            "drop": float(drop.mean()),
            "drop_interval_95": list(interval(drop)),
        }
    return {
        "miss_mean": float(miss.mean()),
        "whole_hit_drop": drops["whole_hit"],
        "stitched_hit_drop": drops["stitched_hit"],
        "codec_drop": detail["codec"]["drop"],
        "detail": detail,
        "scores": scores,
        **settings,
    }
