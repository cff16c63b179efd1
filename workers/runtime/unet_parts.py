"""UNet2DConditionModel's forward pass in parts, so a step cache can run some of it.

`forward` is diffusers' UNet2DConditionModel.forward for what the pipelines here pass (a timestep per
sample, prompt states, no ControlNet, adapter or attention mask), written out block by block with the
same calls in the same order, so its output equals `unet(...)` bit for bit (tests/workers/runtime/
test_unet_parts.py) and it can stop at the points a step cache needs:

- DeepCache (CVPR'24): with a skip branch of depth D, the "deep" features are the hidden
  states entering up_blocks[-D] (the output of every block below); a full call returns them, and a
  `shallow` call recomputes only conv_in, the first D down blocks (the D-th without its downsampler,
  whose output only the deep blocks read) and the last D up blocks on those features.
- TeaCache (CVPR'25): the timestep-embedding-modulated input is, in a UNet, the output of
  the first ResNet, where the timestep embedding is added to the input's features (`modulated_input`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

_SHALLOW_BLOCKS = ("CrossAttnDownBlock2D", "DownBlock2D")


@dataclass(frozen=True, slots=True)
class Conditioning:
    """What every block of one call reads: the timestep embedding and the prompt states."""

    emb: torch.Tensor
    states: torch.Tensor
    upsample_size: bool  # the latent's sides are not multiples of the up blocks' factor


def condition(unet: Any, sample: torch.Tensor, timesteps: torch.Tensor, states: torch.Tensor) -> Conditioning:
    """The timestep embedding with the prompt's addition embedding (diffusers' forward, in its order)."""
    t_emb = unet.get_time_embed(sample=sample, timestep=timesteps)
    emb = unet.time_embedding(t_emb, None)
    aug_emb = unet.get_aug_embed(emb=emb, encoder_hidden_states=states, added_cond_kwargs={})
    emb = emb + aug_emb if aug_emb is not None else emb
    if unet.time_embed_act is not None:
        emb = unet.time_embed_act(emb)
    states = unet.process_encoder_hidden_states(encoder_hidden_states=states, added_cond_kwargs={})
    factor = 2**unet.num_upsamplers
    return Conditioning(emb, states, any(side % factor != 0 for side in sample.shape[-2:]))


def check_supported(unet: Any, depth: int) -> None:
    """ValueError unless this UNet can be run in parts with a skip branch of `depth` blocks."""
    config = unet.config
    if unet.config.center_input_sample or config.class_embed_type is not None:
        raise ValueError("the step cache runs UNets without class embeddings or centred inputs")
    if config.addition_embed_type not in (None, "text"):
        raise ValueError(f"the step cache does not run addition_embed_type {config.addition_embed_type!r}")
    if not 1 <= depth <= len(unet.down_blocks):
        raise ValueError(
            f"a skip branch of {depth} blocks: this UNet has {len(unet.down_blocks)} down blocks"
        )
    kinds = {type(block).__name__ for block in unet.down_blocks[:depth]}
    if not kinds <= set(_SHALLOW_BLOCKS):
        raise ValueError(
            f"the shallow branch runs {', '.join(_SHALLOW_BLOCKS)}; this UNet has {sorted(kinds)}"
        )


def forward(
    unet: Any, sample: torch.Tensor, timesteps: torch.Tensor, states: torch.Tensor, *, keep_depth: int = 0
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The UNet's output, and (keep_depth > 0) the hidden states entering up_blocks[-keep_depth]."""
    cond = condition(unet, sample, timesteps, states)
    sample = unet.conv_in(sample)
    residuals: tuple[torch.Tensor, ...] = (sample,)
    for block in unet.down_blocks:
        sample, res = _down(block, sample, cond)
        residuals += res
    if unet.mid_block is not None:
        if getattr(unet.mid_block, "has_cross_attention", False):
            sample = unet.mid_block(sample, cond.emb, encoder_hidden_states=cond.states)
        else:
            sample = unet.mid_block(sample, cond.emb)
    kept = None
    count = len(unet.up_blocks)
    for index, block in enumerate(unet.up_blocks):
        if keep_depth and index == count - keep_depth:
            kept = sample
        sample, residuals = _up(block, sample, residuals, cond, final=index == count - 1)
    return _out(unet, sample), kept


def shallow(
    unet: Any,
    sample: torch.Tensor,
    timesteps: torch.Tensor,
    states: torch.Tensor,
    deep: torch.Tensor,
    depth: int,
) -> torch.Tensor:
    """DeepCache's partial call: the outer `depth` blocks on fresh inputs, the rest read from `deep`."""
    cond = condition(unet, sample, timesteps, states)
    sample = unet.conv_in(sample)
    residuals: tuple[torch.Tensor, ...] = (sample,)
    for block in unet.down_blocks[: depth - 1]:
        sample, res = _down(block, sample, cond)
        residuals += res
    residuals += _down_without_downsampler(unet.down_blocks[depth - 1], sample, cond)
    sample = deep
    count = len(unet.up_blocks)
    for index in range(count - depth, count):
        sample, residuals = _up(unet.up_blocks[index], sample, residuals, cond, final=index == count - 1)
    return _out(unet, sample)


def modulated_input(
    unet: Any, sample: torch.Tensor, timesteps: torch.Tensor, states: torch.Tensor
) -> torch.Tensor:
    """TeaCache's indicator in a UNet: the first ResNet's output, the input's features plus the timestep
    embedding (the first down block's first resnet)."""
    cond = condition(unet, sample, timesteps, states)
    first: torch.Tensor = unet.down_blocks[0].resnets[0](unet.conv_in(sample), cond.emb)
    return first


def _down(
    block: Any, sample: torch.Tensor, cond: Conditioning
) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
    if getattr(block, "has_cross_attention", False):
        out: tuple[torch.Tensor, tuple[torch.Tensor, ...]] = block(
            hidden_states=sample, temb=cond.emb, encoder_hidden_states=cond.states
        )
        return out
    plain: tuple[torch.Tensor, tuple[torch.Tensor, ...]] = block(hidden_states=sample, temb=cond.emb)
    return plain


def _down_without_downsampler(
    block: Any, sample: torch.Tensor, cond: Conditioning
) -> tuple[torch.Tensor, ...]:
    """A down block's resnets (and attentions) as its forward runs them, without its downsampler."""
    attentions = getattr(block, "attentions", None) or [None] * len(block.resnets)
    states: tuple[torch.Tensor, ...] = ()
    for resnet, attention in zip(block.resnets, attentions, strict=True):
        sample = resnet(sample, cond.emb)
        if attention is not None:
            sample = attention(sample, encoder_hidden_states=cond.states, return_dict=False)[0]
        states += (sample,)
    return states


def _up(
    block: Any, sample: torch.Tensor, residuals: tuple[torch.Tensor, ...], cond: Conditioning, *, final: bool
) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
    taken, residuals = residuals[-len(block.resnets) :], residuals[: -len(block.resnets)]
    size = residuals[-1].shape[2:] if cond.upsample_size and not final else None
    kwargs: dict[str, Any] = {"hidden_states": sample, "temb": cond.emb, "res_hidden_states_tuple": taken}
    if getattr(block, "has_cross_attention", False):
        kwargs["encoder_hidden_states"] = cond.states
    return block(**kwargs, upsample_size=size), residuals


def _out(unet: Any, sample: torch.Tensor) -> torch.Tensor:
    if unet.conv_norm_out:
        sample = unet.conv_act(unet.conv_norm_out(sample))
    out: torch.Tensor = unet.conv_out(sample)
    return out
