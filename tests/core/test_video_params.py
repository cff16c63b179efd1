"""Video parameters: the paper's defaults, and the checks of frames and rate after an image job's."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from core.errors import InvalidInput, SizeError
from core.params import GenerationParams
from core.video_params import MAX_FRAMES, VideoParams, check_video_params

GOOD = VideoParams(prompt="an owl on a branch", steps=10, width=64, height=64, frames=8, fps=8)


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
    check_video_params(GOOD)


@pytest.mark.parametrize(
    ("change", "error", "field"),
    [
        ({"frames": 0}, InvalidInput, "frames"),
        ({"frames": MAX_FRAMES + 1}, InvalidInput, "frames"),
        ({"fps": 0}, InvalidInput, "fps"),
        ({"noise_window": 0}, InvalidInput, "noise_window"),
        ({"noise_window": GOOD.frames + 1}, InvalidInput, "noise_window"),
        ({"width": 60}, SizeError, "width"),  # the image checks run first
    ],
)
def test_bad_parameters_name_their_field(
    change: dict[str, Any], error: type[InvalidInput], field: str
) -> None:
    with pytest.raises(error) as raised:
        check_video_params(replace(GOOD, **change))
    assert raised.value.field == field
