"""Image quality scoring: how well an image matches its prompt.

The papers judge approximate-cache results by CLIP score (NIRVANA 4.1, eq. 10, alpha = 0.9;
MoDM 5.2, alpha = 0.95): 100 x cosine(image embedding, prompt embedding), clipped at 0
(Hessel et al.'s CLIPScore with w = 100, as MoDM reports it, e.g. 28.5).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from PIL import Image

from workers.runtime.embedders.base import ImageEmbedder

Scores = npt.NDArray[np.float32]


class QualityScorer(ABC):
    """Scores image/prompt pairs; higher is better. Used to profile k thresholds and to report
    quality next to compute saved."""

    @abstractmethod
    def score(self, images: Sequence[Image.Image], prompts: Sequence[str]) -> Scores:
        """(n,) float32, one score per (images[i], prompts[i]) pair. Raises ValueError when the
        two sequences differ in length."""


class ClipScore(QualityScorer):
    """100 x max(0, cosine(CLIP image embedding, CLIP text embedding)), in 0..100.

    Meaningful only with real CLIP weights (settings.open_clip_model / open_clip_pretrained):
    with the tiny random CLIP the numbers are in range but judge nothing.
    """

    def __init__(self, embedder: ImageEmbedder) -> None:
        self._embedder = embedder

    def score(self, images: Sequence[Image.Image], prompts: Sequence[str]) -> Scores:
        if len(images) != len(prompts):
            raise ValueError(f"got {len(images)} images and {len(prompts)} prompts; they are scored in pairs")
        # Both embedders batch internally and return unit rows, so the row-wise dot is the cosine.
        image_vectors = self._embedder.embed_image(images)
        text_vectors = self._embedder.embed_text(prompts)
        cosine = np.einsum("ij,ij->i", image_vectors, text_vectors)
        scores: Scores = (100.0 * np.clip(cosine, 0.0, 1.0)).astype(np.float32)
        return scores
