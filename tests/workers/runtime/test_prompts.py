"""Prompt embeddings kept per text encoder (workers.runtime.prompts), on the lab's real pipeline: the
same tensors as diffusers' encode_prompt, a new prompt for one encoder call, a repeated one for none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from core.params import GenerationParams
from core.settings import Settings, load_settings
from core.vocabulary import Role
from workers.runtime import DiffusionRuntime
from workers.runtime.denoising import encode_prompt
from workers.runtime.prompts import PromptEmbeddings

CPU = torch.device("cpu")
PROMPTS = ("a small red circle left of a blue square", "a large green triangle on a striped backdrop")


@pytest.fixture(scope="module")
def pipe(tmp_path_factory: pytest.TempPathFactory) -> Any:
    data_dir: Path = tmp_path_factory.mktemp("lab-data")
    settings: Settings = load_settings(data_dir=data_dir, device="cpu", model_set="lab")
    return DiffusionRuntime(settings, Role.LARGE)._require_pipeline("a test")


def _params(prompt: str, guidance: float = 7.5, negative: str | None = None) -> GenerationParams:
    return GenerationParams(
        prompt=prompt, seed=1, steps=10, width=64, height=64, guidance=guidance, negative_prompt=negative
    )


def _encoder_passes(pipe: Any) -> list[int]:
    passes = [0]
    pipe.text_encoder.register_forward_hook(lambda *_: passes.__setitem__(0, passes[0] + 1))
    return passes


@pytest.mark.parametrize(("guidance", "negative"), [(7.5, None), (7.5, "blurry"), (1.0, None)])
def test_kept_embeddings_are_the_pipelines_own_bit_for_bit(
    pipe: Any, guidance: float, negative: str | None
) -> None:
    prompts = PromptEmbeddings()
    for prompt in (*PROMPTS, PROMPTS[0]):  # the last one from what was kept
        params = _params(prompt, guidance, negative)
        kept, guided = prompts.encode(pipe, params, CPU)
        with torch.inference_mode():
            fresh, fresh_guided = encode_prompt(pipe, params, CPU)
        assert guided == fresh_guided and torch.equal(kept, fresh)


def test_a_new_prompt_costs_one_encoder_pass_and_a_repeated_one_none(pipe: Any) -> None:
    prompts = PromptEmbeddings()
    prompts.encode(pipe, _params(PROMPTS[0]), CPU)  # the prompt, and the empty negative once
    passes = _encoder_passes(pipe)
    prompts.encode(pipe, _params(PROMPTS[1]), CPU)
    assert passes[0] == 1
    prompts.encode(pipe, _params(PROMPTS[1]), CPU)
    prompts.encode(pipe, _params(PROMPTS[0]), CPU)
    assert passes[0] == 1


def test_the_least_recently_used_prompt_goes_first(pipe: Any) -> None:
    prompts = PromptEmbeddings(kept=2)  # the empty negative takes one of the two
    prompts.encode(pipe, _params(PROMPTS[0]), CPU)
    prompts.encode(pipe, _params(PROMPTS[1]), CPU)  # PROMPTS[0] is dropped
    calls = prompts.encoder_calls
    prompts.encode(pipe, _params(PROMPTS[0]), CPU)
    assert prompts.encoder_calls == calls + 1


def test_a_cold_vanillas_marked_prompt_is_encoded_again_to_the_same_embedding(pipe: Any) -> None:
    """bench replay's vanilla run marks each prompt (bench.live.runner.VANILLA_PROMPT_SUFFIX): the
    tokenizer reads the same tokens, so the images are the same, but no kept embedding serves it."""
    from bench.live.runner import VANILLA_PROMPT_SUFFIX

    prompts = PromptEmbeddings()
    first, _ = prompts.encode(pipe, _params(PROMPTS[0]), CPU)
    passes = _encoder_passes(pipe)
    marked, _ = prompts.encode(pipe, _params(PROMPTS[0] + VANILLA_PROMPT_SUFFIX), CPU)
    assert passes[0] == 1 and torch.equal(first, marked)
