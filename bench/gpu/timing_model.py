"""A timing-real model: Stable Diffusion 1.5's UNet, VAE and text encoder with random weights, built from
their published configs (bench/gpu/sd15/, no download) and saved in diffusers' layout, so that the
workers load it as any configured model (`REPRISE_LARGE_MODEL=<dir>`). Its images are noise; a step costs
what Stable Diffusion 1.5's step costs at the same size on the same card.

The tokenizer is CLIP's own BPE (49,408 tokens), written from the vocabulary that open_clip ships
(`bpe_simple_vocab_16e6.txt.gz`) in the order openai's CLIP and Stable Diffusion's `tokenizer/` use, so
prompts become the ids they would in Stable Diffusion 1.5 (tests/bench/gpu/test_timing_model.py checks
them against open_clip's tokenizer). The scheduler is the project's DDIM with SD 1.x's settings.

Two scales, one recipe: `full` is the published architecture (1.07 billion parameters: the UNet's
859,520,964, the VAE's 83,653,863, the text encoder's 123,060,480), stored in float16 (2.1 GB; the
workers compute in float16 on CUDA anyway); `tiny` keeps every block type, the tokenizer and the
scheduler and shrinks widths and depths (SCALED_DOWN) so that the same path runs on a CPU at 64 px in a
test. Built once into `<base>/sd15-random-<scale>-v<VERSION>` (staged in a temporary directory and
renamed into place, as the tiny set is: workers.runtime.tiny), its marker written last.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Final

import torch

from core.schedulers import SD1_SCHEDULER_CONFIG
from workers.runtime.tiny import _build_in_place

VERSION: Final = 1
FAMILY: Final = "sd15-random"  # the latent family its cache entries carry: no other model reads them
MARKER: Final = "timing-model.json"
CONFIGS: Final = Path(__file__).with_name("sd15")
SEED: Final = 20261202
CLIP_MERGES: Final = 49152 - 256 - 2  # openai's CLIP keeps the first 48,894 merges of the BPE file
MAX_LENGTH: Final = 77


class Scale(StrEnum):
    FULL = "full"  # Stable Diffusion 1.5's architecture as published
    TINY = "tiny"  # the same block types, narrow and shallow: a CPU test at 64 px


# What `tiny` changes in each published config; everything else (block types, latent channels, the
# text encoder's vocabulary and length) stays.
SCALED_DOWN: Final[Mapping[str, Mapping[str, Any]]] = {
    "unet": {
        "block_out_channels": [32, 32, 64, 64],
        "layers_per_block": 1,
        "attention_head_dim": 2,
        "cross_attention_dim": 32,
        "sample_size": 8,
    },
    "vae": {"block_out_channels": [32, 32, 32, 32], "layers_per_block": 1, "sample_size": 64},
    "text_encoder": {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "projection_dim": 32,
    },
}
NATIVE_SIZE: Final = {Scale.FULL: 512, Scale.TINY: 64}


@dataclass(frozen=True, slots=True)
class TimingModel:
    """A built timing model: its pipeline directory (what REPRISE_LARGE_MODEL names), its scale, the size
    it generates at, and what its marker says."""

    path: Path
    scale: Scale
    size: int
    marker: dict[str, Any]


def published_configs() -> dict[str, dict[str, Any]]:
    """The three configs as committed in bench/gpu/sd15/ (unet, vae, text_encoder)."""
    return {name: json.loads((CONFIGS / f"{name}.json").read_text()) for name in SCALED_DOWN}


def configs(scale: Scale) -> dict[str, dict[str, Any]]:
    """The configs the model of `scale` is built from."""
    published = published_configs()
    if scale is Scale.FULL:
        return published
    return {name: {**config, **SCALED_DOWN[name]} for name, config in published.items()}


def model_dir(base: Path, scale: Scale) -> Path:
    return base / f"sd15-random-{scale.value}-v{VERSION}"


def ensure_timing_model(base: Path, scale: Scale, *, device: str = "cpu") -> TimingModel:
    """The model of `scale` under `base`, built unless already there. `device` is where its random
    weights are drawn (a CUDA device draws the full model's billion in a second; the CPU takes about a
    minute); they are saved in float16 at the full scale, float32 at the tiny one."""
    target = model_dir(base, scale)
    _build_in_place(
        base,
        target,
        lambda staging: build_timing_model(staging, scale, device=device),
        lambda: (target / MARKER).is_file(),
    )
    return TimingModel(target, scale, NATIVE_SIZE[scale], json.loads((target / MARKER).read_text()))


def build_timing_model(directory: Path, scale: Scale, *, device: str = "cpu") -> Path:
    """Build the pipeline into `directory` (empty or new): random weights from the configs, seeded,
    saved with `save_pretrained` in diffusers' layout, the marker last."""
    from transformers import CLIPTextConfig, CLIPTextModel

    diffusers = _diffusers()
    started = time.perf_counter()
    built = configs(scale)
    dtype = torch.float16 if scale is Scale.FULL else torch.float32
    torch.manual_seed(SEED)
    with torch.device(device):
        unet = diffusers.UNet2DConditionModel.from_config(built["unet"])
        vae = diffusers.AutoencoderKL.from_config(built["vae"])
        text_encoder: Any = CLIPTextModel(CLIPTextConfig(**built["text_encoder"]))
    pipe = diffusers.StableDiffusionPipeline(
        vae=vae.eval(),
        text_encoder=text_encoder.eval(),
        tokenizer=clip_tokenizer(),
        unet=unet.eval(),
        scheduler=diffusers.DDIMScheduler(**SD1_SCHEDULER_CONFIG),
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    pipe.to(dtype=dtype)
    pipe.save_pretrained(directory, safe_serialization=True)
    write_slow_tokenizer_files(directory / "tokenizer")
    del pipe, unet, vae, text_encoder
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    marker = {
        "architecture": "stable-diffusion-v1-5 (bench/gpu/sd15)",
        "scale": scale.value,
        "weights": "random",
        "seed": SEED,
        "drawn_on": device,
        "dtype": str(dtype).removeprefix("torch."),
        "family": FAMILY,
        "size": NATIVE_SIZE[scale],
        "parameters": parameter_counts(built),
        "configs_sha256": hashlib.sha256(json.dumps(built, sort_keys=True).encode()).hexdigest(),
        "build_seconds": round(time.perf_counter() - started, 1),
    }
    (directory / MARKER).write_text(json.dumps(marker, indent=2) + "\n")  # last: the model is complete
    return directory


def parameter_counts(built: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    """Each model's parameters, counted on the meta device (no memory, no weights drawn)."""
    from transformers import CLIPTextConfig, CLIPTextModel

    diffusers = _diffusers()
    with torch.device("meta"):
        models = {
            "unet": diffusers.UNet2DConditionModel.from_config(dict(built["unet"])),
            "vae": diffusers.AutoencoderKL.from_config(dict(built["vae"])),
            "text_encoder": CLIPTextModel(CLIPTextConfig(**built["text_encoder"])),
        }
    return {name: sum(p.numel() for p in model.parameters()) for name, model in models.items()}


def clip_vocabulary() -> tuple[dict[str, int], list[tuple[str, str]]]:
    """CLIP's vocabulary and merges (openai's CLIP, Stable Diffusion 1.x's `tokenizer/`), from the BPE
    file open_clip ships: every byte's character, the same with `</w>`, each merge joined, then the start
    and end tokens (49,406 and 49,407)."""
    import open_clip.tokenizer

    with gzip.open(open_clip.tokenizer.default_bpe()) as bpe:
        lines = bpe.read().decode("utf-8").split("\n")
    merges = [(first, second) for first, second in (line.split() for line in lines[1 : CLIP_MERGES + 1])]
    characters = list(open_clip.tokenizer.bytes_to_unicode().values())
    words = [*characters, *(character + "</w>" for character in characters)]
    words += ["".join(merge) for merge in merges]
    words += ["<|startoftext|>", "<|endoftext|>"]
    return {word: index for index, word in enumerate(words)}, merges


def clip_tokenizer() -> Any:
    """CLIP's tokenizer: its vocabulary and merges, 77 tokens, padded with the end token."""
    from transformers import CLIPTokenizer

    vocab, merges = clip_vocabulary()
    pairs: Any = merges  # the tokenizers library takes pairs; transformers' annotation says strings
    return CLIPTokenizer(vocab=vocab, merges=pairs, model_max_length=MAX_LENGTH)


def write_slow_tokenizer_files(directory: Path) -> None:
    """vocab.json and merges.txt beside the fast tokenizer's file: what transformers 4.x's CLIPTokenizer
    reads, and what Stable Diffusion 1.5's `tokenizer/` holds."""
    vocab, merges = clip_vocabulary()
    (directory / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    lines = ["#version: 0.2", *(" ".join(merge) for merge in merges)]
    (directory / "merges.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _diffusers() -> Any:
    """diffusers, imported on first use (it is heavy) and typed Any: its stubs are incomplete."""
    import diffusers

    return diffusers
