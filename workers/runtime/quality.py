"""CLIP score, the scorer of real models' images, and the choice of a worker's scorer.

The papers judge approximate-cache results by CLIP score (NIRVANA 4.1, eq. 10, alpha = 0.9;
MoDM 5.2, alpha = 0.95): 100 x cosine(image embedding, prompt embedding), clipped at 0
(Hessel et al.'s CLIPScore with w = 100, as MoDM reports it, e.g. 28.5). It implements
core.scoring.Scorer, as the quality lab's judge does for the lab's models.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

import numpy as np
from PIL import Image

from core import plugins
from core.embedders import ImageEmbedder
from core.scoring import CLIP_SCALE, Scorer, ScoreScale
from core.settings import Settings
from core.vocabulary import ModelSet, Role


class ClipScore:
    """100 x max(0, cosine(CLIP image embedding, CLIP text embedding)), in 0..100, for every prompt.

    Meaningful only with real CLIP weights (settings.open_clip_model / open_clip_pretrained):
    with the tiny random CLIP the numbers are in range but judge nothing.
    """

    name: Final = "clip-score"
    scale: Final[ScoreScale] = CLIP_SCALE

    def __init__(self, embedder: ImageEmbedder) -> None:
        self._embedder = embedder

    def reads(self, prompt: str) -> bool:
        return True

    def score(self, images: Sequence[Image.Image], prompts: Sequence[str]) -> list[float]:
        if len(images) != len(prompts):
            raise ValueError(f"got {len(images)} images and {len(prompts)} prompts; they are scored in pairs")
        if not images:
            return []
        # Both embedders batch internally and return unit rows, so the row-wise dot is the cosine.
        image_vectors = self._embedder.embed_image(images)
        text_vectors = self._embedder.embed_text(prompts)
        cosine = np.einsum("ij,ij->i", image_vectors, text_vectors)
        return [float(score) for score in 100.0 * np.clip(cosine, 0.0, 1.0)]


def configured_scorer(
    settings: Settings, role: Role, image_embedder: Callable[[], ImageEmbedder]
) -> Scorer | None:
    """The scorer of the images a worker of `role` makes: the quality lab's judge when its model is
    one of the lab's (a 'lab:' source: the scorer the lab registers, core.plugins); CLIP score over
    `image_embedder` when its model is a real one and open_clip has real weights, which needs no setting
    of its own: REPRISE_OPEN_CLIP_MODEL and REPRISE_OPEN_CLIP_PRETRAINED both set; None otherwise (tiny
    models, or a real model beside the tiny random CLIP: nothing judges their images)."""
    source = settings.model_source("small" if role is Role.SMALL else "large")
    if source.startswith(f"{ModelSet.LAB.value}:"):
        return plugins.image_scorer(settings, ModelSet.LAB.value)
    if source.startswith("tiny:"):
        return None
    if settings.open_clip_model is None or settings.open_clip_pretrained is None:
        return None
    return ClipScore(image_embedder())
