"""Training the lab's text-to-video model on this CPU: a UNet3DConditionModel on vae-a's latents.

Recipe (`VIDEO`; `VIDEO_SMOKE` trains in seconds, for tests):
1. A pool of moving scenes (lab.motion), each rendered with jitter, encoded frame by frame by the
   trained vae-a (scaled as the image models' latents are) and captioned once (lab.motion_captions),
   its caption's MiniLM token states kept in float16 (lab.training.TextStates, as the image pool).
2. The UNet3DConditionModel (ModelScope's text-to-video layout, which diffusers' TextToVideoSDPipeline
   loads) is inflated from the trained unet-large, as AnimateDiff and ModelScope grow a video model
   from an image one: its spatial layers (convolutions, resnets, spatial and cross-attention, time
   embedding) take unet-large's weights, its temporal layers start as the identity (diffusers zeroes
   the temporal convolutions' last layer; the temporal attentions' output projections are zeroed
   here), so step 0 is unet-large frame by frame, less its pooled-text embedding (UNet3D has no
   addition embedding: the prompt reaches it through cross-attention alone). The whole network is
   then trained on the pool's videos with the image UNets' objective and schedule: epsilon
   prediction under SD 1.x's noise schedule, 10% of captions dropped for guidance, AdamW with
   warm-up and cosine decay, an EMA of the weights (lab.training's helpers), saved in float16.
3. It runs on VIDEO_THREADS thread with deterministic algorithms (lab.build pins the kernels as for
   the image models): the same seed on the same torch gives the same bytes.

Where the frames' order comes from: UNet3D's temporal attention has no positional embedding, but its
temporal convolutions pad with zeros at the first and last frame, and four of them per resnet reach
every frame: the network can tell frame 0 from frame 7, which a move across the frame needs.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import torch

from lab.models import SCHEDULER_CONFIG
from lab.motion import render_video, sample_moving_scene
from lab.motion_captions import caption
from lab.training import (
    LATENT_CHANNELS,
    UNET_LR,
    Log,
    TextStates,
    _diffusers,
    load_unet,
    pixels,
    unet_step,
)

VIDEO_THREADS: Final = 1  # one core of the shared machine (the image models train on lab.training.THREADS)
VIDEO_UNET: Final = "unet-video"
_CFG_DROP: Final = 0.1
FOLD_CAPTIONS: Final = 256  # captions whose mean pooled-text embedding is folded in (inflated)


@dataclass(frozen=True, slots=True)
class VideoRecipe:
    pool: int  # videos encoded once (each with one caption)
    steps: int
    batch: int  # videos per step
    seed_offset: int
    init: str | None  # the image UNet it is inflated from, None: random


VIDEO: Final = VideoRecipe(pool=768, steps=400, batch=8, seed_offset=30, init="unet-large")
VIDEO_SMOKE: Final = VideoRecipe(pool=8, steps=3, batch=2, seed_offset=30, init="unet-large")


def new_video_unet(channels: tuple[int, ...] = (64, 64)) -> Any:
    """unet-large's shape (lab.training.new_unet with cross-attention at both levels) in 3D: its
    channels (64/64; the smoke recipe's 32/32), one layer per block, 8 heads of 8 (UNet3D reads
    attention_head_dim as the number of heads, diffusers #2011), conditioned on MiniLM's 384-d token
    states."""
    return _diffusers().UNet3DConditionModel(
        sample_size=8,
        in_channels=LATENT_CHANNELS,
        out_channels=LATENT_CHANNELS,
        layers_per_block=1,
        block_out_channels=channels,
        down_block_types=("CrossAttnDownBlock3D", "CrossAttnDownBlock3D"),
        up_block_types=("CrossAttnUpBlock3D", "CrossAttnUpBlock3D"),
        cross_attention_dim=384,
        attention_head_dim=8,
        norm_num_groups=8,
    )


def inflated(image_unet: Any | None, states: torch.Tensor | None = None) -> Any:
    """A new video UNet; with `image_unet`, its spatial weights copied in and every temporal layer
    the identity (module doc). The image UNet's pooled-text embedding, which UNet3D lacks, is folded
    into the time embedding's bias as its mean over `states` (token states of captions): the time
    embedding the inflated blocks see is then the image UNet's for an average caption, and the
    prompt's own part is left to cross-attention to learn."""
    if image_unet is None:
        return new_video_unet()
    video = new_video_unet(tuple(image_unet.config.block_out_channels))
    state = video.state_dict()
    # The spatial transformers' projections are linear layers in 2D and 1x1 convolutions in 3D:
    # the same weights, shaped (out, in) or (out, in, 1, 1).
    taken = {
        name: tensor.reshape(state[name].shape)
        for name, tensor in image_unet.state_dict().items()
        if name in state and state[name].numel() == tensor.numel()
    }
    video.load_state_dict(taken, strict=False)
    with torch.no_grad():
        if states is not None and getattr(image_unet, "add_embedding", None) is not None:
            pooled = image_unet.add_embedding(states.float()).mean(dim=0)
            video.time_embedding.linear_2.bias.add_(pooled)
        for module in video.modules():
            if type(module).__name__ == "TransformerTemporalModel":
                module.proj_out.weight.zero_()
                module.proj_out.bias.zero_()
    return video


def encode_video_pool(vae: Any, text: TextStates, size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`size` jittered moving scenes as scaled latents (n, C, F, h, w) and their captions' token
    states (n, tokens, 384) in float16."""
    rng = np.random.default_rng(seed)
    latents, states = [], []
    for start in range(0, size, 32):
        scenes = [sample_moving_scene(rng) for _ in range(min(32, size - start))]
        videos = [render_video(scene, rng) for scene in scenes]
        frames = pixels([frame for video in videos for frame in video])
        with torch.no_grad():
            encoded = vae.encode(frames).latent_dist.mode() * vae.config.scaling_factor
        count = len(scenes)
        latents.append(encoded.reshape(count, -1, *encoded.shape[1:]).permute(0, 2, 1, 3, 4).contiguous())
        states.append(text([caption(scene, rng) for scene in scenes]).half())
    return torch.cat(latents), torch.cat(states)


def train_video_unet(
    recipe: VideoRecipe,
    pool: tuple[torch.Tensor, torch.Tensor],
    empty: torch.Tensor,
    *,
    seed: int,
    log: Log,
    init: Any = None,
) -> Any:
    """The video UNet trained on the pool (module doc); returns the EMA weights' model."""
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    latents, states = pool
    unet = inflated(init, states[:FOLD_CAPTIONS] if init is not None else None).train()
    ema = copy.deepcopy(unet).eval()
    noise_schedule = _diffusers().DDPMScheduler.from_config(SCHEDULER_CONFIG)
    optimizer = torch.optim.AdamW(unet.parameters(), lr=UNET_LR, weight_decay=0.0)
    for step in range(recipe.steps):
        index = torch.randint(0, latents.shape[0], (recipe.batch,), generator=generator)
        clean, context = latents[index], states[index].float()
        dropped = torch.rand(recipe.batch, generator=generator) < _CFG_DROP
        context[dropped] = empty
        noise = torch.randn(clean.shape, generator=generator)
        timesteps = torch.randint(0, 1000, (recipe.batch,), generator=generator)
        noisy = noise_schedule.add_noise(clean, noise, timesteps)
        loss = torch.nn.functional.mse_loss(
            unet(noisy, timesteps, encoder_hidden_states=context).sample, noise
        )
        unet_step(optimizer, unet, ema, loss, step, recipe.steps)
        if step % 50 == 0 or step == recipe.steps - 1:
            log(f"{VIDEO_UNET} step {step}/{recipe.steps} loss {loss.item():.4f}")
    return ema


def train_video_model(weights: Path, recipe: VideoRecipe, *, seed: int, log: Log) -> dict[str, float]:
    """The video UNet into weights/unet-video, from weights' vae-a (and its init UNet); seconds."""
    from lab.training import load_vae

    started = time.perf_counter()
    text = TextStates()
    empty = text([""])[0]
    pool = encode_video_pool(load_vae(weights / "vae-a"), text, recipe.pool, seed + recipe.seed_offset + 100)
    seconds = {"video-pool": time.perf_counter() - started}
    started = time.perf_counter()
    init = None if recipe.init is None else load_unet(weights / recipe.init)
    unet = train_video_unet(recipe, pool, empty, seed=seed + recipe.seed_offset, log=log, init=init)
    unet.to(torch.float16).save_pretrained(weights / VIDEO_UNET, safe_serialization=True)
    seconds[VIDEO_UNET] = time.perf_counter() - started
    return seconds
