"""Generation parameters of both kinds: the checks name the offending field, and the row mapping
round-trips."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

from core.errors import InvalidInput, PromptError, SizeError, StepsError
from core.params import (
    MAX_FRAMES,
    GenerationParams,
    VideoParams,
    check_k,
    check_params,
    check_video_params,
    job_params,
    params_from_row,
    row_values,
)

GOOD = GenerationParams(prompt="a red circle", seed=3, steps=50, width=64, height=64, guidance=7.5)


def test_good_parameters_pass() -> None:
    check_params(GOOD)


@pytest.mark.parametrize(
    ("change", "error", "field"),
    [
        ({"prompt": "   "}, PromptError, "prompt"),
        ({"prompt": "x" * 2001}, PromptError, "prompt"),
        ({"negative_prompt": "x" * 2001}, PromptError, "negative_prompt"),
        ({"steps": 0}, StepsError, "steps"),
        ({"steps": 151}, StepsError, "steps"),
        ({"width": 60}, SizeError, "width"),
        ({"height": 2048}, SizeError, "height"),
        ({"guidance": -1.0}, InvalidInput, "guidance"),
        ({"seed": -1}, InvalidInput, "seed"),
        ({"seed": 2**63}, InvalidInput, "seed"),
    ],
)
def test_bad_parameters_name_their_field(
    change: dict[str, object], error: type[Exception], field: str
) -> None:
    with pytest.raises(error) as raised:
        check_params(replace(GOOD, **change))  # type: ignore[arg-type]
    assert isinstance(raised.value, InvalidInput) and raised.value.field == field


@pytest.mark.parametrize(("k", "ok"), [(0, False), (1, True), (49, True), (50, False)])
def test_k_leaves_at_least_one_step(k: int, ok: bool) -> None:
    if ok:
        check_k(k, 50)
    else:
        with pytest.raises(StepsError):
            check_k(k, 50)


def test_the_row_mapping_round_trips_every_field() -> None:
    params = GenerationParams(
        prompt="p", seed=11, steps=30, width=128, height=96, guidance=3.0, negative_prompt="blurry"
    )
    row = SimpleNamespace(**row_values(params))
    assert params_from_row(row) == params
    assert set(row_values(params)) == set(GenerationParams.__dataclass_fields__)


# --- a video job's parameters (FlexCache 5) ---------------------------------------------------------

VIDEO = VideoParams(prompt="an owl on a branch", steps=10, width=64, height=64, frames=8, fps=8)


def test_defaults_are_the_papers_and_a_video_job_is_a_generation_job() -> None:
    params = VideoParams(prompt="an owl")
    assert (params.height, params.width, params.frames, params.steps, params.seconds) == (
        320,
        512,
        64,
        50,
        4.0,
    )
    assert isinstance(params, GenerationParams)
    check_video_params(VIDEO)


@pytest.mark.parametrize(
    ("change", "error", "field"),
    [
        ({"frames": 0}, InvalidInput, "frames"),
        ({"frames": MAX_FRAMES + 1}, InvalidInput, "frames"),
        ({"fps": 0}, InvalidInput, "fps"),
        ({"noise_window": 0}, InvalidInput, "noise_window"),
        ({"noise_window": VIDEO.frames + 1}, InvalidInput, "noise_window"),
        ({"width": 60}, SizeError, "width"),  # the image checks run first
    ],
)
def test_bad_video_parameters_name_their_field(
    change: dict[str, Any], error: type[InvalidInput], field: str
) -> None:
    with pytest.raises(error) as raised:
        check_video_params(replace(VIDEO, **change))
    assert raised.value.field == field


def test_a_job_row_gives_the_parameters_of_its_kind() -> None:
    video_row = SimpleNamespace(kind="video", **row_values(VIDEO))
    image_row = SimpleNamespace(kind="image", **row_values(GOOD), frames=None, fps=None, noise_window=None)

    assert job_params(video_row) == VIDEO
    assert job_params(image_row) == GOOD
