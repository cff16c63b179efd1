"""Where each role's model comes from, and loading it onto the device.

Every model is loaded with `from_pretrained` from a Hugging Face id or a local path; the built
models (the quality lab's, which the lab registers as model sources: core.plugins, and the tiny random
ones, workers.runtime.tiny) are local directories read through the same code. A family names a
latent space: each family has one VAE that turns its latents into pixels and back:

    settings.large_family -> the large model's `vae` subfolder
    settings.small_family -> the small model's `vae` subfolder (if it names another family)

The decode role hosts settings.decode_model (a VAE repo or directory with its config at the
root), taken to be a VAE of the large family, e.g. a fine-tuned decoder of the same latent space;
unset, it is the large model's `vae` subfolder.

Supported pipelines: Stable Diffusion 1.x/2.x layout (unet, vae, text_encoder, tokenizer,
scheduler), the layout `StableDiffusionPipeline` reads. UNets that need added conditioning
(SDXL) are refused with a clear error.
"""

from __future__ import annotations

import gc
import logging
from dataclasses import dataclass
from typing import Any

import torch

from core import plugins
from core.errors import SettingsError
from core.settings import Settings
from core.vocabulary import BUILTIN_FAMILIES, ModelSet, Role
from workers.runtime.tiny import ensure_tiny_models

log = logging.getLogger(__name__)

TINY_NOTICE = "no model configured: using tiny random models (their images are noise)"
LAB_NOTICE = (
    "no model configured: using the quality lab's models (trained on its world of shapes; see README)"
)
_tiny_notice_logged = False


@dataclass(frozen=True, slots=True)
class VaeSource:
    """A VAE to load: `AutoencoderKL.from_pretrained(source, subfolder=subfolder)`."""

    source: str
    subfolder: str | None = None


@dataclass(frozen=True, slots=True)
class ModelSources:
    """The models this deployment serves, resolved from settings (tiny ones filled in)."""

    large: str
    small: str
    decode: VaeSource
    large_family: str
    small_family: str
    large_name: str
    small_name: str

    def pipeline(self, role: Role) -> str:
        if role is Role.LARGE:
            return self.large
        if role is Role.SMALL:
            return self.small
        raise ValueError(f"role {role.value} hosts no diffusion pipeline")

    def family(self, role: Role) -> str:
        """The latent family a role works in (the decode role decodes the large family)."""
        return self.small_family if role is Role.SMALL else self.large_family

    def name(self, role: Role) -> str:
        """The model's name in compute accounting (denoiser_evals keys)."""
        if role is Role.SMALL:
            return self.small_name
        if role is Role.LARGE:
            return self.large_name
        return self.decode.source

    def vae_for_family(self, family: str) -> VaeSource | None:
        """The VAE that encodes and decodes `family`'s latents; None for an unknown family."""
        if family == self.large_family:
            return VaeSource(self.large, "vae")
        if family == self.small_family:
            return VaeSource(self.small, "vae")
        return None


def resolve_model_sources(settings: Settings) -> ModelSources:
    """Read the configured models; a built model ('lab:large', 'tiny:small', or an unset model, which
    is '<model_set>:<role>') is assembled or built on first use and read from its directory.

    Logs a notice once per process when a built model stands in for an unset one.
    """
    global _tiny_notice_logged
    large, small = settings.model_source("large"), settings.model_source("small")
    if (settings.large_model is None or settings.small_model is None) and not _tiny_notice_logged:
        log.warning(TINY_NOTICE if settings.model_set == ModelSet.TINY else LAB_NOTICE)
        _tiny_notice_logged = True
    large_path, small_path = builtin_path(settings, large), builtin_path(settings, small)
    decode = VaeSource(settings.decode_model) if settings.decode_model else VaeSource(large_path, "vae")
    return ModelSources(
        large=large_path,
        small=small_path,
        decode=decode,
        large_family=settings.large_family,
        small_family=settings.small_family,
        large_name=model_name(large),
        small_name=model_name(small),
    )


def builtin_path(settings: Settings, source: str) -> str:
    """A built model's directory (built or assembled on first use); any other source unchanged."""
    if source not in BUILTIN_FAMILIES:
        return source
    model_set, _, name = source.partition(":")
    if model_set == ModelSet.TINY.value:
        return str(getattr(ensure_tiny_models(settings), name))
    return str(plugins.model_path(settings, source))


def model_name(source: str) -> str:
    """The model's name in compute accounting: 'lab-large' for 'lab:large', else the source."""
    return source.replace(":", "-") if source in BUILTIN_FAMILIES else source


def resolve_device(spec: str) -> torch.device:
    """settings.device -> a torch device: 'auto' is CUDA when present, else the CPU."""
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(spec)
    except RuntimeError:
        raise SettingsError(
            f"REPRISE_DEVICE={spec!r} is not a device: use auto, cpu, cuda or cuda:N"
        ) from None
    if device.type not in ("cpu", "cuda"):
        raise SettingsError(f"REPRISE_DEVICE={spec!r}: only auto, cpu, cuda and cuda:N are supported")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SettingsError(
            f"REPRISE_DEVICE={spec!r} but CUDA is not available: set REPRISE_DEVICE=auto or cpu"
        )
    return device


def compute_dtype(device: torch.device) -> torch.dtype:
    """float16 on CUDA (Stable Diffusion's usual serving precision; unlike bfloat16 numpy holds it,
    so latents leave the runtime bit-exact), float32 on a CPU (which has no fast half kernels)."""
    return torch.float16 if device.type == "cuda" else torch.float32


def load_pipeline(source: str, *, device: torch.device, dtype: torch.dtype) -> Any:
    """Load a Stable Diffusion pipeline for denoising; the safety checker is not loaded (the
    runtime runs its own loop and never calls the pipeline)."""
    pipe = _diffusers().StableDiffusionPipeline.from_pretrained(
        source, dtype=dtype, safety_checker=None, requires_safety_checker=False
    )
    if getattr(pipe.unet.config, "addition_embed_type", None) not in (None, "text"):  # "text": pooled prompt
        raise SettingsError(
            f"model {source} needs added conditioning ({pipe.unet.config.addition_embed_type}, e.g. SDXL), "
            "which the runtime does not support yet: configure a Stable Diffusion 1.x/2.x layout model"
        )
    return ready_for_denoising(pipe, device=device, dtype=dtype)


def ready_for_denoising(pipe: Any, *, device: torch.device, dtype: torch.dtype) -> Any:
    """A loaded pipeline (image or video) made ready for the runtime's own loop: no progress bar, the
    compute dtype (diffusers releases before the `dtype` keyword of from_pretrained ignore it), on the
    device."""
    pipe.set_progress_bar_config(disable=True)
    if pipe.unet.dtype != dtype:
        pipe.to(dtype=dtype)
    return pipe.to(device)


def load_vae(source: VaeSource, *, device: torch.device, dtype: torch.dtype) -> Any:

    vae = _diffusers().AutoencoderKL.from_pretrained(source.source, subfolder=source.subfolder, dtype=dtype)
    if vae.dtype != dtype:  # diffusers releases before the `dtype` keyword ignore it
        vae.to(dtype=dtype)
    return vae.to(device).eval()


def vae_latent_channels(source: VaeSource) -> int:
    """A VAE's latent channels, read from its config alone (no weights loaded)."""
    config = _diffusers().AutoencoderKL.load_config(source.source, subfolder=source.subfolder)
    return int(config.get("latent_channels", 4))


def free_device_memory(device: torch.device) -> None:
    """Return freed model memory: collect dropped modules and, on CUDA, empty torch's cache so
    the next role's model (or another process) can use it."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _diffusers() -> Any:
    """diffusers, imported on first use (it is heavy) and typed Any: its stubs are incomplete."""
    import diffusers

    return diffusers
