"""The quality lab's world: small scenes with composable attributes, drawn procedurally.

A scene is a background (colour, texture) and one or two objects (shape, colour, size). One object
stands on the left, in the centre or on the right; two stand side by side (the first named on the
left) or one above the other (the first named on top). Everything is 64x64 pixels, the native size
of the lab's models (a VAE of factor 8 gives an 8x8 latent), and coarse enough for that latent:
objects are at least 12 pixels across and textures repeat every 16 pixels.

The attributes a scene shows are what the judge reads and what a prompt asks for
(`Scene.attributes`): background colour and texture, the arrangement, and shape, colour and size
of slot "a" (the only object, or the left/top one) and slot "b" (the right/bottom one).

Colours come in near pairs (red/orange, blue/purple, white/gray) so that a caption differing in
one word names a different image. Sampling and drawing are seeded: the same seed gives the same
scenes and pixels on every machine (numpy's PCG64).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

import numpy as np
import numpy.typing as npt

SIZE: Final = 64  # pixels per side

SHAPES: Final = ("circle", "square", "triangle")
OBJECT_COLORS: Final = MappingProxyType(
    {
        "red": (215, 35, 35),
        "orange": (245, 145, 20),
        "green": (35, 165, 60),
        "blue": (40, 75, 215),
        "purple": (140, 45, 175),
    }
)
SIZES: Final = MappingProxyType({"small": 7, "large": 12})  # radius (half side) in pixels
BACKGROUND_COLORS: Final = MappingProxyType(
    {"white": (235, 235, 235), "gray": (125, 125, 125), "black": (20, 20, 20), "yellow": (230, 210, 70)}
)
TEXTURES: Final = ("plain", "striped", "checkered")
SINGLE_POSITIONS: Final = ("left", "center", "right")
PAIR_LAYOUTS: Final = ("horizontal", "vertical")
ARRANGEMENTS: Final = SINGLE_POSITIONS + PAIR_LAYOUTS

# Attribute name -> its values, in the order the judge's heads use.
ATTRIBUTES: Final = MappingProxyType(
    {
        "background_color": tuple(BACKGROUND_COLORS),
        "background_texture": TEXTURES,
        "arrangement": ARRANGEMENTS,
        "a_shape": SHAPES,
        "a_color": tuple(OBJECT_COLORS),
        "a_size": tuple(SIZES),
        "b_shape": SHAPES,
        "b_color": tuple(OBJECT_COLORS),
        "b_size": tuple(SIZES),
    }
)
PAIR_SHARE: Final = 0.4  # fraction of sampled scenes with two objects
_TEXTURE_PERIOD: Final = 16
_CENTRES_SINGLE: Final = MappingProxyType({"left": (17, 32), "center": (32, 32), "right": (47, 32)})
_CENTRES_PAIR: Final = MappingProxyType(
    {"horizontal": ((18, 32), (46, 32)), "vertical": ((32, 18), (32, 46))}
)
_JITTER: Final = 2  # pixels an object's centre may move when drawn with jitter


@dataclass(frozen=True, slots=True)
class Thing:
    """One object of a scene."""

    shape: str
    color: str
    size: str


@dataclass(frozen=True, slots=True)
class Scene:
    """A background and one or two objects; `arrangement` places them (see the module doc)."""

    background_color: str
    background_texture: str
    arrangement: str
    things: tuple[Thing, ...]

    def __post_init__(self) -> None:
        pair = self.arrangement in PAIR_LAYOUTS
        if self.arrangement not in ARRANGEMENTS or len(self.things) != (2 if pair else 1):
            raise ValueError(f"arrangement {self.arrangement!r} does not fit {len(self.things)} object(s)")
        if self.background_color not in BACKGROUND_COLORS or self.background_texture not in TEXTURES:
            raise ValueError(f"unknown background {self.background_color!r} {self.background_texture!r}")
        for thing in self.things:
            if thing.shape not in SHAPES or thing.color not in OBJECT_COLORS or thing.size not in SIZES:
                raise ValueError(f"unknown object {thing}")

    def attributes(self) -> dict[str, str]:
        """What the scene shows, by attribute name (slot b only with two objects)."""
        shown = {
            "background_color": self.background_color,
            "background_texture": self.background_texture,
            "arrangement": self.arrangement,
        }
        for slot, thing in zip("ab", self.things, strict=False):
            shown |= {f"{slot}_shape": thing.shape, f"{slot}_color": thing.color, f"{slot}_size": thing.size}
        return shown


def sample_thing(rng: np.random.Generator) -> Thing:
    return Thing(
        shape=str(rng.choice(SHAPES)),
        color=str(rng.choice(tuple(OBJECT_COLORS))),
        size=str(rng.choice(tuple(SIZES))),
    )


def sample_scene(rng: np.random.Generator) -> Scene:
    """A scene drawn uniformly over every attribute (PAIR_SHARE of them with two objects)."""
    background = str(rng.choice(tuple(BACKGROUND_COLORS)))
    texture = str(rng.choice(TEXTURES))
    if rng.random() < PAIR_SHARE:
        layout = str(rng.choice(PAIR_LAYOUTS))
        return Scene(background, texture, layout, (sample_thing(rng), sample_thing(rng)))
    return Scene(background, texture, str(rng.choice(SINGLE_POSITIONS)), (sample_thing(rng),))


def scene_from_attributes(shown: dict[str, str]) -> Scene:
    """The scene whose `attributes()` are `shown` (the inverse of Scene.attributes)."""
    slots = "ab" if shown["arrangement"] in PAIR_LAYOUTS else "a"
    things = tuple(Thing(shown[f"{s}_shape"], shown[f"{s}_color"], shown[f"{s}_size"]) for s in slots)
    return Scene(shown["background_color"], shown["background_texture"], shown["arrangement"], things)


def near_miss(scene: Scene, rng: np.random.Generator) -> Scene:
    """A scene differing from `scene` in exactly one attribute it shows (e.g. red -> orange)."""
    shown = scene.attributes()
    name = str(rng.choice(sorted(shown)))
    values = ATTRIBUTES[name]
    if name == "arrangement":  # keep the object count: left/center/right among themselves
        values = PAIR_LAYOUTS if shown[name] in PAIR_LAYOUTS else SINGLE_POSITIONS
    others = [value for value in values if value != shown[name]]
    return scene_from_attributes(shown | {name: str(rng.choice(others))})


Image = npt.NDArray[np.uint8]


def render(scene: Scene, rng: np.random.Generator | None = None) -> Image:
    """The scene as a (64, 64, 3) uint8 RGB array; with `rng`, objects move by up to 2 pixels and
    change size by up to 1 (variety for training), without it they sit exactly in place."""
    return render_with_mask(scene, rng)[0]


def render_with_mask(
    scene: Scene, rng: np.random.Generator | None = None
) -> tuple[Image, npt.NDArray[np.bool_]]:
    """`render`, and the mask of the pixels its objects cover."""
    image = _background(scene.background_color, scene.background_texture)
    covered = np.zeros((SIZE, SIZE), dtype=bool)
    if scene.arrangement in PAIR_LAYOUTS:
        centres: tuple[tuple[int, int], ...] = _CENTRES_PAIR[scene.arrangement]
    else:
        centres = (_CENTRES_SINGLE[scene.arrangement],)
    for thing, (cx, cy) in zip(scene.things, centres, strict=True):
        radius = SIZES[thing.size]
        if rng is not None:
            cx += int(rng.integers(-_JITTER, _JITTER + 1))
            cy += int(rng.integers(-_JITTER, _JITTER + 1))
            radius += int(rng.integers(-1, 2))
        mask = _mask(thing.shape, cx, cy, radius)
        image[mask] = OBJECT_COLORS[thing.color]
        covered |= mask
    return image, covered


def _background(color: str, texture: str) -> Image:
    base = np.array(BACKGROUND_COLORS[color], dtype=np.float32)
    # The texture's second tone: darker on light backgrounds, lighter on black.
    other = base * 0.55 if base.mean() > 60 else base + 90
    ys, xs = np.mgrid[0:SIZE, 0:SIZE]
    half = _TEXTURE_PERIOD // 2
    if texture == "striped":
        second = (xs // half) % 2 == 1
    elif texture == "checkered":
        second = ((xs // half) + (ys // half)) % 2 == 1
    else:
        second = np.zeros((SIZE, SIZE), dtype=bool)
    image = np.where(second[..., None], other, base)
    return np.clip(image, 0, 255).astype(np.uint8)


def _mask(shape: str, cx: int, cy: int, radius: int) -> npt.NDArray[np.bool_]:
    ys, xs = np.mgrid[0:SIZE, 0:SIZE]
    dx, dy = xs - cx, ys - cy
    if shape == "circle":
        return np.asarray(dx * dx + dy * dy <= radius * radius)
    if shape == "square":
        return np.asarray((np.abs(dx) <= radius) & (np.abs(dy) <= radius))
    # An upward triangle with its base on the bottom of the bounding square.
    inside_rows = (dy >= -radius) & (dy <= radius)
    half_width = (dy + radius) / 2.0
    return np.asarray(inside_rows & (np.abs(dx) <= half_width))
