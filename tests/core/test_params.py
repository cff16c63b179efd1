"""Generation parameters: the checks name the offending field, and the row mapping round-trips."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from core.errors import InvalidInput, PromptError, SizeError, StepsError
from core.params import GenerationParams, check_k, check_params, params_from_row, row_values

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
