"""Checking a caller's latent before any model work, and the latent's way back to numpy."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core.errors import LatentError
from core.params import GenerationParams, Limits
from workers.runtime.latents import checked_latent, to_numpy

CPU = torch.device("cpu")
LIMITS = Limits(max_side=64)


def _check(latent: object, params: GenerationParams | None = None, channels: int = 4) -> torch.Tensor:
    return checked_latent(latent, channels, params, limits=LIMITS, device=CPU, dtype=torch.float32)  # type: ignore[arg-type]


def test_a_latent_is_put_on_the_device_as_one_batch() -> None:
    params = GenerationParams(prompt="x", width=64, height=32)
    from_numpy = _check(np.ones((4, 4, 8), np.float16), params)
    from_torch = _check(torch.ones(1, 4, 4, 8, dtype=torch.float64), params)
    for tensor in (from_numpy, from_torch):
        assert tensor.shape == (1, 4, 4, 8) and tensor.dtype == torch.float32


@pytest.mark.parametrize(
    "latent",
    [
        np.zeros((4, 8, 8), np.int32),
        torch.zeros(4, 8, 8, dtype=torch.int64),
        np.full((4, 8, 8), np.inf, np.float32),
        [[0.0]],
        np.zeros((3, 8, 8), np.float32),  # channels
        np.zeros((4, 9, 8), np.float32),  # beyond max_side / 8
        np.zeros((4, 0, 8), np.float32),
        np.zeros((2, 4, 8, 8), np.float32),  # a batch of two
    ],
)
def test_bad_latents_are_refused(latent: object) -> None:
    with pytest.raises(LatentError):
        _check(latent)


def test_with_params_the_shape_must_fit_the_request() -> None:
    with pytest.raises(LatentError, match="does not fit a 64x64 image"):
        _check(np.zeros((4, 4, 4), np.float32), GenerationParams(prompt="x", width=64, height=64))


def test_to_numpy_drops_the_batch_and_keeps_the_dtype() -> None:
    latents = torch.arange(2 * 3 * 3, dtype=torch.float16).reshape(1, 2, 3, 3)
    array = to_numpy(latents)
    assert array.shape == (2, 3, 3) and array.dtype == np.float16
    assert np.array_equal(array, latents[0].numpy())
