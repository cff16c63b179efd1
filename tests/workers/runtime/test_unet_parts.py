"""The UNet in parts (workers.runtime.unet_parts): its full forward equals diffusers' bit for bit, and
DeepCache's shallow call on the deep features of the same input gives that output back, on the lab's
trained UNets and on Stable Diffusion 1.5's architecture (its published config, narrowed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import diffusers
import pytest
import torch

from workers.runtime import unet_parts

torch.set_num_threads(1)
UNET: Any = diffusers.UNet2DConditionModel
ROOT = Path(__file__).resolve().parents[3]


def _lab_unet(name: str) -> Any:
    return UNET.from_pretrained(ROOT / "lab" / "weights" / name).eval()


def _sd15_narrow() -> Any:
    """SD 1.5's UNet (bench/gpu/sd15/unet.json: four levels, three with cross-attention, two resnets
    a level) at 32-64 channels, random weights: the architecture, at a size a test runs."""
    config = json.loads((ROOT / "bench" / "gpu" / "sd15" / "unet.json").read_text())
    config |= {"block_out_channels": [32, 32, 64, 64], "cross_attention_dim": 64}
    config = {key: value for key, value in config.items() if not key.startswith("_")}
    torch.manual_seed(0)
    return UNET(**config).eval()


def _inputs(unet: Any, side: int, tokens: int = 8) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    sample = torch.randn(3, unet.config.in_channels, side, side, generator=generator)
    states = torch.randn(3, tokens, unet.config.cross_attention_dim, generator=generator)
    return sample, torch.tensor([981, 500, 21]), states


CASES = [("unet-large", 8), ("unet-small", 8), ("sd15", 16), ("sd15", 12)]  # 12: not a multiple of 8


@pytest.mark.parametrize(("name", "side"), CASES)
def test_the_forward_in_parts_equals_the_unet_and_shallow_on_its_own_deep_features_too(
    name: str, side: int
) -> None:
    unet = _sd15_narrow() if name == "sd15" else _lab_unet(name)
    sample, timesteps, states = _inputs(unet, side)
    with torch.inference_mode():
        whole = unet(sample, timesteps, encoder_hidden_states=states, return_dict=False)[0]
        for depth in range(1, len(unet.down_blocks) + 1):
            unet_parts.check_supported(unet, depth)
            out, deep = unet_parts.forward(unet, sample, timesteps, states, keep_depth=depth)
            assert torch.equal(out, whole)
            assert deep is not None
            again = unet_parts.shallow(unet, sample, timesteps, states, deep, depth)
            assert torch.equal(again, whole), depth
            # Another step's input on these features is not this step's output: the shallow branch runs.
            other = unet_parts.shallow(unet, sample * 0.5, timesteps, states, deep, depth)
            assert not torch.allclose(other, whole)


def test_the_modulated_input_reads_the_timestep() -> None:
    unet = _lab_unet("unet-small")
    sample, timesteps, states = _inputs(unet, 8)
    with torch.inference_mode():
        first = unet_parts.modulated_input(unet, sample, timesteps, states)
        later = unet_parts.modulated_input(unet, sample, timesteps - 20, states)
    assert first.shape == (3, unet.config.block_out_channels[0], 8, 8)
    assert not torch.equal(first, later)


def test_a_skip_branch_deeper_than_the_unet_is_refused() -> None:
    unet = _lab_unet("unet-small")
    with pytest.raises(ValueError, match="2 down blocks"):
        unet_parts.check_supported(unet, 3)
