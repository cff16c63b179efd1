"""The quality lab's moving world: the lab's one-object scenes, animated over a few frames.

A moving scene is a background (colour, texture) that stays or pans, and one object (shape, colour,
size) that moves to the right, to the left, up or down across the frame, grows, or stays where it
is (on the left, in the centre or on the right). Every video is FRAMES frames of the image world's
64x64 pixels (lab.world.SIZE: the lab autoencoder's native size, an 8x8 latent per frame).

What a video shows is split in two (`MovingScene.frame_attributes`, `motion_attributes`):
- per frame, what the image judge (lab.judge) reads in a still: background colour and texture, the
  object's shape and colour, its size (not for a growing object: it changes), and its place
  (`arrangement`, only for an object that stays: a moving one passes every place);
- over the frames, what the video judge's motion head (lab.video.judge) reads: `motion` (right,
  left, up, down, grows, stays) and `background_motion` (still, pans; only on a striped or
  checkered background, since a plain one looks the same panned).

Paths: a horizontal move crosses from x = 14 to 50 (or back) at the centre's height, a vertical one
from y = 50 to 14 (up) or back (down) at the centre's x; a growing object goes from the small radius
(7) to the large (12) in the centre; a pan shifts the texture 2 pixels a frame to the left (the
textures repeat every 16 pixels, so 8 frames pan 14). With `rng`, the path starts up to 2 pixels off
and the radius is 1 pixel off (as lab.world.render jitters stills), and a pan starts at a random
phase. Sampling and drawing are seeded (numpy's PCG64), as the image world's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Final

import numpy as np
import numpy.typing as npt

from lab.world import (
    ATTRIBUTES,
    BACKGROUND_COLORS,
    OBJECT_COLORS,
    SHAPES,
    SINGLE_POSITIONS,
    SIZE,
    SIZES,
    TEXTURES,
    Thing,
    _background,
    _mask,
    sample_thing,
)

FRAMES: Final = 8
MOTIONS: Final = ("right", "left", "up", "down", "grows", "stays")
BACKGROUND_MOTIONS: Final = ("still", "pans")
MOTION_ATTRIBUTES: Final = MappingProxyType({"motion": MOTIONS, "background_motion": BACKGROUND_MOTIONS})
PAN_PIXELS: Final = 2  # texture shift per frame (to the left)
PAN_SHARE: Final = 0.5  # share of textured backgrounds that pan
_PATH: Final = (14, 50)  # first and last centre coordinate of a move across the frame
_JITTER: Final = 2

Video = npt.NDArray[np.uint8]
"""A video's frames, (F, 64, 64, 3) uint8 RGB."""


@dataclass(frozen=True, slots=True)
class MovingScene:
    """One object moving in front of a background; `position` places an object that stays
    (left, center, right) and is "center" for every other motion."""

    background_color: str
    background_texture: str
    thing: Thing
    motion: str
    background_motion: str = "still"
    position: str = "center"

    def __post_init__(self) -> None:
        if self.background_color not in BACKGROUND_COLORS or self.background_texture not in TEXTURES:
            raise ValueError(f"unknown background {self.background_color!r} {self.background_texture!r}")
        if self.motion not in MOTIONS or self.background_motion not in BACKGROUND_MOTIONS:
            raise ValueError(f"unknown motion {self.motion!r} / {self.background_motion!r}")
        if (
            self.thing.shape not in SHAPES
            or self.thing.color not in OBJECT_COLORS
            or self.thing.size not in SIZES
        ):
            raise ValueError(f"unknown object {self.thing}")
        if self.position not in SINGLE_POSITIONS or (self.motion != "stays" and self.position != "center"):
            raise ValueError(f"position {self.position!r} with motion {self.motion!r}")
        if self.background_motion == "pans" and self.background_texture == "plain":
            raise ValueError("a plain background cannot be seen to pan")

    def frame_attributes(self) -> dict[str, str]:
        """What every frame shows, in the image judge's attribute names (lab.world.ATTRIBUTES)."""
        shown = {
            "background_color": self.background_color,
            "background_texture": self.background_texture,
            "a_shape": self.thing.shape,
            "a_color": self.thing.color,
        }
        if self.motion != "grows":
            shown["a_size"] = self.thing.size
        if self.motion == "stays":
            shown["arrangement"] = self.position
        return shown

    def motion_attributes(self) -> dict[str, str]:
        """What the frames show together: the object's motion, and the background's when it can be seen."""
        shown = {"motion": self.motion}
        if self.background_texture != "plain":
            shown["background_motion"] = self.background_motion
        return shown

    def attributes(self) -> dict[str, str]:
        """Everything the scene shows (a caption asks for exactly this: lab.motion_captions.parse)."""
        return self.frame_attributes() | self.motion_attributes()


def sample_moving_scene(rng: np.random.Generator) -> MovingScene:
    """A moving scene drawn uniformly over every attribute (a textured background pans half the time)."""
    background = str(rng.choice(tuple(BACKGROUND_COLORS)))
    texture = str(rng.choice(TEXTURES))
    thing = sample_thing(rng)
    motion = str(rng.choice(MOTIONS))
    position = str(rng.choice(SINGLE_POSITIONS)) if motion == "stays" else "center"
    pans = texture != "plain" and bool(rng.random() < PAN_SHARE)
    if motion == "grows":  # the caption names no size: one size, so that a scene has one rendering
        thing = replace(thing, size="small")
    return MovingScene(background, texture, thing, motion, "pans" if pans else "still", position)


def scene_from_attributes(shown: dict[str, str]) -> MovingScene:
    """The moving scene whose `attributes()` are `shown` (the inverse of MovingScene.attributes)."""
    thing = Thing(shown["a_shape"], shown["a_color"], shown.get("a_size", "small"))
    return MovingScene(
        shown["background_color"],
        shown["background_texture"],
        thing,
        shown["motion"],
        shown.get("background_motion", "still"),
        shown.get("arrangement", "center"),
    )


def near_miss(scene: MovingScene, rng: np.random.Generator) -> MovingScene:
    """A scene differing from `scene` in exactly one attribute its caption names (red -> orange, moving
    right -> moving left, still -> panning). The motion changes only among the four moves: a staying
    or growing object shows other attributes (its place, no size), so changing it changes two."""
    shown = scene.attributes()
    names = sorted(name for name in shown if name != "motion" or shown[name] in _MOVES)
    name = str(rng.choice(names))
    others = [value for value in _values(name, shown) if value != shown[name]]
    return scene_from_attributes(shown | {name: str(rng.choice(others))})


_MOVES: Final = ("right", "left", "up", "down")


def _values(name: str, shown: dict[str, str]) -> tuple[str, ...]:
    if name == "motion":
        return _MOVES
    if name == "arrangement":
        return SINGLE_POSITIONS
    if name == "background_texture":  # a textured background stays textured (its motion is named)
        return ("striped", "checkered")
    if name in MOTION_ATTRIBUTES:
        return tuple(MOTION_ATTRIBUTES[name])
    return tuple(ATTRIBUTES[name])


def object_path(scene: MovingScene, rng: np.random.Generator | None = None) -> list[tuple[int, int, int]]:
    """The object's (x, y, radius) in every frame."""
    dx = dy = dr = 0
    if rng is not None:
        dx, dy = (int(value) for value in rng.integers(-_JITTER, _JITTER + 1, size=2))
        dr = int(rng.integers(-1, 2))
    steps = np.linspace(0.0, 1.0, FRAMES)
    first, last = _PATH
    across = [round(first + (last - first) * t) for t in steps]
    radius = SIZES[scene.thing.size] + dr
    centre = {"left": 17, "center": 32, "right": 47}[scene.position]
    if scene.motion == "right":
        return [(x + dx, 32 + dy, radius) for x in across]
    if scene.motion == "left":
        return [(x + dx, 32 + dy, radius) for x in reversed(across)]
    if scene.motion == "up":
        return [(32 + dx, y + dy, radius) for y in reversed(across)]
    if scene.motion == "down":
        return [(32 + dx, y + dy, radius) for y in across]
    if scene.motion == "grows":
        small, large = SIZES["small"], SIZES["large"]
        return [(32 + dx, 32 + dy, round(small + (large - small) * t) + dr) for t in steps]
    return [(centre + dx, 32 + dy, radius)] * FRAMES


def render_video(scene: MovingScene, rng: np.random.Generator | None = None) -> Video:
    """The scene's FRAMES frames, (F, 64, 64, 3) uint8; with `rng`, jittered (module doc)."""
    return render_video_with_masks(scene, rng)[0]


def render_video_with_masks(
    scene: MovingScene, rng: np.random.Generator | None = None
) -> tuple[Video, npt.NDArray[np.bool_]]:
    """`render_video`, and the (F, 64, 64) masks of the pixels the object covers."""
    path = object_path(scene, rng)
    phase = int(rng.integers(0, 16)) if rng is not None and scene.background_motion == "pans" else 0
    ground = _background(scene.background_color, scene.background_texture)
    frames = np.empty((FRAMES, SIZE, SIZE, 3), dtype=np.uint8)
    masks = np.zeros((FRAMES, SIZE, SIZE), dtype=bool)
    for index, (x, y, radius) in enumerate(path):
        shift = phase + (PAN_PIXELS * index if scene.background_motion == "pans" else 0)
        frame = np.roll(ground, -shift, axis=1) if shift else ground.copy()
        mask = _mask(scene.thing.shape, x, y, radius)
        frame[mask] = OBJECT_COLORS[scene.thing.color]
        frames[index], masks[index] = frame, mask
    return frames, masks
