"""Tiny random-weight models, built offline, so that the service and its tests run anywhere.

Two Stable Diffusion pipelines ("large" and "small") and one open_clip model are built from
seeded random weights and saved exactly like real models (`save_pretrained`, an open_clip
config + checkpoint). The runtime then loads them through the same `from_pretrained` code path
as a Hugging Face id, so the tiny set exercises the real loading code.

Shape of the set (diffusers' own tests use the same idea, `get_dummy_components()`):
- one VAE, saved into both pipelines with identical weights: both share the latent space
  (family "tiny-sd"), so latents move between them. It downsamples by 8 with 4 blocks like
  Stable Diffusion's, so core.params.VAE_SCALE_FACTOR holds; native size 64x64 pixels,
  an 8x8x4 latent.
- one CLIP text encoder and a byte-level CLIP tokenizer written here (no vocabulary download).
- two UNets whose per-step cost differs by about 3x on a CPU (measured with a guidance batch
  of 2 at 8x8: large ~12 ms, small ~4 ms on 2 cores), standing in for a large/small pair.
- a DDIM scheduler with Stable Diffusion 1.x's settings.
- open_clip "reprise-tiny-clip": embed_dim 64 (settings.image_embedding_dim), tiny towers.

A tiny text-to-video pipeline is built beside the set the same way: diffusers' `TextToVideoSDPipeline`
(ModelScope's text-to-video layout, e.g. "ali-vilab/text-to-video-ms-1.7b"), a `UNet3DConditionModel`
(spatial and temporal convolutions and attention, FlexCache 2.1) over (B, C, F, H/8, W/8) latents,
with the set's VAE, text encoder, tokenizer and scheduler, built from the same recipe and seeds. Its
latents form their own family, "tiny-video": the VAE is the set's, but a latent only resumes under
the UNet that made it.

Their images and videos are noise: the weights are random. They are for plumbing, timing and tests.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from core.schedulers import SD1_SCHEDULER_CONFIG
from core.settings import Settings
from core.vocabulary import BUILTIN_VIDEO_MODELS, ModelSet

log = logging.getLogger(__name__)

# Bump when the recipe below changes: a new version is built beside the old one.
TINY_VERSION = 1
TINY_FAMILY = "tiny-sd"
TINY_CLIP_NAME = "reprise-tiny-clip"
TINY_SIZE = 64  # native width and height in pixels
TINY_CLIP_CHECKPOINT = "open_clip_model.safetensors"
_MARKER = "tiny-models.json"
_SEED = 20240601  # every component is seeded from this, so a rebuild gives the same weights

SD_SCHEDULER_CONFIG: dict[str, Any] = dict(SD1_SCHEDULER_CONFIG)

# UNet sizes: (block_out_channels, layers_per_block). At an 8x8 latent a CPU step is dominated by
# per-layer overhead, so depth (not width) sets the cost; these two measured ~3x apart.
_LARGE_UNET = ((32, 64), 5)
_SMALL_UNET = ((32, 32), 1)
_TEXT_HIDDEN = 32

# Bump when the video recipe changes: a new version is built beside the old one.
TINY_VIDEO_VERSION = 1
TINY_VIDEO_FAMILY = BUILTIN_VIDEO_MODELS[ModelSet.TINY]
TINY_VIDEO_MARKER = "tiny-video-model.json"

# The 3D UNet: (block_out_channels, layers_per_block, attention heads, norm groups). A step with a
# guidance batch of 2 at an 8x8 latent, one thread, measured while a benchmark shared the 2 cores:
# 42-55 ms at 8 frames, 54-73 ms at 16, with the tiny large image UNet at 25 ms beside it (12 ms
# idle), so about 20 and 28 ms idle. CPU attention dominates, so it stays shallow and narrow.
_VIDEO_UNET = ((16, 32), 1, 4, 4)
_VIDEO_UNET_SEED = _SEED + 6  # the image set uses _SEED + 1..5


@dataclass(frozen=True, slots=True)
class TinyModelPaths:
    """Where one built tiny set lives. `large` and `small` are pipeline directories that
    `StableDiffusionPipeline.from_pretrained` reads; `clip_config` is an open_clip model config
    (its stem is the model name) and `clip_checkpoint` its weights."""

    root: Path
    large: Path
    small: Path
    clip_config: Path
    clip_checkpoint: Path

    @classmethod
    def under(cls, root: Path) -> TinyModelPaths:
        return cls(
            root=root,
            large=root / "large",
            small=root / "small",
            clip_config=root / "clip" / f"{TINY_CLIP_NAME}.json",
            clip_checkpoint=root / "clip" / TINY_CLIP_CHECKPOINT,
        )

    @property
    def complete(self) -> bool:
        """True once the set was fully built (the marker is written last, inside the temp dir)."""
        return (self.root / _MARKER).is_file()


def is_tiny_model(source: str) -> bool:
    """True when `source` is a pipeline directory of a built tiny set (e.g. configured by path)."""
    return (Path(source).parent / _MARKER).is_file()


def tiny_models_root(base: Path) -> Path:
    """The versioned directory of the tiny set under `base` (settings.tiny_models_dir)."""
    return base / f"tiny-v{TINY_VERSION}"


def ensure_tiny_models(settings: Settings, *, out: Path | None = None) -> TinyModelPaths:
    """Build the tiny models under `out` (default settings.tiny_models_dir) unless already built.

    Idempotent and safe when several processes start at once: each builds into its own temp
    directory and renames it into place; a loser of the race drops its copy and uses the winner's.
    """
    base = out if out is not None else settings.tiny_models_dir
    paths = TinyModelPaths.under(tiny_models_root(base))
    _build_in_place(base, paths.root, build_tiny_models, lambda: paths.complete)
    return paths


def tiny_video_model_dir(base: Path) -> Path:
    """The versioned pipeline directory of the tiny video model under `base`
    (e.g. settings.tiny_models_dir, beside the tiny image set)."""
    return base / f"tiny-video-v{TINY_VIDEO_VERSION}"


def is_tiny_video_model(source: str) -> bool:
    """True when `source` is a built tiny video pipeline directory."""
    return (Path(source) / TINY_VIDEO_MARKER).is_file()


def ensure_tiny_video_model(base: Path) -> Path:
    """Build the tiny video pipeline under `base` unless already built, as ensure_tiny_models; return
    its directory, which `TextToVideoSDPipeline.from_pretrained` reads."""
    target = tiny_video_model_dir(base)
    _build_in_place(base, target, build_tiny_video_model, lambda: is_tiny_video_model(str(target)))
    return target


def _build_in_place(
    base: Path, target: Path, build: Callable[[Path], object], built: Callable[[], bool]
) -> None:
    """Build `target` under `base` unless `built()` already. Safe when several processes start at once:
    each builds into its own temp directory and renames it into place; a loser of the race drops its
    copy and uses the winner's."""
    if built():
        return
    base.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=base))
    staging.chmod(0o755)  # mkdtemp makes it private; workers running as other users must read it
    try:
        build(staging)
        try:
            os.rename(staging, target)
        except OSError:
            # Another process finished first (the target exists and is not empty): use its models.
            if not built():
                raise
        else:
            log.info("built tiny random models in %s", target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def build_tiny_models(root: Path) -> TinyModelPaths:
    """Build the tiny set into `root` (an empty or new directory) and return its paths.

    Deterministic: the same recipe and seed give the same weights (torch's CPU generator is
    seeded before each component), on any machine with the same torch release.
    """
    paths = TinyModelPaths.under(root)
    tokenizer = _build_tokenizer()
    text_encoder = _build_text_encoder(tokenizer)
    vae = _build_vae()
    for directory, (channels, layers), seed in (
        (paths.large, _LARGE_UNET, _SEED + 3),
        (paths.small, _SMALL_UNET, _SEED + 4),
    ):
        pipe = _diffusers().StableDiffusionPipeline(
            vae=vae,
            text_encoder=text_encoder,
            tokenizer=tokenizer,
            unet=_build_unet("2D", channels, layers, heads=2, groups=8, seed=seed),
            scheduler=_build_scheduler(),
            safety_checker=None,
            feature_extractor=None,
            requires_safety_checker=False,
        )
        pipe.save_pretrained(directory, safe_serialization=True)
        _write_slow_tokenizer_files(tokenizer, directory / "tokenizer")
    _build_open_clip(paths)
    marker = {"version": TINY_VERSION, "family": TINY_FAMILY, "size": TINY_SIZE, "clip": TINY_CLIP_NAME}
    (root / _MARKER).write_text(json.dumps(marker, indent=2) + "\n")
    return paths


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
        unet=_build_unet(
            "3D",
            _VIDEO_UNET[0],
            _VIDEO_UNET[1],
            heads=_VIDEO_UNET[2],
            groups=_VIDEO_UNET[3],
            seed=_VIDEO_UNET_SEED,
        ),
        scheduler=_build_scheduler(),
    )
    pipe.save_pretrained(directory, safe_serialization=True)
    _write_slow_tokenizer_files(tokenizer, directory / "tokenizer")
    marker = {"version": TINY_VIDEO_VERSION, "family": TINY_VIDEO_FAMILY, "size": TINY_SIZE}
    (directory / TINY_VIDEO_MARKER).write_text(json.dumps(marker, indent=2) + "\n")  # last: complete
    return directory


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2/CLIP's reversible map from bytes to printable characters (byte-level BPE alphabet)."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    chars = list(printable)
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return dict(zip(printable, (chr(c) for c in chars), strict=True))


def _build_tokenizer() -> Any:
    """A byte-level CLIP tokenizer with no merges: every byte is a token, plus its end-of-word form.

    Covers any UTF-8 text without a downloaded vocabulary; 77 tokens like CLIP.
    """
    from transformers import CLIPTokenizer

    vocab: dict[str, int] = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for char in _bytes_to_unicode().values():
        vocab[char] = len(vocab)
    for char in _bytes_to_unicode().values():
        vocab[char + "</w>"] = len(vocab)
    return CLIPTokenizer(vocab=vocab, merges=[], model_max_length=77)


def _write_slow_tokenizer_files(tokenizer: Any, directory: Path) -> None:
    """Also write vocab.json and merges.txt: transformers 4.x's (slow) CLIPTokenizer reads only those."""
    (directory / "vocab.json").write_text(json.dumps(tokenizer.get_vocab(), ensure_ascii=False))
    (directory / "merges.txt").write_text("#version: 0.2\n")


def _build_text_encoder(tokenizer: Any) -> Any:
    from transformers import CLIPTextConfig, CLIPTextModel

    torch.manual_seed(_SEED + 1)
    config = CLIPTextConfig(
        vocab_size=len(tokenizer),
        hidden_size=_TEXT_HIDDEN,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=77,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model: Any = CLIPTextModel(config)
    return model.eval()


def _build_vae() -> Any:

    torch.manual_seed(_SEED + 2)
    # Four blocks, like Stable Diffusion's VAE: three downsamplings, a factor of 8.
    return (
        _diffusers()
        .AutoencoderKL(
            in_channels=3,
            out_channels=3,
            down_block_types=("DownEncoderBlock2D",) * 4,
            up_block_types=("UpDecoderBlock2D",) * 4,
            block_out_channels=(8, 16, 16, 16),
            layers_per_block=1,
            latent_channels=4,
            norm_num_groups=4,
            sample_size=TINY_SIZE,
        )
        .eval()
    )


def _build_unet(
    dims: str, channels: tuple[int, int], layers: int, *, heads: int, groups: int, seed: int
) -> Any:
    """A UNet2DConditionModel (dims "2D": Stable Diffusion's shape) or UNet3DConditionModel ("3D":
    ModelScope's), cross-attention down/up blocks around plain ones, conditioned on the tiny text
    encoder's hidden states. `heads`: UNet3D reads attention_head_dim as the number of heads
    (diffusers #2011)."""
    torch.manual_seed(seed)
    return getattr(_diffusers(), f"UNet{dims}ConditionModel")(
        sample_size=TINY_SIZE // 8,
        in_channels=4,
        out_channels=4,
        layers_per_block=layers,
        block_out_channels=channels,
        down_block_types=(f"CrossAttnDownBlock{dims}", f"DownBlock{dims}"),
        up_block_types=(f"UpBlock{dims}", f"CrossAttnUpBlock{dims}"),
        cross_attention_dim=_TEXT_HIDDEN,
        attention_head_dim=heads,
        norm_num_groups=groups,
    ).eval()


def _build_scheduler() -> Any:

    return _diffusers().DDIMScheduler(**SD_SCHEDULER_CONFIG)


def tiny_clip_config() -> dict[str, Any]:
    """The open_clip model config of the tiny CLIP (open_clip's model_configs/*.json format)."""
    return {
        "embed_dim": 64,
        "vision_cfg": {"image_size": 32, "layers": 2, "width": 64, "patch_size": 8, "head_width": 32},
        # open_clip's bundled BPE tokenizer (49408 tokens) ships with the package: no download.
        "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 64, "heads": 2, "layers": 2},
    }


def register_tiny_clip(config_path: Path) -> None:
    """Make the tiny CLIP's name known to open_clip (once per process)."""
    import open_clip

    if TINY_CLIP_NAME not in open_clip.list_models():
        open_clip.add_model_config(config_path)


def _build_open_clip(paths: TinyModelPaths) -> None:
    import open_clip
    from safetensors.torch import save_file

    paths.clip_config.parent.mkdir(parents=True, exist_ok=True)
    paths.clip_config.write_text(json.dumps(tiny_clip_config(), indent=2) + "\n")
    register_tiny_clip(paths.clip_config)
    torch.manual_seed(_SEED + 5)
    model = open_clip.create_model(TINY_CLIP_NAME, pretrained=None, device="cpu")
    state = {name: tensor.contiguous() for name, tensor in model.state_dict().items()}
    save_file(state, str(paths.clip_checkpoint))


def _diffusers() -> Any:
    """diffusers, imported on first use (it is heavy) and typed Any: its stubs are incomplete."""
    import diffusers

    return diffusers
