"""The judge: a classifier that reads every attribute of a lab image, and the scores built on it.

The quality of an image for a prompt is the fraction of the prompt's attributes (lab.captions.parse)
the judge reads in the image: 1.0 when the image shows everything asked, 0.0 when nothing; an
interpretable score, like a VQA score, and what "quality" means in every lab report. The judge is a
core.scoring.Scorer (scale core.scoring.JUDGE_SCALE), the one serving workers hold on the lab's
models; the cascade does not route on it (lab.discriminator does), so it grades the cascade. Its
distribution distance is the Frechet distance between the judge's features (the 128-d layer
before its heads) of two image sets: an FID analogue on the lab's world.

The judge is a small CNN with one head per attribute, trained on jittered true renders with noise
and blur (so that it reads the models' softer images too), and validated before it judges anything
(lab.validation: held-out, blurred and noisy renders, agreement with the second judge, lab.judge_b, on
the models' images): `Judge.load` refuses a judge whose judge.json lacks that validation or falls
below a floor (lab.judge_floors), and `reprise lab judge` measures it again.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import torch
from PIL import Image
from torch import nn

from core.errors import RepriseError
from core.scoring import JUDGE_SCALE, ScoreScale
from lab.captions import parse
from lab.world import ATTRIBUTES, SIZE, Scene, render, sample_scene

FEATURES: Final = 128
HELDOUT_SEED: Final = 777_000  # held-out renders: a seed no training run uses
ARCHITECTURE: Final = "cnn-3x3"  # JudgeNet's name in judge.json; lab.judge_b.ARCHITECTURE the other's


class JudgeRefused(RepriseError):
    """A judge without a validation, or validated below a floor (lab.judge_floors): it must not score."""


class JudgeNet(nn.Module):
    """Four stride-2 convolutions to a 128-d feature, one linear head per attribute."""

    ARCHITECTURE: Final = ARCHITECTURE

    def __init__(self) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for inputs, outputs in ((3, 32), (32, 64), (64, 64), (64, 128)):
            layers += [nn.Conv2d(inputs, outputs, 3, stride=2, padding=1), nn.BatchNorm2d(outputs), nn.ReLU()]
        self.body = nn.Sequential(*layers, nn.Flatten(), nn.Linear(128 * 4 * 4, FEATURES), nn.ReLU())
        self.heads = nn.ModuleDict(
            {name: nn.Linear(FEATURES, len(values)) for name, values in ATTRIBUTES.items()}
        )

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        features: torch.Tensor = self.body(images)
        return features, {name: head(features) for name, head in self.heads.items()}


def to_tensor(images: Sequence[Image.Image | npt.NDArray[np.uint8]]) -> torch.Tensor:
    """RGB images (PIL or uint8 arrays, any size) -> (n, 3, 64, 64) floats in [-1, 1]."""
    arrays = []
    for image in images:
        picture = image if isinstance(image, Image.Image) else Image.fromarray(np.asarray(image))
        if picture.size != (SIZE, SIZE):
            picture = picture.resize((SIZE, SIZE), Image.Resampling.BILINEAR)
        arrays.append(np.asarray(picture.convert("RGB"), dtype=np.float32))
    return torch.from_numpy(np.stack(arrays) / 127.5 - 1.0).permute(0, 3, 1, 2).contiguous().float()


def _targets(scenes: Sequence[Scene]) -> dict[str, torch.Tensor]:
    """Class index per attribute and scene; -100 (ignored by the loss) where the scene lacks it."""
    targets = {name: torch.full((len(scenes),), -100, dtype=torch.long) for name in ATTRIBUTES}
    for row, scene in enumerate(scenes):
        for name, value in scene.attributes().items():
            targets[name][row] = ATTRIBUTES[name].index(value)
    return targets


def _augment(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Softness and noise like a small VAE's decodes: per image, unchanged, a 3x3 or 5x5 box blur, or a
    round trip through half or quarter resolution; then Gaussian noise of a random strength."""
    n = images.shape[0]
    variants = [
        images,
        nn.functional.avg_pool2d(images, 3, stride=1, padding=1, count_include_pad=False),
        nn.functional.avg_pool2d(images, 5, stride=1, padding=2, count_include_pad=False),
        nn.functional.interpolate(nn.functional.avg_pool2d(images, 2), scale_factor=2, mode="bilinear"),
        nn.functional.interpolate(nn.functional.avg_pool2d(images, 4), scale_factor=4, mode="bilinear"),
    ]
    choice = torch.randint(0, len(variants), (n,), generator=generator)
    mixed = torch.stack([variants[int(c)][row] for row, c in enumerate(choice)])
    sigma = torch.rand(n, 1, 1, 1, generator=generator) * 0.15
    return mixed + sigma * torch.randn(images.shape, generator=generator)


def train_judge(
    steps: int, *, seed: int, batch: int = 64, log: Any = print, network: Callable[[], nn.Module] = JudgeNet
) -> nn.Module:
    """A judge network (`network()`, built once seeded: JudgeNet, or lab.judge_b's) trained on
    jittered, blurred and noisy true renders, one cross-entropy per attribute."""
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    net = network().train()
    optimizer = torch.optim.AdamW(net.parameters(), lr=2e-3)
    loss_fn = nn.CrossEntropyLoss(ignore_index=-100)
    for step in range(steps):
        scenes = [sample_scene(rng) for _ in range(batch)]
        images = _augment(to_tensor([render(scene, rng) for scene in scenes]), generator)
        _, logits = net(images)
        targets = _targets(scenes)
        loss = sum((loss_fn(logits[name], targets[name]) for name in ATTRIBUTES), torch.zeros(()))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 0 or step == steps - 1:
            log(f"judge step {step}/{steps} loss {loss.item():.4f}")
    return net.eval()


class Judge:
    """A trained JudgeNet, reading images and scoring them against prompts (thread-unsafe, CPU): the
    core.scoring.Scorer of the lab's images, in shares of attributes read (0..1)."""

    name: Final = "lab-judge"
    scale: Final[ScoreScale] = JUDGE_SCALE

    def __init__(self, net: nn.Module) -> None:
        self._net = net.eval()

    @property
    def network(self) -> nn.Module:
        """The trained network (lab.video.judge fine-tunes a copy of it on moving frames)."""
        return self._net

    @classmethod
    def load(cls, directory: Path, *, validated: bool = True) -> Judge:
        """The judge saved in `directory`. It must carry a validation at or above every floor
        (lab.judge_floors.FLOORS), else JudgeRefused says which and how to fix it; `validated=False`
        loads it anyway, for the validation itself."""
        from safetensors.torch import load_file

        from lab.judge_floors import refusal

        meta = json.loads((directory / "judge.json").read_text())
        if meta.get("attributes") != {name: list(values) for name, values in ATTRIBUTES.items()}:
            raise ValueError(
                f"the judge in {directory} was trained on another world: run `reprise models train`"
            )
        if validated and (reason := refusal(meta.get("validation"))) is not None:
            raise JudgeRefused(f"the judge in {directory} is refused: {reason}")
        net = _network(meta.get("architecture", ARCHITECTURE))
        net.load_state_dict(load_file(str(directory / "judge.safetensors")))
        return cls(net)

    def save(self, directory: Path, **meta: Any) -> None:
        from safetensors.torch import save_file

        directory.mkdir(parents=True, exist_ok=True)
        state = {name: tensor.contiguous() for name, tensor in self._net.state_dict().items()}
        save_file(state, str(directory / "judge.safetensors"))
        attributes = {name: list(values) for name, values in ATTRIBUTES.items()}
        architecture = getattr(self._net, "ARCHITECTURE", ARCHITECTURE)
        body = {"attributes": attributes, "architecture": architecture, **meta}
        (directory / "judge.json").write_text(json.dumps(body, indent=2) + "\n")

    def _run(
        self, images: Sequence[Image.Image | npt.NDArray[np.uint8]]
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        with torch.inference_mode():
            features, logits = self._net(to_tensor(images))
        return features, logits

    def read(self, images: Sequence[Image.Image | npt.NDArray[np.uint8]]) -> list[dict[str, str]]:
        """Every attribute's most likely value, per image (slot b read even when absent)."""
        if not images:
            return []
        _, logits = self._run(images)
        chosen = {name: logit.argmax(dim=1).tolist() for name, logit in logits.items()}
        return [
            {name: ATTRIBUTES[name][chosen[name][row]] for name in ATTRIBUTES} for row in range(len(images))
        ]

    def features(self, images: Sequence[Image.Image | npt.NDArray[np.uint8]]) -> npt.NDArray[np.float64]:
        if not images:
            return np.zeros((0, FEATURES))
        return self._run(images)[0].double().numpy()

    def confidences(self, images: Sequence[Image.Image | npt.NDArray[np.uint8]]) -> npt.NDArray[np.float64]:
        """How clearly the judge reads each attribute: per head, its top probability and its entropy
        (n, 2 x attributes). A true render is read with certainty; a muddled image is not."""
        if not images:
            return np.zeros((0, 2 * len(ATTRIBUTES)))
        _, logits = self._run(images)
        probs = [torch.softmax(logit.double(), dim=1) for logit in logits.values()]
        top = torch.stack([p.max(dim=1).values for p in probs], dim=1)
        entropy = torch.stack([-(p * torch.log(p.clamp_min(1e-12))).sum(dim=1) for p in probs], dim=1)
        return torch.cat([top, entropy], dim=1).numpy()

    def reads(self, prompt: str) -> bool:
        """Whether the prompt describes a scene of the lab's world, the only prompts the judge scores."""
        return parse(prompt) is not None

    def score(
        self, images: Sequence[Image.Image | npt.NDArray[np.uint8]], prompts: Sequence[str]
    ) -> list[float | None]:
        """Per pair, the fraction of the prompt's attributes the image shows; None for a prompt
        that is not of the lab's world (it cannot be judged)."""
        if len(images) != len(prompts):
            raise ValueError(f"got {len(images)} images and {len(prompts)} prompts; they are scored in pairs")
        readings = self.read(images)
        scores: list[float | None] = []
        for reading, prompt in zip(readings, prompts, strict=True):
            asked = parse(prompt)
            scores.append(None if asked is None else agreement(asked, reading))
        return scores


def _network(architecture: str) -> nn.Module:
    from lab.judge_b import ARCHITECTURE as SECOND
    from lab.judge_b import JudgeNetB

    networks: dict[str, type[nn.Module]] = {ARCHITECTURE: JudgeNet, SECOND: JudgeNetB}
    if architecture not in networks:
        raise ValueError(f"unknown judge architecture {architecture!r}: one of {sorted(networks)}")
    return networks[architecture]()


def agreement(asked: dict[str, str], reading: dict[str, str]) -> float:
    """The fraction of the asked attributes the reading shows."""
    return sum(reading[name] == value for name, value in asked.items()) / len(asked)


def heldout_accuracy(judge: Judge, count: int, seed: int = HELDOUT_SEED) -> float:
    """Attribute accuracy on `count` held-out true renders (jittered): correct readings over
    attributes shown, every scene's attributes counted."""
    rng = np.random.default_rng(seed)
    scenes = [sample_scene(rng) for _ in range(count)]
    readings: list[dict[str, str]] = []
    for start in range(0, count, 256):
        readings += judge.read([render(scene, rng) for scene in scenes[start : start + 256]])
    shown = [scene.attributes() for scene in scenes]
    right = sum(
        reading[name] == value
        for asked, reading in zip(shown, readings, strict=True)
        for name, value in asked.items()
    )
    return right / sum(len(asked) for asked in shown)


def frechet_distance(first: npt.NDArray[np.float64], second: npt.NDArray[np.float64]) -> float:
    """FID's formula on two feature sets: |mu1 - mu2|^2 + tr(S1 + S2 - 2 (S1 S2)^(1/2))."""
    from scipy import linalg

    if first.shape[0] < 2 or second.shape[0] < 2:
        raise ValueError("the Frechet distance needs at least two images per set")
    mu1, mu2 = first.mean(axis=0), second.mean(axis=0)
    s1, s2 = np.cov(first, rowvar=False), np.cov(second, rowvar=False)
    with warnings.catch_warnings():  # near-singular covariances (few images) warn; FID's code ignores it too
        warnings.simplefilter("ignore")
        root = linalg.sqrtm(s1 @ s2)
    root = root.real if np.iscomplexobj(root) else root
    # Rounding can leave a distance of a set to itself a hair below 0.
    return max(0.0, float(((mu1 - mu2) ** 2).sum() + np.trace(s1 + s2 - 2.0 * root)))
