"""The prompt decoupler: concrete splits of DiffusionDB prompts and lab captions, the lab's whole
caption space, and vocabularies that keep clear of the lab's words."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pytest

from jobs.policies import decoupling_words as words
from jobs.policies.decoupling import PromptParts, Rule, split_prompt
from lab.captions import (
    BACKGROUND_NOUNS,
    BACKGROUND_WORDS,
    COLOR_WORDS,
    SHAPE_WORDS,
    SIZE_WORDS,
    TEXTURE_WORDS,
    caption,
)
from lab.world import sample_scene

SCENE = Rule.SCENE_PREPOSITION
NOUN = Rule.BACKGROUND_NOUN
NONE = Rule.NO_BACKGROUND

DIFFUSIONDB = [
    ("an astronaut flying in space", "an astronaut flying", "space", SCENE),
    ("an alien walking on the moon", "an alien walking", "the moon", SCENE),
    (
        "a beautiful painting of pyramids on the moon by nekro and pascal blanche and syd mead, 4 k",
        "pyramids",
        "the moon",
        SCENE,
    ),
    (
        "a renaissance portrait of dwayne johnson, art in the style of rembrandt!! intricate. ultra "
        "detailed, oil on canvas",
        "dwayne johnson",
        "",
        NONE,
    ),
    (
        "concept art of a silent hill monster on a white background. painted by edward hopper",
        "a silent hill monster",
        "a white background",
        SCENE,
    ),
    (
        "a photograph of shrek riding a bicycle through new york city.",
        "shrek riding a bicycle",
        "new york city",
        SCENE,
    ),
    (
        "dragons flying around a snowcapped fantasy mountain, digital art, trending on artstation",
        "dragons flying",
        "a snowcapped fantasy mountain",
        SCENE,
    ),
    (
        "a impressionist, pastoral painting of a grassy field with trees in the background, by blanche monet",
        "a grassy field",
        "trees",
        Rule.IN_THE_BACKGROUND,
    ),
    (
        "oil painting by george stubbs of a highland cow and a llama in a meadow at dawn.",
        "a highland cow and a llama",
        "a meadow at dawn",
        SCENE,
    ),
    (
        "3 panel scene, school girl sits in a cozy school classroom at night - dramatic 3 d poster by wlop",
        "3 panel scene, school girl sits",
        "a cozy school classroom at night",
        SCENE,
    ),
    (  # the background phrase stops before a verb: the rest describes the object
        "a guy standing on a spaceship looking out a window at space, back view",
        "a guy standing, looking out a window at space, back view",
        "a spaceship",
        SCENE,
    ),
    (  # "space" is no head here: a space suit is no place
        "a gorgeous woman in a space suit, astronaut, portrait, smooth, highly detailed, digital painting",
        "a gorgeous woman in a space suit, astronaut",
        "",
        NONE,
    ),
    (  # a passive "controlled by" is no artist credit; leading style clauses are skipped
        "epic 3 d, become legend shiji! gpu mecha controlled by telepathic hackers, made of liquid, houdini",
        "become legend shiji, gpu mecha controlled by telepathic hackers, made of liquid",
        "",
        NONE,
    ),
    (
        "a rusty shipwreck at the bottom of a prehistoric jungle cave, lush flora, volumetric lighting",
        "a rusty shipwreck, lush flora",
        "a prehistoric jungle cave",
        SCENE,
    ),
    (
        "large lovecraftian void monster, white eyes, surrounded by dark purple clouds, wallpaper",
        "large lovecraftian void monster, white eyes",
        "dark purple clouds",
        SCENE,
    ),
    (
        "cyberpunk mermaid, desktop background, path traced, highly detailed",
        "cyberpunk mermaid, path traced",
        "desktop background",
        NOUN,
    ),
    ("conor mcgregor as a muppet, movie still, 4 k", "conor mcgregor as a muppet", "", NONE),
    ("photo of very unappetizing food", "very unappetizing food", "", NONE),
    ("a portrait of mr. bean, rowan atkinson, art by annibale carracci", "mr bean, rowan atkinson", "", NONE),
    (
        "background: misty mountains, a lone wolf howling",
        "a lone wolf howling",
        "misty mountains",
        Rule.BACKGROUND_LABEL,
    ),
    ("a cat sleeping by the fireplace", "a cat sleeping", "the fireplace", SCENE),
]

GENERIC = [
    ("a cat on top of a hill", "a cat", "a hill", SCENE),
    ("a knight standing in front of a wall", "a knight standing", "a wall", SCENE),
    ("a castle, in the background a dragon", "a castle", "a dragon", Rule.IN_THE_BACKGROUND),
    (
        "a house in the middle of a forest covered in snow at night",
        "a house",
        "a forest covered in snow at night",
        SCENE,
    ),
    ("a portrait of a knight with a city background", "a knight", "a city background", NOUN),
]

LAB = [
    (
        "a small red circle in the middle on a plain white background",
        "a small red circle in the middle",
        "a plain white background",
        SCENE,
    ),
    (
        "in the middle, a big cobalt disc against a striped grey backdrop",
        "in the middle, a big cobalt disc",
        "a striped grey backdrop",
        SCENE,
    ),
    (
        "an image of a small emerald wedge at the left side, golden checkered background",
        "a small emerald wedge at the left side",
        "golden checkered background",
        NOUN,
    ),
    (
        "silver banded backdrop with a huge violet block on the right",
        "a huge violet block on the right",
        "silver banded backdrop",
        NOUN,
    ),
    (
        "picture of a little lime box in the right part in front of an ebony solid backdrop",
        "a little lime box in the right part",
        "an ebony solid backdrop",
        SCENE,
    ),
    (
        "a tiny crimson wedge on top of a big cobalt box on a lemon plain background",
        "a tiny crimson wedge on top of a big cobalt box",
        "a lemon plain background",
        SCENE,
    ),
    (
        "jet chequered background: a big tangerine disc to the right of a small azure triangle",
        "a big tangerine disc to the right of a small azure triangle",
        "jet chequered background",
        NOUN,
    ),
    (
        "an image of a large red square placed below a small green circle, white flat backdrop",
        "a large red square placed below a small green circle",
        "white flat backdrop",
        NOUN,
    ),
    (
        "a big amber disk under a tiny lilac block against a snowy stripy background",
        "a big amber disk under a tiny lilac block",
        "a snowy stripy background",
        SCENE,
    ),
]


@pytest.mark.parametrize(("prompt", "obj", "background", "rule"), DIFFUSIONDB + GENERIC + LAB)
def test_split(prompt: str, obj: str, background: str, rule: Rule) -> None:
    parts = split_prompt(prompt)
    assert (parts.object, parts.background, parts.rule) == (obj, background, rule)
    assert parts.decoupled == bool(background)


def test_style_belongs_to_neither_phrase() -> None:
    parts = split_prompt("a beautiful painting of pyramids on the moon by nekro, trending on artstation, 8 k")
    assert parts.style == "a beautiful painting of, by nekro, trending on artstation, 8k"
    assert "nekro" not in parts.object + parts.background


def test_all_style_or_empty_prompts_have_no_parts() -> None:
    for prompt in ("a cyberpunk silkscreen pop art portrait", "", "   ", "8 k, trending on artstation"):
        parts = split_prompt(prompt)
        assert (parts.object, parts.background, parts.rule) == ("", "", Rule.EMPTY)
        assert not parts.decoupled


def test_case_and_whitespace_do_not_matter() -> None:
    assert split_prompt("  An   Astronaut flying IN  Space ") == split_prompt("an astronaut flying in space")
    assert split_prompt("on the moon") == PromptParts("", "the moon", Rule.SCENE_PREPOSITION)
    assert not split_prompt("on the moon").decoupled


def _words(synonyms: Mapping[str, tuple[str, ...]]) -> set[str]:
    return {word for values in synonyms.values() for word in values}


def test_every_lab_caption_splits_into_its_shapes_and_its_ground() -> None:
    rng = np.random.default_rng(7)
    for _ in range(300):
        scene = sample_scene(rng)
        parts = split_prompt(caption(scene, rng))
        for thing in scene.things:
            assert set(SHAPE_WORDS[thing.shape]) & set(parts.object.split()), parts
        assert set(BACKGROUND_NOUNS) & set(parts.background.split()), parts
        assert not _words(SHAPE_WORDS) & set(parts.background.split()), parts


def test_vocabularies_keep_clear_of_the_lab_words() -> None:
    tables = (COLOR_WORDS, BACKGROUND_WORDS, TEXTURE_WORDS, SHAPE_WORDS, SIZE_WORDS)
    lab = set().union(*(_words(table) for table in tables))
    for vocabulary in (
        words.SETTING_NOUNS,
        words.POSITION_WORDS,
        words.STYLE_WORDS,
        words.STYLE_HEADS,
        words.MEDIUMS,
    ):
        assert not lab & vocabulary
