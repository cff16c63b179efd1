"""Where each role's model comes from, and loading it onto the device.

Every model is loaded with `from_pretrained` from a Hugging Face id or a local path; the tiny
models (workers.runtime.tiny) are local paths read through the same code. A family names a
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

from core.errors import SettingsError
from core.settings import Settings
from core.vocabulary import Role
from workers.runtime.tiny import TINY_FAMILY, ensure_tiny_models, is_tiny_model

log = logging.getLogger(__name__)

TINY_NOTICE = "no model configured: using tiny random models (their images are noise)"
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
    """Read the configured models; build and use the tiny ones for any left unset.

    Logs TINY_NOTICE once per process when a tiny model stands in.
    """
    global _tiny_notice_logged
    large, small = settings.large_model, settings.small_model
    large_name, small_name = large or "tiny-large", small or "tiny-small"
    if large is None or small is None:
        tiny = ensure_tiny_models(settings)
        large = large if large is not None else str(tiny.large)
        small = small if small is not None else str(tiny.small)
        if not _tiny_notice_logged:
            log.warning(TINY_NOTICE)
            _tiny_notice_logged = True
    for role, configured, family in (
        ("LARGE", settings.large_model, settings.large_family),
        ("SMALL", settings.small_model, settings.small_family),
    ):
        if configured is not None and family == TINY_FAMILY and not is_tiny_model(configured):
            # A real model labelled with the tiny family would share latents with the tiny one.
            log.warning(
                "REPRISE_%s_MODEL=%s is configured but REPRISE_%s_FAMILY is still %r: "
                "set it to the name of that model's latent space (e.g. sd15)",
                role,
                configured,
                role,
                TINY_FAMILY,
            )
    decode = VaeSource(settings.decode_model) if settings.decode_model else VaeSource(large, "vae")
    return ModelSources(
        large=large,
        small=small,
        decode=decode,
        large_family=settings.large_family,
        small_family=settings.small_family,
        large_name=large_name,
        small_name=small_name,
    )


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
    if getattr(pipe.unet.config, "addition_embed_type", None) is not None:
        raise SettingsError(
            f"model {source} needs added conditioning ({pipe.unet.config.addition_embed_type}, e.g. SDXL), "
            "which the runtime does not support yet: configure a Stable Diffusion 1.x/2.x layout model"
        )
    pipe.set_progress_bar_config(disable=True)
    if pipe.unet.dtype != dtype:  # diffusers releases before the `dtype` keyword ignore it
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
