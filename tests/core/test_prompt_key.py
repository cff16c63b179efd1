"""The exact-prompt key (core.prompt_key): the same request whatever its case and spacing; another
request as soon as anything that changes the image changes."""

from __future__ import annotations

from dataclasses import replace

from core.params import GenerationParams
from core.prompt_key import normalised, prompt_key

BASE = GenerationParams(
    prompt="A lighthouse on a cliff",
    negative_prompt=None,
    seed=1,
    steps=50,
    width=512,
    height=512,
    guidance=7.5,
)


def test_case_and_whitespace_do_not_make_another_request() -> None:
    assert normalised("  A   Lighthouse\ton a cliff ") == "a lighthouse on a cliff"
    assert prompt_key(replace(BASE, prompt="a  lighthouse on a CLIFF ")) == prompt_key(BASE)
    assert prompt_key(replace(BASE, seed=2)) == prompt_key(BASE)  # the cache reuses across seeds
    assert len(prompt_key(BASE)) == 64


def test_what_changes_the_image_changes_the_key() -> None:
    others = [
        replace(BASE, prompt="a lighthouse on a hill"),
        replace(BASE, negative_prompt="fog"),
        replace(BASE, steps=30),
        replace(BASE, width=768),
        replace(BASE, height=768),
        replace(BASE, guidance=5.0),
    ]
    assert len({prompt_key(params) for params in others} | {prompt_key(BASE)}) == len(others) + 1
