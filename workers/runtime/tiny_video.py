"""A tiny random-weight text-to-video pipeline, built offline like the tiny image models
(workers.runtime.tiny), so that video jobs (issue 18, FlexCache) run and are tested anywhere.

It is diffusers' `TextToVideoSDPipeline` (ModelScope's text-to-video layout, e.g.
"ali-vilab/text-to-video-ms-1.7b"): a `UNet3DConditionModel` (spatial and temporal convolutions
and attention, FlexCache 2.1) over (B, C, F, H/8, W/8) latents, with the tiny set's VAE, CLIP
text encoder, byte-level tokenizer and DDIM scheduler, built from the same recipe and seeds. It is
saved with `save_pretrained` and read back through `from_pretrained`, the code path of a real id.

Its latents form their own family, "tiny-video": the VAE is the tiny set's, but a latent only
resumes under the UNet that made it. Its videos are noise: the weights are random.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from workers.runtime.tiny import (
    _SEED,
    _TEXT_HIDDEN,
    TINY_SIZE,
    _build_scheduler,
    _build_text_encoder,
    _build_tokenizer,
    _build_vae,
    _diffusers,
    _write_slow_tokenizer_files,
)

log = logging.getLogger(__name__)

# Bump when the recipe below changes: a new version is built beside the old one.
TINY_VIDEO_VERSION = 1
TINY_VIDEO_FAMILY = "tiny-video"
TINY_VIDEO_MARKER = "tiny-video-model.json"

# The 3D UNet: (block_out_channels, layers_per_block, attention heads, norm groups). A step with a
# guidance batch of 2 at an 8x8 latent, one thread, measured while a benchmark shared the 2 cores:
# 42-55 ms at 8 frames, 54-73 ms at 16, with the tiny large image UNet at 25 ms beside it (12 ms
# idle), so about 20 and 28 ms idle. CPU attention dominates, so it stays shallow and narrow.
_VIDEO_UNET = ((16, 32), 1, 4, 4)
_VIDEO_UNET_SEED = _SEED + 6  # the image set uses _SEED + 1..5


def tiny_video_model_dir(base: Path) -> Path:
    """The versioned pipeline directory of the tiny video model under `base`
    (e.g. settings.tiny_models_dir, beside the tiny image set)."""
    return base / f"tiny-video-v{TINY_VIDEO_VERSION}"


def is_tiny_video_model(source: str) -> bool:
    """True when `source` is a built tiny video pipeline directory."""
    return (Path(source) / TINY_VIDEO_MARKER).is_file()


def ensure_tiny_video_model(base: Path) -> Path:
    """Build the tiny video pipeline under `base` unless already built; return its directory,
    which `TextToVideoSDPipeline.from_pretrained` reads.

    Idempotent and safe when several processes start at once, as ensure_tiny_models: each builds
    into its own temp directory and renames it into place; a loser of the race uses the winner's.
    """
    target = tiny_video_model_dir(base)
    if is_tiny_video_model(str(target)):
        return target
    base.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=base))
    staging.chmod(0o755)  # mkdtemp makes it private; workers running as other users must read it
    try:
        build_tiny_video_model(staging)
        try:
            os.rename(staging, target)
        except OSError:
            # Another process finished first (the target exists and is not empty): use its model.
            if not is_tiny_video_model(str(target)):
                raise
        else:
            log.info("built the tiny random video model in %s", target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target


def build_tiny_video_model(directory: Path) -> Path:
    """Build the tiny video pipeline into `directory` (empty or new) and return it.

    Deterministic: every component is seeded (the VAE, text encoder and tokenizer exactly as in
    the tiny image set), so a rebuild gives the same weights with the same torch release.
    """
    tokenizer = _build_tokenizer()
    pipe = _diffusers().TextToVideoSDPipeline(
        vae=_build_vae(),
        text_encoder=_build_text_encoder(tokenizer),
        tokenizer=tokenizer,
        unet=_build_video_unet(),
        scheduler=_build_scheduler(),
    )
    pipe.save_pretrained(directory, safe_serialization=True)
    _write_slow_tokenizer_files(tokenizer, directory / "tokenizer")
    marker = {"version": TINY_VIDEO_VERSION, "family": TINY_VIDEO_FAMILY, "size": TINY_SIZE}
    (directory / TINY_VIDEO_MARKER).write_text(json.dumps(marker, indent=2) + "\n")  # last: complete
    return directory


def _build_video_unet() -> Any:
    """A UNet3DConditionModel shaped like ModelScope's (cross-attention down/up blocks around
    plain ones), conditioned on the tiny text encoder's hidden states."""
    channels, layers, heads, groups = _VIDEO_UNET
    torch.manual_seed(_VIDEO_UNET_SEED)
    return (
        _diffusers()
        .UNet3DConditionModel(
            sample_size=TINY_SIZE // 8,
            in_channels=4,
            out_channels=4,
            layers_per_block=layers,
            block_out_channels=channels,
            down_block_types=("CrossAttnDownBlock3D", "DownBlock3D"),
            up_block_types=("UpBlock3D", "CrossAttnUpBlock3D"),
            cross_attention_dim=_TEXT_HIDDEN,
            attention_head_dim=heads,  # UNet3D reads it as the number of heads (diffusers #2011)
            norm_num_groups=groups,
        )
        .eval()
    )
