"""The first request `reprise run` prints (and the README shows) is a prompt of the lab's world: the lab
judge reads every attribute it asks for, so its job's metrics.quality is a score, as the README says."""

from __future__ import annotations

from lab.captions import parse
from reprise.welcome import FIRST_PROMPT


def test_the_first_prompt_is_one_the_lab_judge_reads_whole() -> None:
    attributes = parse(FIRST_PROMPT)
    assert attributes is not None
    assert (attributes["a_color"], attributes["a_shape"], attributes["b_color"], attributes["b_shape"]) == (
        "red",
        "circle",
        "blue",
        "square",
    )
