"""Captions of the lab's scenes: many templates and synonyms, and the parser that reads them back.

`caption(scene, rng)` writes one of several sentence templates with a synonym drawn for every
word, so paraphrases of one scene share few words yet embed close together; `parse(text)` reads
the attributes back from any caption (and returns None for a prompt that is not of this world).

The parser works by vocabulary: the object colours, background colours, textures, shapes, sizes
and place words are disjoint sets, so each word says which attribute it names. Objects are read in
order (each shape word closes an object, the colour and size words before it belong to it); a
relation word between two objects orders them ("a red circle right of a blue square" puts the
square in slot a, the left one). `parse(caption(scene, rng)) == scene.attributes()` for every
scene and template (tested).
"""

from __future__ import annotations

import re
from types import MappingProxyType
from typing import Final

import numpy as np

from lab.world import PAIR_LAYOUTS, Scene, Thing

COLOR_WORDS: Final = MappingProxyType(
    {
        "red": ("red", "crimson", "scarlet"),
        "orange": ("orange", "tangerine", "amber"),
        "green": ("green", "emerald", "lime"),
        "blue": ("blue", "cobalt", "azure"),
        "purple": ("purple", "violet", "lilac"),
    }
)
BACKGROUND_WORDS: Final = MappingProxyType(
    {
        "white": ("white", "ivory", "snowy"),
        "gray": ("gray", "grey", "silver"),
        "black": ("black", "ebony", "jet"),
        "yellow": ("yellow", "golden", "lemon"),
    }
)
TEXTURE_WORDS: Final = MappingProxyType(
    {
        "plain": ("plain", "solid", "flat"),
        "striped": ("striped", "stripy", "banded"),
        "checkered": ("checkered", "chequered", "checked"),
    }
)
SHAPE_WORDS: Final = MappingProxyType(
    {
        "circle": ("circle", "disk", "disc"),
        "square": ("square", "box", "block"),
        "triangle": ("triangle", "wedge"),
    }
)
SIZE_WORDS: Final = MappingProxyType(
    {"small": ("small", "little", "tiny"), "large": ("large", "big", "huge")}
)
POSITION_PHRASES: Final = MappingProxyType(
    {
        "left": ("on the left", "at the left side", "in the left part"),
        "center": ("in the center", "in the middle", "centered"),
        "right": ("on the right", "at the right side", "in the right part"),
    }
)
# Relation of the first named object to the second -> (layout, whether the first takes slot a).
RELATION_PHRASES: Final = MappingProxyType(
    {
        ("horizontal", True): ("left of", "to the left of"),
        ("horizontal", False): ("right of", "to the right of"),
        ("vertical", True): ("above", "over", "on top of"),
        ("vertical", False): ("below", "under", "beneath"),
    }
)
BACKGROUND_NOUNS: Final = ("background", "backdrop")

SINGLE_TEMPLATES: Final = (
    "a {thing} {position} on a {ground}",
    "{position}, a {thing} against a {ground}",
    "an image of a {thing} {position}, {ground}",
    "{ground} with a {thing} {position}",
    "picture of a {thing} {position} in front of a {ground}",
)
PAIR_TEMPLATES: Final = (
    "a {first} {relation} a {second} on a {ground}",
    "{ground}: a {first} {relation} a {second}",
    "an image of a {first} placed {relation} a {second}, {ground}",
    "a {first} {relation} a {second} against a {ground}",
)

_PLACE_WORDS: Final = MappingProxyType(
    {
        "left": "left",
        "right": "right",
        "center": "center",
        "middle": "center",
        "centered": "center",
        "above": "above",
        "over": "above",
        "top": "above",
        "below": "below",
        "under": "below",
        "beneath": "below",
    }
)


def invert_synonyms(words: MappingProxyType[str, tuple[str, ...]]) -> dict[str, str]:
    """Each synonym to the value it names (the parsers' reading tables)."""
    return {word: value for value, synonyms in words.items() for word in synonyms}


COLOR_OF: Final = invert_synonyms(COLOR_WORDS)
BACKGROUND_OF: Final = invert_synonyms(BACKGROUND_WORDS)
TEXTURE_OF: Final = invert_synonyms(TEXTURE_WORDS)
SHAPE_OF: Final = invert_synonyms(SHAPE_WORDS)
SIZE_OF: Final = invert_synonyms(SIZE_WORDS)


def _pick(rng: np.random.Generator, options: tuple[str, ...]) -> str:
    return str(options[int(rng.integers(len(options)))])


def _thing(thing: Thing, rng: np.random.Generator) -> str:
    size, color = _pick(rng, SIZE_WORDS[thing.size]), _pick(rng, COLOR_WORDS[thing.color])
    adjectives = f"{size} {color}" if rng.random() < 0.7 else f"{color} {size}"
    return f"{adjectives} {_pick(rng, SHAPE_WORDS[thing.shape])}"


def _ground(scene: Scene, rng: np.random.Generator) -> str:
    texture = _pick(rng, TEXTURE_WORDS[scene.background_texture])
    color = _pick(rng, BACKGROUND_WORDS[scene.background_color])
    adjectives = f"{texture} {color}" if rng.random() < 0.6 else f"{color} {texture}"
    return f"{adjectives} {_pick(rng, BACKGROUND_NOUNS)}"


def caption(scene: Scene, rng: np.random.Generator) -> str:
    """One caption of `scene`, template and synonyms drawn from `rng`."""
    ground = _ground(scene, rng)
    if scene.arrangement not in PAIR_LAYOUTS:
        template = _pick(rng, SINGLE_TEMPLATES)
        position = _pick(rng, POSITION_PHRASES[scene.arrangement])
        return template.format(thing=_thing(scene.things[0], rng), position=position, ground=ground)
    first_in_a = bool(rng.random() < 0.5)
    first, second = scene.things if first_in_a else scene.things[::-1]
    relation = _pick(rng, RELATION_PHRASES[(scene.arrangement, first_in_a)])
    return _pick(rng, PAIR_TEMPLATES).format(
        first=_thing(first, rng), relation=relation, second=_thing(second, rng), ground=ground
    )


def parse(text: str) -> dict[str, str] | None:
    """The attributes a caption asks for, or None when it does not describe one scene of the world
    (no background, no object or more than two, a place word missing, a word contradicting another)."""
    words = re.findall(r"[a-z]+", text.lower())
    found: dict[str, str] = {}
    things: list[dict[str, str]] = []
    pending: dict[str, str] = {}
    places: list[tuple[int, str]] = []  # (objects closed before the word, place)
    for word in words:
        for table, name in ((BACKGROUND_OF, "background_color"), (TEXTURE_OF, "background_texture")):
            if word in table and found.setdefault(name, table[word]) != table[word]:
                return None
        if word in COLOR_OF or word in SIZE_OF:
            name, value = ("color", COLOR_OF[word]) if word in COLOR_OF else ("size", SIZE_OF[word])
            if pending.setdefault(name, value) != value:
                return None
        elif word in SHAPE_OF:
            if set(pending) != {"color", "size"}:
                return None
            things.append(pending | {"shape": SHAPE_OF[word]})
            pending = {}
        elif word in _PLACE_WORDS:
            places.append((len(things), _PLACE_WORDS[word]))
    if pending or set(found) != {"background_color", "background_texture"} or len(places) != 1:
        return None
    return _arranged(found, things, places[0])


def _arranged(
    found: dict[str, str], things: list[dict[str, str]], place: tuple[int, str]
) -> dict[str, str] | None:
    closed, where = place
    if len(things) == 1 and where in ("left", "center", "right"):
        found["arrangement"] = where
        slots = things
    elif len(things) == 2 and closed == 1 and where in ("left", "right", "above", "below"):
        found["arrangement"] = "horizontal" if where in ("left", "right") else "vertical"
        slots = things if where in ("left", "above") else things[::-1]
    else:
        return None
    for slot, thing in zip("ab", slots, strict=False):
        found |= {f"{slot}_{name}": value for name, value in thing.items()}
    return found


def describe(shown: dict[str, str]) -> str:
    """The canonical caption of a set of attributes (first template, first synonyms): the text an
    image "says" once the judge has read it (lab image lookups embed it)."""
    from lab.world import scene_from_attributes

    scene = scene_from_attributes(shown)
    ground = f"{scene.background_texture} {scene.background_color} background"

    def thing(item: Thing) -> str:
        return f"{item.size} {item.color} {item.shape}"

    if scene.arrangement not in PAIR_LAYOUTS:
        return SINGLE_TEMPLATES[0].format(
            thing=thing(scene.things[0]), position=POSITION_PHRASES[scene.arrangement][0], ground=ground
        )
    relation = RELATION_PHRASES[(scene.arrangement, True)][0]
    return PAIR_TEMPLATES[0].format(
        first=thing(scene.things[0]), relation=relation, second=thing(scene.things[1]), ground=ground
    )
