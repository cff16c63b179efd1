"""Video prompt traces for `reprise bench video`: prompts whose objects and backgrounds
recur independently, as FlexCache observes of real video prompts (3.1.2, Fig. 7: the object and the
background of a new prompt each find a close cached match far more often than the whole prompt does).

`lab_video_trace`: the quality lab's world (lab.world) with motion added. A request draws one object
(shape, colour, size) from a pool by Zipf's law and, independently, one background (colour, texture)
from another; the lab's captions (lab.captions, many templates and synonyms) describe the scene and a
motion phrase ends the prompt ("..., drifting to the left"). An object comes back on new backgrounds
and a background under new objects, so a decoupled lookup can serve combinations never cached whole.

`moving_scene_trace`: the same, in the lab's moving world (lab.motion), the one lab:video was trained on
and the video judge reads: an object is a thing with its motion, a background a colour and texture that
stays or pans, each drawn by Zipf's law from its pool, and the caption is lab.motion_captions'
("a small red circle moving to the right in front of a striped yellow backdrop").

`motion_trace`: sentences of a prompts file (the shared DiffusionDB 5k by default) with a motion phrase
added, for a trace whose prompts are real users' and mostly name no background (bench.video.trace's
parser finds one in about a fifth of them, jobs/policies/decoupling.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeVar

import numpy as np

from lab.captions import caption
from lab.world import BACKGROUND_COLORS, SINGLE_POSITIONS, TEXTURES, Scene, sample_thing

MOTIONS = (
    "drifting to the left",
    "sliding to the right",
    "floating upwards",
    "sinking slowly",
    "spinning in place",
    "bouncing gently",
    "moving towards the camera",
    "swaying back and forth",
)
"""Motion phrases; a text-to-video prompt says what moves (VidProM's prompts, FlexCache 6.1)."""

DEFAULT_OBJECTS = 40
DEFAULT_BACKGROUNDS = 20
DEFAULT_ZIPF = 1.0
"""Pool sizes and skew of the lab trace (ours): a few popular objects and settings and a long tail, as
prompt popularity follows a Zipf law (NIRVANA 3, MoDM 3)."""


@dataclass(frozen=True, slots=True)
class Pools:
    """A trace's pools: `objects` objects and `backgrounds` backgrounds, each drawn by Zipf's law."""

    objects: int = DEFAULT_OBJECTS
    backgrounds: int = DEFAULT_BACKGROUNDS
    zipf: float = DEFAULT_ZIPF


Thing = TypeVar("Thing")
Ground = TypeVar("Ground")


def _zipf_choice(rng: np.random.Generator, size: int, count: int, exponent: float) -> np.ndarray:
    weights = 1.0 / np.arange(1, size + 1) ** exponent
    return rng.choice(size, size=count, p=weights / weights.sum())


def _recombined(
    requests: int,
    pools: Pools,
    seed: int,
    *,
    draw_object: Callable[[np.random.Generator], Thing],
    draw_background: Callable[[np.random.Generator], Ground],
) -> tuple[np.random.Generator, list[tuple[Thing, Ground]]]:
    """A pool of `objects` and one of `backgrounds` drawn from the seed's generator, then each request's
    object and background drawn from them independently by Zipf's law; the generator goes on to draw
    the captions."""
    objects, backgrounds, zipf = pools.objects, pools.backgrounds, pools.zipf
    if requests < 1 or objects < 1 or backgrounds < 1 or zipf < 0:
        raise ValueError("requests, objects and backgrounds must be at least 1, zipf at least 0")
    rng = np.random.default_rng(seed)
    things = [draw_object(rng) for _ in range(objects)]
    grounds = [draw_background(rng) for _ in range(backgrounds)]
    object_of = _zipf_choice(rng, objects, requests, zipf)
    ground_of = _zipf_choice(rng, backgrounds, requests, zipf)
    return rng, [(things[int(o)], grounds[int(g)]) for o, g in zip(object_of, ground_of, strict=True)]


def lab_video_trace(requests: int, *, pools: Pools = Pools(), seed: int = 0) -> list[str]:
    """`requests` video prompts from the lab's world (module doc). Deterministic for a seed."""

    def draw_background(rng: np.random.Generator) -> tuple[str, str]:
        return str(rng.choice(tuple(BACKGROUND_COLORS))), str(rng.choice(TEXTURES))

    rng, pairs = _recombined(requests, pools, seed, draw_object=sample_thing, draw_background=draw_background)
    prompts = []
    for thing, (color, texture) in pairs:
        scene = Scene(color, texture, str(rng.choice(SINGLE_POSITIONS)), (thing,))
        prompts.append(f"{caption(scene, rng)}, {rng.choice(MOTIONS)}")
    return prompts


def moving_scene_trace(requests: int, *, pools: Pools = Pools(), seed: int = 0) -> list[str]:
    """`requests` captions of moving scenes (module doc): objects and backgrounds drawn independently
    from pools of scenes lab.motion.sample_moving_scene draws. Deterministic for a seed."""
    from lab.motion import sample_moving_scene
    from lab.motion_captions import caption as moving_caption

    draw = sample_moving_scene
    rng, pairs = _recombined(requests, pools, seed, draw_object=draw, draw_background=draw)
    prompts = []
    for scene, ground in pairs:
        moved = replace(
            scene,
            background_color=ground.background_color,
            background_texture=ground.background_texture,
            background_motion=ground.background_motion,
        )
        prompts.append(moving_caption(moved, rng))
    return prompts


def motion_trace(lines: list[str], requests: int, *, zipf: float = DEFAULT_ZIPF, seed: int = 0) -> list[str]:
    """`requests` prompts drawn from `lines` by Zipf's law over their order, each with a motion phrase."""
    if not lines or requests < 1:
        raise ValueError("motion_trace needs prompts and at least one request")
    rng = np.random.default_rng(seed)
    chosen = _zipf_choice(rng, len(lines), requests, zipf)
    return [f"{lines[int(i)].strip().rstrip(',')}, {rng.choice(MOTIONS)}" for i in chosen]
