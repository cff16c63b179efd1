"""The second judge: another architecture, trained apart from the first, so that where the two read a
generated image alike the reading is not one network's habit (a second opinion, as FID's critics ask
of any single feature extractor).

Where the first judge (lab.judge.JudgeNet) is four stride-2 3x3 convolutions with batch norm and a
flattened 4x4 map, this one cuts the image into 4x4 patches (ConvNeXt's stem), then two residual
stages of 5x5 + 1x1 convolutions with group norm and GELU, then global average and max pooling to a
128-d feature and one head per attribute. It is trained by lab.judge.train_judge on the same task
(true renders, blurred and noisy) from its own seed.
"""

from __future__ import annotations

from typing import Final

import torch
from torch import nn

from lab.world import ATTRIBUTES

ARCHITECTURE: Final = "patch4-residual-5x5"
FEATURES: Final = 128
SEED_OFFSET: Final = 30  # the run's seed + this: no other component trains from it


def _block(channels: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(channels, channels, 5, padding=2),
        nn.GroupNorm(1, channels),
        nn.GELU(),
        nn.Conv2d(channels, channels, 1),
    )


class _Residual(nn.Module):
    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = x + self.inner(x)
        return out


class JudgeNetB(nn.Module):
    """A 4x4 patch stem (stride 4), two residual 5x5 stages (32 channels at 16x16, 64 at 8x8), global
    average + max pooling, a 128-d feature and one linear head per attribute."""

    ARCHITECTURE: Final = ARCHITECTURE

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 32, 4, stride=4),  # patches: 16x16
            nn.GroupNorm(1, 32),
            _Residual(_block(32)),
            nn.Conv2d(32, 64, 2, stride=2),  # 8x8
            nn.GroupNorm(1, 64),
            _Residual(_block(64)),
        )
        self.project = nn.Sequential(nn.Linear(2 * 64, FEATURES), nn.GELU())
        self.heads = nn.ModuleDict(
            {name: nn.Linear(FEATURES, len(values)) for name, values in ATTRIBUTES.items()}
        )

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        maps = self.body(images)
        pooled = torch.cat([maps.mean(dim=(2, 3)), maps.amax(dim=(2, 3))], dim=1)
        features: torch.Tensor = self.project(pooled)
        return features, {name: head(features) for name, head in self.heads.items()}
