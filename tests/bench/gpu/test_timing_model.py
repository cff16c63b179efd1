"""The timing-real model (bench.gpu.timing_model): Stable Diffusion 1.5's architecture exactly as
published, CLIP's own tokenizer, and its tiny scale built, saved and loaded through the runtime's loader."""

from __future__ import annotations

import json
from pathlib import Path

import open_clip
import pytest
import torch

from bench.gpu.timing_model import (
    FAMILY,
    MARKER,
    NATIVE_SIZE,
    SCALED_DOWN,
    Scale,
    clip_tokenizer,
    configs,
    ensure_timing_model,
    parameter_counts,
    published_configs,
)

PROMPTS = [
    "a small red circle left of a large blue square on a striped yellow background",
    "A CAT  in\tNew-York's (8k) #1 <masterpiece>, trending on artstation",
    "Éclair über café",
]


def test_the_published_configs_are_stable_diffusion_15s_models() -> None:
    """The parameter counts of SD 1.5's UNet, VAE and CLIP ViT-L/14 text tower: a config that differs
    anywhere that matters (a width, a depth, a block, the vocabulary) changes them."""
    counts = parameter_counts(published_configs())
    assert counts == {"unet": 859_520_964, "vae": 83_653_863, "text_encoder": 123_060_480}
    assert configs(Scale.FULL) == published_configs()


def test_the_tiny_scale_keeps_every_block_and_changes_only_its_sizes() -> None:
    full, tiny = configs(Scale.FULL), configs(Scale.TINY)
    for name in full:
        changed = {key for key in full[name] if full[name][key] != tiny[name][key]}
        assert changed == set(SCALED_DOWN[name]), name
    assert tiny["unet"]["down_block_types"] == full["unet"]["down_block_types"]
    assert tiny["unet"]["cross_attention_dim"] == tiny["text_encoder"]["hidden_size"]
    assert sum(parameter_counts(tiny).values()) < 5_000_000


def test_the_tokenizer_gives_clips_ids() -> None:
    """The ids open_clip's tokenizer gives (openai's CLIP, as Stable Diffusion 1.5 tokenizes), padded with
    the end token as Stable Diffusion's tokenizer pads."""
    tokenizer = clip_tokenizer()
    ours = tokenizer(PROMPTS, padding="max_length", max_length=77, truncation=True).input_ids
    theirs = open_clip.tokenize(PROMPTS).tolist()
    assert len(tokenizer) == 49408
    for mine, clips in zip(ours, theirs, strict=True):
        end = clips.index(49407) + 1
        assert mine[:end] == clips[:end]
        assert set(mine[end:]) <= {49407}


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ensure_timing_model(tmp_path_factory.mktemp("models"), Scale.TINY).path


def test_the_tiny_scale_is_built_once_in_diffusers_layout(tiny_model: Path) -> None:
    marker = json.loads((tiny_model / MARKER).read_text())
    assert (marker["scale"], marker["weights"], marker["family"], marker["size"]) == (
        "tiny",
        "random",
        FAMILY,
        NATIVE_SIZE[Scale.TINY],
    )
    for part in ("unet", "vae", "text_encoder", "scheduler", "tokenizer"):
        assert (tiny_model / part).is_dir(), part
    assert {"vocab.json", "merges.txt"} <= {path.name for path in (tiny_model / "tokenizer").iterdir()}
    again = ensure_timing_model(tiny_model.parent, Scale.TINY)
    assert again.path == tiny_model and again.marker == marker  # not built again


def test_the_runtime_loads_it_and_a_step_runs(tiny_model: Path) -> None:
    """Through the workers' own loader, as REPRISE_LARGE_MODEL=<dir> has them load it: one guided step
    at its native size gives a finite noise prediction of the latent's shape."""
    from workers.runtime.loading import load_pipeline

    pipe = load_pipeline(str(tiny_model), device=torch.device("cpu"), dtype=torch.float32)
    assert type(pipe.scheduler).__name__ == "DDIMScheduler"
    ids = pipe.tokenizer(PROMPTS[:1], padding="max_length", max_length=77, return_tensors="pt").input_ids
    with torch.no_grad():
        states = pipe.text_encoder(ids)[0]
        side = NATIVE_SIZE[Scale.TINY] // 8
        latent = torch.randn(1, 4, side, side, generator=torch.Generator().manual_seed(0))
        noise = pipe.unet(latent, 981, encoder_hidden_states=states).sample
    assert noise.shape == latent.shape and bool(torch.isfinite(noise).all())
