"""CLIP score: 100 x cosine clipped at 0, per pair. Random weights judge nothing: shape and range only."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from PIL import Image

from core.settings import Settings
from workers.runtime.embedders import Embeddings, ImageEmbedder, build_image_embedder, l2_normalise
from workers.runtime.quality import ClipScore


class _FixedEmbedder(ImageEmbedder):
    """Images and prompts map to given vectors, keyed by image width and prompt text."""

    name = "fixed"

    def __init__(self, images: dict[int, list[float]], texts: dict[str, list[float]]) -> None:
        self._images, self._texts = images, texts

    @property
    def dim(self) -> int:
        return 2

    def embed_text(self, texts: Sequence[str]) -> Embeddings:
        return l2_normalise(np.array([self._texts[t] for t in texts]))

    def embed_image(self, images: Sequence[Image.Image]) -> Embeddings:
        return l2_normalise(np.array([self._images[image.width] for image in images]))


def test_clip_score_is_100_cosine_clipped_at_zero_per_pair() -> None:
    embedder = _FixedEmbedder(
        {1: [1.0, 0.0], 2: [0.0, 1.0]}, {"a": [1.0, 1.0], "b": [-1.0, 0.0], "c": [0.0, 3.0]}
    )
    images = [Image.new("RGB", (width, 1)) for width in (1, 1, 2)]
    scores = ClipScore(embedder).score(images, ["a", "b", "c"])
    assert scores.dtype == np.float32
    np.testing.assert_allclose(scores, [100 / np.sqrt(2), 0.0, 100.0], rtol=1e-6)


def test_clip_score_on_the_tiny_clip_has_one_score_in_range_per_pair(tiny_settings: Settings) -> None:
    scorer = ClipScore(build_image_embedder(tiny_settings))
    rng = np.random.default_rng(1)
    images = [Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)) for _ in range(5)]
    scores = scorer.score(images, [f"prompt {i}" for i in range(5)])
    assert scores.shape == (5,) and scores.dtype == np.float32
    assert ((scores >= 0) & (scores <= 100)).all()


def test_clip_score_refuses_unpaired_inputs() -> None:
    embedder = _FixedEmbedder({1: [1.0, 0.0]}, {"a": [1.0, 0.0]})
    with pytest.raises(ValueError, match="pairs"):
        ClipScore(embedder).score([Image.new("RGB", (1, 1))], ["a", "a"])
