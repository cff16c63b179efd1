"""`reprise lab quality`: how well each model draws the lab's prompts, judged.

Every model generates the same prompts (fresh, all T steps, each prompt's own seed); the judge
scores each image (the fraction of its prompt's attributes shown) and the Frechet distance between
the judge's features of the model's images and of true renders of the same scenes is the FID
analogue (lower is closer to the world). The true renders themselves are scored too (the ceiling),
and each prompt against another scene's true render (chance: an image that ignores its prompt).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from bench.quality.profile import seed_of
from bench.quality.sampler import Sampler
from core.settings import Settings

BATCH = 32


def lab_prompts(count: int, seed: int) -> tuple[list[str], list[np.ndarray]]:
    """`count` captions of random scenes, and a true render of each scene."""
    from lab.captions import caption
    from lab.world import render, sample_scene

    rng = np.random.default_rng(seed)
    scenes = [sample_scene(rng) for _ in range(count)]
    return [caption(scene, rng) for scene in scenes], [render(scene, rng) for scene in scenes]


def summary(
    scores: Sequence[float], features: np.ndarray, true_features: np.ndarray, seconds: float
) -> dict[str, Any]:
    from lab.judge import frechet_distance

    return {
        "mean": float(np.mean(scores)),
        "p5": float(np.percentile(scores, 5)),
        "all_attributes": float(np.mean([score == 1.0 for score in scores])),
        "frechet_distance": frechet_distance(features, true_features),
        "seconds": round(seconds, 1),
    }


def compare_models(
    settings: Settings,
    models: Sequence[str],
    *,
    prompts: int,
    seed: int,
    guidance: float,
    steps: int | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """The report: true_renders and models: {name: {mean, p5, all_attributes, frechet_distance}}};
    every model runs `steps` DDIM steps (default the service's, settings.steps): fewer measure a
    model's few-step light variant (DiffServe 2.1: the same model at fewer steps is a light model)."""
    from lab.judge import Judge
    from lab.models import ensure_lab_models
    from workers.runtime.loading import builtin_path

    judge = Judge.load(ensure_lab_models(settings).judge)
    texts, truths = lab_prompts(prompts, seed)
    true_features = judge.features(truths)
    true_scores = [q or 0.0 for q in judge.score(truths, texts)]
    shuffled = truths[1:] + truths[:1]  # each prompt against another scene's true render: chance
    chance_scores = [q or 0.0 for q in judge.score(shuffled, texts)]
    report: dict[str, Any] = {
        "prompts": prompts,
        "steps": steps or settings.steps,
        "guidance": guidance,
        "seed": seed,
        "true_renders": summary(true_scores, true_features, true_features, 0.0),
        "chance": summary(chance_scores, judge.features(shuffled), true_features, 0.0),
        "models": {},
    }
    for model in models:
        started = time.perf_counter()
        sampler = Sampler(builtin_path(settings, model), steps=steps or settings.steps, guidance=guidance)
        images = []
        for start in range(0, prompts, BATCH):
            chunk = texts[start : start + BATCH]
            images += sampler.images(sampler.generate(chunk, [seed_of(text) for text in chunk]).latents)
            log(f"{model}: {min(start + BATCH, prompts)}/{prompts}")
        scores = [q or 0.0 for q in judge.score(images, texts)]
        report["models"][model] = summary(
            scores, judge.features(images), true_features, time.perf_counter() - started
        )
    return report
