"""Captions of the lab's moving scenes (lab.motion), and the parser that reads them back.

A caption names the object and its motion, then the background behind it: "a small red circle
moving to the right in front of a striped yellow backdrop", "a tiny crimson disc standing still on
the left against a panning banded golden background". Every word has synonyms (the image captions'
tables, lab.captions, and the motion phrases below), so paraphrases share few words. The
background always follows a scene preposition ("in front of", "against", "on") and ends in
"background" or "backdrop", so FlexCache's decoupling parser (jobs.policies.decoupling) splits every
caption into the object with its motion and the background with its pan (tested).

`parse(caption(scene, rng)) == scene.attributes()` for every scene and template (tested), and
`parse` returns None for a prompt that is not one moving scene of this world (a still caption
included: it names no motion).
"""

from __future__ import annotations

import re
from types import MappingProxyType
from typing import Final

import numpy as np

from lab.captions import (
    BACKGROUND_NOUNS,
    BACKGROUND_OF,
    BACKGROUND_WORDS,
    COLOR_OF,
    COLOR_WORDS,
    POSITION_PHRASES,
    SHAPE_OF,
    SHAPE_WORDS,
    SIZE_OF,
    SIZE_WORDS,
    TEXTURE_OF,
    TEXTURE_WORDS,
    invert_synonyms,
)
from lab.motion import MovingScene

MOTION_PHRASES: Final = MappingProxyType(
    {
        "right": ("moving to the right", "sliding rightward", "travelling to the right"),
        "left": ("moving to the left", "sliding leftward", "travelling to the left"),
        "up": ("moving up", "rising upward", "floating upward"),
        "down": ("moving down", "falling downward", "sinking downward"),
        "grows": ("growing", "getting bigger", "expanding"),
        "stays": ("standing still", "staying put", "resting"),
    }
)
PAN_WORDS: Final = ("panning", "scrolling", "drifting")
VIDEO_TEMPLATES: Final = (
    "a {thing} {motion} in front of a {ground}",
    "a {thing} {motion} against a {ground}",
    "video of a {thing} {motion} on a {ground}",
    "a clip of a {thing} {motion} in front of a {ground}",
)

_PLACES: Final = {
    "left": "left",
    "right": "right",
    "center": "center",
    "middle": "center",
    "centered": "center",
}


_MOTION: Final = invert_synonyms(MOTION_PHRASES)
# Longest phrases first, so that "moving to the right" is read before any shorter phrase in it.
_MOTION_PATTERN: Final = re.compile(
    r"\b(" + "|".join(re.escape(phrase) for phrase in sorted(_MOTION, key=len, reverse=True)) + r")\b"
)


def _pick(rng: np.random.Generator, options: tuple[str, ...]) -> str:
    return str(options[int(rng.integers(len(options)))])


def caption(scene: MovingScene, rng: np.random.Generator) -> str:
    """One caption of `scene`, template and synonyms drawn from `rng`."""
    color = _pick(rng, COLOR_WORDS[scene.thing.color])
    adjectives = color
    if scene.motion != "grows":
        size = _pick(rng, SIZE_WORDS[scene.thing.size])
        adjectives = f"{size} {color}" if rng.random() < 0.7 else f"{color} {size}"
    thing = f"{adjectives} {_pick(rng, SHAPE_WORDS[scene.thing.shape])}"
    motion = _pick(rng, MOTION_PHRASES[scene.motion])
    if scene.motion == "stays":
        motion = f"{motion} {_pick(rng, POSITION_PHRASES[scene.position])}"
    texture = _pick(rng, TEXTURE_WORDS[scene.background_texture])
    ground_color = _pick(rng, BACKGROUND_WORDS[scene.background_color])
    ground = f"{texture} {ground_color}" if rng.random() < 0.6 else f"{ground_color} {texture}"
    if scene.background_motion == "pans":
        ground = f"{_pick(rng, PAN_WORDS)} {ground}"
    ground = f"{ground} {_pick(rng, BACKGROUND_NOUNS)}"
    return _pick(rng, VIDEO_TEMPLATES).format(thing=thing, motion=motion, ground=ground)


def parse(text: str) -> dict[str, str] | None:
    """The attributes a caption asks for (MovingScene.attributes), or None when it does not describe
    one moving scene (no motion or two, no background, no object or two, a contradiction)."""
    lowered = " ".join(re.findall(r"[a-z]+", text.lower()))
    motions = _MOTION_PATTERN.findall(lowered)
    if len(motions) != 1:
        return None
    found: dict[str, str] = {"motion": _MOTION[motions[0]]}
    thing: dict[str, str] = {}
    places: list[str] = []
    for word in _MOTION_PATTERN.sub(" ", lowered).split():
        for table, name in (
            (BACKGROUND_OF, "background_color"),
            (TEXTURE_OF, "background_texture"),
            (COLOR_OF, "a_color"),
            (SIZE_OF, "a_size"),
            (SHAPE_OF, "a_shape"),
        ):
            if word in table and (found | thing).setdefault(name, table[word]) != table[word]:
                return None
            if word in table:
                (thing if name.startswith("a_") else found)[name] = table[word]
        if word in PAN_WORDS:
            found["background_motion"] = "pans"
        elif word in _PLACES:
            places.append(_PLACES[word])
    return _checked(found | thing, places, shapes=sum(word in SHAPE_OF for word in lowered.split()))


def _checked(found: dict[str, str], places: list[str], *, shapes: int) -> dict[str, str] | None:
    """`found` completed (a still textured background, the place of an object that stays) when it is
    one scene, else None."""
    needed = {"background_color", "background_texture", "a_shape", "a_color"}
    if shapes != 1 or not needed <= set(found):
        return None
    grows, stays = found["motion"] == "grows", found["motion"] == "stays"
    if grows == ("a_size" in found) or len(places) != (1 if stays else 0):
        return None
    if stays:
        found["arrangement"] = places[0]
    if found["background_texture"] != "plain":
        found.setdefault("background_motion", "still")
    elif "background_motion" in found:
        return None
    return found


def describe(shown: dict[str, str]) -> str:
    """The canonical caption of a set of attributes (first template, first synonyms)."""
    thing = f"{shown['a_color']} {shown['a_shape']}"
    if "a_size" in shown:
        thing = f"{shown['a_size']} {thing}"
    motion = MOTION_PHRASES[shown["motion"]][0]
    if shown["motion"] == "stays":
        motion = f"{motion} {POSITION_PHRASES[shown['arrangement']][0]}"
    ground = f"{shown['background_texture']} {shown['background_color']} backdrop"
    if shown.get("background_motion") == "pans":
        ground = f"{PAN_WORDS[0]} {ground}"
    return VIDEO_TEMPLATES[0].format(thing=thing, motion=motion, ground=ground)
