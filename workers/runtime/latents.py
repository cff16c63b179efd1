"""Latents in and out of the runtime: checking a caller's latent, and the VAE's way between
latents and pixels.

A latent here is the UNet's: the VAE encoder's output shifted and multiplied by the VAE's
scaling factor (workers.runtime.results.Latent). Checks raise core.errors.LatentError before any
model work.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from PIL import Image

from core.errors import LatentError
from core.params import GenerationParams, Limits
from workers.runtime.results import Latent
from workers.stages import stage


def checked_latent(
    latent: Latent | torch.Tensor,
    channels: int,
    params: GenerationParams | None,
    *,
    limits: Limits,
    device: torch.device,
    dtype: torch.dtype,
) -> torch.Tensor:
    """Check a caller's latent and put it on the device as (1, C, h, w).

    Accepts (C, h, w) or (1, C, h, w), numpy or torch, any float dtype. With params, h and w
    must be the request's size / 8; without, within the size limits.
    """
    if isinstance(latent, np.ndarray):
        if latent.dtype.kind != "f":
            raise LatentError(f"latent dtype {latent.dtype} is not a float type", field="latent")
        tensor = torch.from_numpy(np.ascontiguousarray(latent))
    elif isinstance(latent, torch.Tensor):
        if not latent.is_floating_point():
            raise LatentError(f"latent dtype {latent.dtype} is not a float type", field="latent")
        tensor = latent.detach()
    else:
        raise LatentError(
            f"a latent must be a numpy array or tensor, got {type(latent).__name__}", field="latent"
        )
    if tensor.ndim == 4 and tensor.shape[0] == 1:
        tensor = tensor[0]
    scale = limits.vae_scale_factor
    if params is not None:
        expected = (channels, params.height // scale, params.width // scale)
        if tuple(tensor.shape) != expected:
            raise LatentError(
                f"latent shape {tuple(tensor.shape)} does not fit a {params.width}x{params.height} "
                f"image: expected {expected}",
                field="latent",
            )
    else:
        largest = limits.max_side // scale
        if (
            tensor.ndim != 3
            or tensor.shape[0] != channels
            or not (1 <= tensor.shape[1] <= largest and 1 <= tensor.shape[2] <= largest)
        ):
            raise LatentError(
                f"latent shape {tuple(tensor.shape)} is not ({channels}, h, w) with h, w in 1..{largest}",
                field="latent",
            )
    if not bool(torch.isfinite(tensor).all()):
        raise LatentError("latent holds NaN or infinite values", field="latent")
    return tensor.unsqueeze(0).to(device, dtype)


def vae_decode(vae: Any, latents: torch.Tensor) -> torch.Tensor:
    """Latents to pixels in [-1, 1] (undoing the VAE's latent scaling and shift); a job's vae_decode stage."""
    shift = vae.config.shift_factor or 0.0
    scaled = latents / vae.config.scaling_factor + shift
    with stage("vae_decode"):
        pixels: torch.Tensor = vae.decode(scaled.to(vae.dtype), return_dict=False)[0]
    return pixels


def vae_encode(vae: Any, pixels: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Pixels in [-1, 1] to this VAE's latents in `dtype`, using the posterior's mode (deterministic); a
    job's vae_encode stage."""
    with stage("vae_encode"):
        posterior = vae.encode(pixels.to(vae.dtype)).latent_dist
    latents: torch.Tensor = (posterior.mode() - (vae.config.shift_factor or 0.0)) * vae.config.scaling_factor
    return latents.to(dtype)


def to_image(vae: Any, latents: torch.Tensor) -> Image.Image:
    """A (1, C, h, w) latent decoded to an 8-bit RGB image."""
    return _pixels_to_image(vae_decode(vae, latents)[0])


def to_images(vae: Any, latents: torch.Tensor) -> list[Image.Image]:
    """An (N, C, h, w) stack of latents decoded in one VAE call, one 8-bit RGB image each."""
    return [_pixels_to_image(pixels) for pixels in vae_decode(vae, latents)]


def _pixels_to_image(pixels: torch.Tensor) -> Image.Image:
    """(3, H, W) pixels in [-1, 1] to an 8-bit RGB image."""
    unit = (pixels.float() / 2 + 0.5).clamp(0, 1)
    return Image.fromarray((unit.permute(1, 2, 0).cpu().numpy() * 255).round().astype(np.uint8))


def to_numpy(latents: torch.Tensor) -> Latent:
    """(1, C, h, w) device tensor -> (C, h, w) numpy copy in the compute dtype (lossless)."""
    array: Latent = latents[0].detach().to("cpu").numpy().copy()
    return array
