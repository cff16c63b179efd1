"""The lab's discriminator (DiffServe 3.2): a small network that tells true renders ("real") from the
lab's models' images ("generated", both models' as the paper trains on both), whose belief that an
image is real routes the cascade: a light image that looks real is kept, one that does not goes to
the heavy model. It is a network of its own, trained apart from the judge: the cascade is then
graded by the judge on a signal the judge did not produce.

Three stride-2 convolutions (16, 32, 64 channels) over the 64x64 image, global average pooling, a
HIDDEN-d feature and one logit ("real"). It trains on fresh jittered renders against the fixed set
of generated images lab.stages makes (horizontal flips double them), balanced batches, AdamW.
`features` gives the cascade (workers.runtime.discriminator) the hidden feature and the logit; the lab
registers `lab_feature_reader` as the reader of DiscriminatorFeatures.LAB (lab.registration).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import torch
from torch import nn

from lab.judge import to_tensor
from lab.world import render, sample_scene

HIDDEN: Final = 16
SEED_OFFSET: Final = 40  # the run's seed + this: no other component trains from it
LR: Final = 2e-3
WEIGHT_DECAY: Final = 0.05  # few generated images: a strong prior against memorising them (our choice)
FILE: Final = "discriminator.safetensors"

Array = npt.NDArray[np.uint8]


class DiscriminatorNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for inputs, outputs in ((3, 16), (16, 32), (32, 64)):
            layers += [nn.Conv2d(inputs, outputs, 3, stride=2, padding=1), nn.LeakyReLU(0.2)]
        self.body = nn.Sequential(*layers)
        self.hidden = nn.Sequential(nn.Linear(64, HIDDEN), nn.LeakyReLU(0.2))
        self.logit = nn.Linear(HIDDEN, 1)

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden: torch.Tensor = self.hidden(self.body(images).mean(dim=(2, 3)))
        return hidden, self.logit(hidden).squeeze(1)


def train_discriminator(
    generated: Sequence[Array], steps: int, *, seed: int, batch: int = 32, log: Any = print
) -> DiscriminatorNet:
    """Real (label 1): fresh jittered renders each step; generated (0): drawn from `generated`."""
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    fakes = to_tensor(list(generated))
    fakes = torch.cat([fakes, fakes.flip(3)])
    net = DiscriminatorNet().train()
    optimizer = torch.optim.AdamW(net.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    loss_fn = nn.BCEWithLogitsLoss()
    labels = torch.cat([torch.ones(batch), torch.zeros(batch)])
    for step in range(steps):
        reals = to_tensor([render(sample_scene(rng), rng) for _ in range(batch)])
        chosen = fakes[torch.randint(0, fakes.shape[0], (batch,), generator=generator)]
        _, logits = net(torch.cat([reals, chosen]))
        loss = loss_fn(logits, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 0 or step == steps - 1:
            log(f"discriminator step {step}/{steps} loss {loss.item():.4f}")
    return net.eval()


class LabDiscriminator:
    """A trained DiscriminatorNet reading images (thread-unsafe, CPU)."""

    def __init__(self, net: DiscriminatorNet) -> None:
        self._net = net.eval()

    @classmethod
    def load(cls, directory: Path) -> LabDiscriminator:
        from safetensors.torch import load_file

        if not (directory / FILE).is_file():
            raise FileNotFoundError(
                f"no lab discriminator in {directory}: "
                "run `reprise models train --only judge-b,discriminator`"
            )
        net = DiscriminatorNet()
        net.load_state_dict(load_file(str(directory / FILE)))
        return cls(net)

    def save(self, directory: Path, **meta: Any) -> None:
        from safetensors.torch import save_file

        directory.mkdir(parents=True, exist_ok=True)
        state = {name: tensor.contiguous() for name, tensor in self._net.state_dict().items()}
        save_file(state, str(directory / FILE))
        (directory / "discriminator.json").write_text(json.dumps({"hidden": HIDDEN, **meta}, indent=2) + "\n")

    def features(self, images: Sequence[Any]) -> npt.NDArray[np.float64]:
        """(n, HIDDEN + 1): the hidden feature and the "real" logit of each image."""
        if not images:
            return np.zeros((0, HIDDEN + 1))
        with torch.inference_mode():
            hidden, logit = self._net(to_tensor(list(images)))
        return torch.cat([hidden, logit.unsqueeze(1)], dim=1).double().numpy()

    def real_probability(self, images: Sequence[Any]) -> npt.NDArray[np.float64]:
        """The network's own P(real) per image: its sigmoid."""
        logits = self.features(images)[:, -1]
        return np.asarray(1.0 / (1.0 + np.exp(-logits)), dtype=np.float64)


@functools.cache
def lab_feature_reader(weights: Path) -> LabDiscriminator:
    """The discriminator network of a trained weights directory (lab.models.lab_weights), loaded once per
    process."""
    return LabDiscriminator.load(weights / "discriminator")
