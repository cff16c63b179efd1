"""`reprise cascade train`: DiffServe's discriminator (3.2) trained on the configured light and heavy
models, and the cascade measured with it: quality and throughput of light-only, heavy-only and the
cascade at every threshold, with f(t), the fraction escalated (the allocator's and the simulator's
curve).

The paper's recipe: real images against generated ones of both models, the discriminator's softmax
for "real" read as the confidence in a light image. On the lab's models the real image of a caption
is the true render of its scene (lab.world.render), the features the lab discriminator network's
(lab.discriminator), and quality the judge's score; with real models, `pairs` supplies (prompt,
real image) pairs, CLIP features and CLIP score.

Half the prompts train, the other half is held out: accuracy, f(t) and every cascade figure come from
the held-out half. Throughput is measured on this CPU, batched (the Sampler), per image: a relative
figure between the two models, not a serving rate.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bench.quality.profile import seed_of
from bench.quality.sampler import Images, Sampler
from core.settings import Settings
from core.vocabulary import DiscriminatorFeatures
from jobs.policies.cascade import EscalationCurve, accepts, feature_kind_for, quantile_grid
from workers.runtime.discriminator import Discriminator, accuracy, fit_discriminator, image_features

BATCH = 32
DEFAULT_PROMPTS = 600
DEFAULT_SEED = 14_000
GOOD_LIGHT = 0.5
"""A light image is good when the judge reads at least half its prompt's attributes in it: the lab's
small model draws every attribute of a prompt too rarely (none of 60 held-out images) for "all"."""
HIGHLIGHTED = (0.25, 0.5, 0.75)  # the README's three thresholds: those escalating nearest these shares


@dataclass(frozen=True, slots=True)
class CascadeOptions:
    light: str
    heavy: str
    prompts: int = DEFAULT_PROMPTS
    seed: int = DEFAULT_SEED
    steps: int = 50  # the heavy model's
    light_steps: int | None = None  # None: `steps` (REPRISE_CASCADE_LIGHT_STEPS)
    guidance: float = 7.5
    pairs: Path | None = None  # JSON lines {"prompt", "image"} of real models' ground truth


@dataclass(frozen=True, slots=True)
class _Generated:
    images: Images
    seconds_per_image: float


def lab_ground_truth(count: int, seed: int) -> tuple[list[str], Images]:
    """`count` captions of random scenes of the lab's world, with each scene's true render."""
    from lab.captions import caption
    from lab.world import render, sample_scene

    rng = np.random.default_rng(seed)
    prompts, reals = [], []
    for _ in range(count):
        scene = sample_scene(rng)
        prompts.append(caption(scene, rng))
        reals.append(np.asarray(render(scene), dtype=np.uint8)[..., :3])
    return prompts, reals


def file_ground_truth(path: Path, count: int) -> tuple[list[str], Images]:
    """(prompt, real image) pairs from a JSON-lines file: {"prompt": ..., "image": path}."""
    import json

    from PIL import Image

    prompts, reals = [], []
    for line in path.read_text().splitlines()[:count]:
        if line.strip():
            row = json.loads(line)
            image = Path(row["image"])
            image = image if image.is_absolute() else path.parent / image
            prompts.append(str(row["prompt"]))
            reals.append(np.asarray(Image.open(image).convert("RGB"), dtype=np.uint8))
    if not prompts:
        raise ValueError(f"{path} holds no (prompt, image) pair")
    return prompts, reals


def generate(sampler: Sampler, prompts: Sequence[str], log: Callable[[str], None], label: str) -> _Generated:
    images: Images = []
    started = time.perf_counter()
    for start in range(0, len(prompts), BATCH):
        chunk = list(prompts[start : start + BATCH])
        batch = sampler.generate(chunk, [seed_of(p) for p in chunk])
        images.extend(sampler.images(batch.latents))
        log(f"{label}: {len(images)}/{len(prompts)}")
    return _Generated(images, (time.perf_counter() - started) / max(len(prompts), 1))


@dataclass(frozen=True, slots=True)
class Scorers:
    """What reads images: features for the discriminator, quality for the report."""

    kind: DiscriminatorFeatures
    features: Callable[[Images], npt.NDArray[np.float64]]
    quality: Callable[[Images, Sequence[str]], list[float]]


def lab_scorers(settings: Settings) -> Scorers:
    from lab.discriminator import lab_feature_reader
    from lab.judge import Judge
    from lab.models import ensure_lab_models

    paths = ensure_lab_models(settings)
    judge = Judge.load(paths.judge)
    reader = lab_feature_reader(paths.weights)
    return Scorers(
        DiscriminatorFeatures.LAB,
        lambda images: image_features(DiscriminatorFeatures.LAB, images, lab=reader),
        lambda images, prompts: [0.0 if q is None else q for q in judge.score(images, prompts)],
    )


def clip_scorers(settings: Settings) -> Scorers:
    from PIL import Image

    from bench.quality.profiling import clip_scorer
    from workers.runtime.embedders import build_image_embedder

    embedder = build_image_embedder(settings)
    return Scorers(
        DiscriminatorFeatures.CLIP,
        lambda images: np.asarray(
            embedder.embed_image([Image.fromarray(a) for a in images]), dtype=np.float64
        ),
        clip_scorer(settings),
    )


def train_cascade(
    settings: Settings, options: CascadeOptions, log: Callable[[str], None] = print
) -> tuple[Discriminator, dict[str, Any]]:
    """Generate, fit on the first half, measure on the held-out half (see the module docstring)."""
    from workers.runtime.loading import builtin_path

    started = time.perf_counter()
    kind = feature_kind_for(options.light)
    if options.pairs is not None:
        prompts, reals = file_ground_truth(options.pairs, options.prompts)
    elif kind is DiscriminatorFeatures.LAB:
        prompts, reals = lab_ground_truth(options.prompts, options.seed)
    else:
        raise ValueError(
            f"{options.light} is not one of the lab's models: real images are needed to train its "
            "discriminator (DiffServe 3.2 uses MS-COCO). Pass --pairs FILE.jsonl of {prompt, image}."
        )
    light_steps = options.light_steps or options.steps
    scorers = lab_scorers(settings) if kind is DiscriminatorFeatures.LAB else clip_scorers(settings)
    light = generate(
        Sampler(builtin_path(settings, options.light), steps=light_steps, guidance=options.guidance),
        prompts,
        log,
        "light",
    )
    heavy = generate(
        Sampler(builtin_path(settings, options.heavy), steps=options.steps, guidance=options.guidance),
        prompts,
        log,
        "heavy",
    )
    real_f, light_f, heavy_f = (scorers.features(images) for images in (reals, light.images, heavy.images))
    half = len(prompts) // 2
    if half < 2:
        raise ValueError("need at least 4 prompts: half train, half are held out")
    train, held = slice(0, half), slice(half, None)
    discriminator = fit_discriminator(real_f[train], np.vstack([light_f[train], heavy_f[train]]), kind=kind)
    disc_started = time.perf_counter()
    scores = discriminator.confidence(light_f[held])
    disc_s = (time.perf_counter() - disc_started) / max(len(scores), 1)
    held_prompts = prompts[half:]
    report = cascade_report(
        scores=[float(s) for s in scores],
        light_quality=scorers.quality(light.images[half:], held_prompts),
        heavy_quality=scorers.quality(heavy.images[half:], held_prompts),
        light_s=light.seconds_per_image,
        heavy_s=heavy.seconds_per_image,
        discriminator_s=disc_s,
    )
    report.update(
        accuracy=accuracy(discriminator, real_f[held], np.vstack([light_f[held], heavy_f[held]])),
        light_model=options.light,
        heavy_model=options.heavy,
        features=kind.value,
        prompts=len(prompts),
        held_out=len(prompts) - half,
        steps=options.steps,
        light_steps=light_steps,
        guidance=options.guidance,
        seed=options.seed,
        seconds=round(time.perf_counter() - started, 1),
    )
    return discriminator, report


def cascade_report(
    *,
    scores: Sequence[float],
    light_quality: Sequence[float],
    heavy_quality: Sequence[float],
    light_s: float,
    heavy_s: float,
    discriminator_s: float,
    grid: Sequence[float] | None = None,
) -> dict[str, Any]:
    """Light-only, heavy-only and the cascade at each threshold, on the same held-out prompts.

    A cascade's quality takes the light image where the discriminator accepts it and the heavy one
    elsewhere; `random_quality` is what routing the same fraction at random would give (DiffServe
    Fig. 1a's Random baseline); thresholds at every 5% of the scores (jobs.policies.cascade.quantile_grid)
    unless `grid` is given; throughput counts the light stage and the discriminator for every
    query and the heavy model for the escalated ones."""
    s, ql, qh = np.asarray(scores), np.asarray(light_quality), np.asarray(heavy_quality)
    n = len(s)
    grid = quantile_grid(list(scores)) if grid is None else grid
    rows = []
    for t in grid:
        kept = np.array([accepts(float(v), t) for v in s])
        escalated = 1.0 - float(kept.mean())
        quality = float(np.where(kept, ql, qh).mean())
        per_query = light_s + discriminator_s + escalated * heavy_s
        rows.append(
            {
                "threshold": t,
                "escalation_rate": round(escalated, 4),
                "quality": round(quality, 4),
                "random_quality": round(float((1 - escalated) * ql.mean() + escalated * qh.mean()), 4),
                "throughput_per_s": round(1.0 / per_query, 3),
            }
        )
    curve = EscalationCurve.from_scores(list(s), grid=grid, source="profiled on held-out light images")
    improves = qh > ql
    return {
        "light_only": {"quality": round(float(ql.mean()), 4), "throughput_per_s": round(1.0 / light_s, 3)},
        "heavy_only": {"quality": round(float(qh.mean()), 4), "throughput_per_s": round(1.0 / heavy_s, 3)},
        "cascade": rows,
        "highlighted": [
            min(rows, key=lambda row: abs(row["escalation_rate"] - rate)) for rate in HIGHLIGHTED
        ],
        "curve": curve.as_json(),
        # The held-out queries as (score, light quality, heavy quality), by score: the simulator replays them.
        "samples": sorted(
            [round(float(a), 6), round(float(b), 4), round(float(c), 4)]
            for a, b, c in zip(s, ql, qh, strict=True)
        ),
        "routing_auc": _auc(-s, improves) if 0 < improves.sum() < n else None,
        # Whether the score separates the light model's good images from its bad ones (ROC AUC).
        "good_light_auc": _auc(s, ql >= GOOD_LIGHT) if 0 < (ql >= GOOD_LIGHT).sum() < n else None,
        "heavy_improves": round(float(improves.mean()), 4),  # the share of light images the heavy model beats
        "seconds_per_image": {"light": light_s, "heavy": heavy_s, "discriminator": discriminator_s},
    }


def _auc(score: npt.NDArray[np.float64], positive: npt.NDArray[np.bool_]) -> float:
    """How often a light image the heavy model improves scores lower than one it does not (ROC AUC)."""
    from sklearn.metrics import roc_auc_score

    return round(float(roc_auc_score(positive.astype(int), score)), 4)
