"""A judge's validation: how well it reads what it was trained for, and whether a second judge of
another architecture reads the models' own images the same way (lab.judge_floors holds the floors).

- held-out accuracy: lab.judge.heldout_accuracy, true renders of a seed no training uses;
- blurred / noisy accuracy: the same renders through a Gaussian blur of BLUR_RADIUS pixels, or with
  Gaussian noise of NOISE_SIGMA (uint8 levels) added: the softness the judge was trained to see past;
- generated agreement: on the lab's models' images of held-out captions (lab.generation), the share
  of attribute readings (the attributes each caption's scene shows) on which both judges agree, per
  attribute and overall. Agreement is not accuracy: two judges can agree and both be wrong; where
  they disagree, at least one is, so the share bounds how far either can be trusted there;
- the rival's agreement: a judge of the first's own architecture and recipe, trained from another
  seed (RIVAL_SEED), read against the first on the same images. Two readers of one kind differ only
  by their seed, so what they disagree on is what the images leave open: the ceiling a second judge
  of another architecture can be held to, measured rather than assumed;
- the round trip: the same captions' true renders through the autoencoder alone (encoded, decoded),
  read by each judge: what the latent space keeps of a scene before any denoiser draws it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import torch
from PIL import Image, ImageFilter

from lab.judge import HELDOUT_SEED, Judge, heldout_accuracy, to_tensor, train_judge
from lab.judge import agreement as score_of
from lab.world import Scene, render, sample_scene

BLUR_RADIUS: Final = 1.0  # pixels of a 64x64 render (PIL's GaussianBlur radius)
NOISE_SIGMA: Final = 12.0  # uint8 levels: 0.094 in the judge's [-1, 1] input, inside its training's 0..0.15
NOISE_SEED: Final = 777_001
AGREEMENT_SEED: Final = 778_000  # held-out captions of the generated images: no training uses it
RIVAL_SEED: Final = 779_000  # the rival judge's training seed: no other training uses it

Array = npt.NDArray[np.uint8]


def blurred(image: Array) -> Array:
    return np.asarray(Image.fromarray(image).filter(ImageFilter.GaussianBlur(BLUR_RADIUS)), dtype=np.uint8)


def noisy(image: Array, rng: np.random.Generator) -> Array:
    return np.clip(image + rng.normal(0.0, NOISE_SIGMA, image.shape), 0, 255).round().astype(np.uint8)


def degraded_accuracy(judge: Judge, count: int, seed: int = HELDOUT_SEED) -> dict[str, float]:
    """Attribute accuracy on `count` held-out renders (lab.judge.heldout_accuracy's), blurred and noisy."""
    rng = np.random.default_rng(seed)
    scenes = [sample_scene(rng) for _ in range(count)]
    renders = [render(scene, rng) for scene in scenes]
    noise = np.random.default_rng(NOISE_SEED)
    return {
        "blurred_accuracy": _accuracy(judge, scenes, [blurred(image) for image in renders]),
        "noisy_accuracy": _accuracy(judge, scenes, [noisy(image, noise) for image in renders]),
    }


def _accuracy(judge: Judge, scenes: Sequence[Scene], images: Sequence[Array]) -> float:
    readings: list[dict[str, str]] = []
    for start in range(0, len(images), 256):
        readings += judge.read(images[start : start + 256])
    shown = [scene.attributes() for scene in scenes]
    right = sum(
        reading[name] == value
        for asked, reading in zip(shown, readings, strict=True)
        for name, value in asked.items()
    )
    return right / sum(len(asked) for asked in shown)


def agreement(
    first: Judge, second: Judge, scenes: Sequence[Scene], images_by_model: Mapping[str, Sequence[Array]]
) -> dict[str, Any]:
    """Per attribute, per model and overall: the share of readings of the scenes' shown attributes on
    which both judges agree (each model's images are of `scenes`, in order). Also what a score is made
    of: the share of verdicts both give (the asked value shown, or not), each judge's mean score per
    model (the share of asked attributes read as asked, lab.judge.agreement) and the correlation of the
    two judges' scores over the images, so that a drop one judge measures can be read against the
    other's."""
    agreed: dict[str, list[bool]] = {}
    by_model: dict[str, float] = {}
    verdicts: list[bool] = []
    scores: dict[str, dict[str, float]] = {}
    pairs: list[tuple[float, float]] = []
    for model, images in images_by_model.items():
        one, other = first.read(list(images)), second.read(list(images))
        marks = []
        for scene, a, b in zip(scenes, one, other, strict=True):
            asked = scene.attributes()
            for name, value in asked.items():
                agreed.setdefault(name, []).append(a[name] == b[name])
                marks.append(a[name] == b[name])
                verdicts.append((a[name] == value) == (b[name] == value))
            pairs.append((score_of(asked, a), score_of(asked, b)))
        by_model[model] = float(np.mean(marks))
        own = pairs[-len(one) :]
        scores[model] = {"judge": _mean([p[0] for p in own]), "judge_b": _mean([p[1] for p in own])}
    every = [mark for marks in agreed.values() for mark in marks]
    first_scores, second_scores = (np.array(side) for side in zip(*pairs, strict=True))
    return {
        "generated_agreement": float(np.mean(every)),
        "per_attribute": {name: float(np.mean(marks)) for name, marks in agreed.items()},
        "per_model": by_model,
        "readings": len(every),
        "verdict_agreement": float(np.mean(verdicts)),
        "scores_per_model": scores,
        "score_correlation": _correlation(first_scores, second_scores),
    }


def rival(steps: int, seed: int = RIVAL_SEED) -> Judge:
    """A judge of the first's architecture and recipe (lab.judge.train_judge), `steps` steps from `seed`."""
    return Judge(train_judge(steps, seed=seed, log=lambda _line: None))


def rival_agreement(
    first: Judge,
    other: Judge,
    scenes: Sequence[Scene],
    images_by_model: Mapping[str, Sequence[Array]],
    *,
    heldout: int,
) -> dict[str, Any]:
    """The first judge's agreement with its rival (`rival`) on the same images: how far two readers
    of one kind agree where the images leave the reading open."""
    return {
        "architecture": getattr(other.network, "ARCHITECTURE", None),
        "heldout_accuracy": heldout_accuracy(other, heldout),
        **agreement_figures(agreement(first, other, scenes, images_by_model)),
    }


def agreement_figures(agreed: Mapping[str, Any]) -> dict[str, Any]:
    """`agreement`'s figures under the names a report gives them (`reprise lab judge --json`)."""
    return {
        "generated_agreement": agreed["generated_agreement"],
        "agreement_per_attribute": agreed["per_attribute"],
        "agreement_per_model": agreed["per_model"],
        "verdict_agreement": agreed["verdict_agreement"],
        "scores_per_model": agreed["scores_per_model"],
        "score_correlation": agreed["score_correlation"],
    }


def round_trips(vae: Any, images: Sequence[Array]) -> list[Array]:
    """Each image through the autoencoder alone (encoded to its latent's mean, decoded): what any
    generator of that latent space can show at best, with no denoiser in between."""
    with torch.inference_mode():
        decoded = vae.decode(vae.encode(to_tensor(list(images))).latent_dist.mean).sample
    pixels = ((decoded.permute(0, 2, 3, 1).numpy() + 1.0) * 127.5).round().clip(0, 255)
    return list(pixels.astype(np.uint8))


def round_trip_agreement(
    first: Judge, others: Mapping[str, Judge], scenes: Sequence[Scene], images: Sequence[Array]
) -> dict[str, Any]:
    """On the autoencoder's round trips of the scenes' true renders: the first judge's score (the
    share of each scene's attributes it reads) and its agreement with each other judge."""
    shown = [scene.attributes() for scene in scenes]
    report: dict[str, Any] = {
        "images": len(images),
        "score": _mean(
            [score_of(asked, read) for asked, read in zip(shown, first.read(list(images)), strict=True)]
        ),
    }
    for name, other in others.items():
        report[f"agreement_{name}"] = agreement(first, other, scenes, {"round_trip": images})[
            "generated_agreement"
        ]
    return report


def _correlation(first: npt.NDArray[np.float64], second: npt.NDArray[np.float64]) -> float | None:
    """Pearson's r of the two judges' scores; None where either gave every image the same score."""
    if first.std() == 0 or second.std() == 0:
        return None
    return round(float(np.corrcoef(first, second)[0, 1]), 4)


def _mean(values: Sequence[float]) -> float:
    return round(float(np.mean(values)), 4)


def validate(
    judge: Judge,
    second: Judge,
    scenes: Sequence[Scene],
    images_by_model: Mapping[str, Sequence[Array]],
    *,
    heldout: int,
    accuracy: Callable[[Judge, int], float],
) -> dict[str, Any]:
    """The validation judge.json records (lab.judge_floors.refusal reads it)."""
    agreed = agreement(judge, second, scenes, images_by_model)
    return {
        "heldout_accuracy": accuracy(judge, heldout),
        **degraded_accuracy(judge, heldout),
        "generated_agreement": agreed["generated_agreement"],
        "agreement_per_attribute": agreed["per_attribute"],
        "agreement_per_model": agreed["per_model"],
        "heldout_images": heldout,
        "generated_images": sum(len(images) for images in images_by_model.values()),
        "blur_radius": BLUR_RADIUS,
        "noise_sigma": NOISE_SIGMA,
    }
