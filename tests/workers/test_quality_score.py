"""CLIP score: 100 x cosine clipped at 0, per pair (random weights judge nothing: shape and range
only); and the scorer a worker holds: the judge on the lab's models, CLIP score on real ones with real
CLIP weights, none on the tiny models; and which scorer a served job is decoded for."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import numpy as np
import pytest
from PIL import Image

from core.scoring import CLIP_SCALE
from core.settings import Settings, load_settings
from core.vocabulary import Role
from lab.judge import Judge
from workers.kinds.image.generation import _judged
from workers.runtime.embedders import Embeddings, ImageEmbedder, build_image_embedder, l2_normalise
from workers.runtime.quality import ClipScore, configured_scorer


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
    np.testing.assert_allclose(scores, [100 / np.sqrt(2), 0.0, 100.0], rtol=1e-6)


def test_clip_score_on_the_tiny_clip_has_one_score_in_range_per_pair(tiny_settings: Settings) -> None:
    scorer = ClipScore(build_image_embedder(tiny_settings))
    rng = np.random.default_rng(1)
    images = [Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)) for _ in range(5)]
    scores = scorer.score(images, [f"prompt {i}" for i in range(5)])
    assert len(scores) == 5 and all(0.0 <= score <= 100.0 for score in scores)


def test_clip_score_refuses_unpaired_inputs() -> None:
    embedder = _FixedEmbedder({1: [1.0, 0.0]}, {"a": [1.0, 0.0]})
    with pytest.raises(ValueError, match="pairs"):
        ClipScore(embedder).score([Image.new("RGB", (1, 1))], ["a", "a"])


def _no_embedder() -> ImageEmbedder:
    raise AssertionError("this choice needs no image embedder")


def test_a_worker_on_the_lab_models_is_scored_by_the_judge(tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path, device="cpu")
    assert isinstance(configured_scorer(settings, Role.LARGE, _no_embedder), Judge)
    assert isinstance(configured_scorer(settings, Role.SMALL, _no_embedder), Judge)


def test_tiny_models_and_real_ones_beside_a_random_clip_have_no_scorer(tmp_path: Path) -> None:
    assert (
        configured_scorer(load_settings(data_dir=tmp_path, model_set="tiny"), Role.LARGE, _no_embedder)
        is None
    )
    real = load_settings(data_dir=tmp_path, large_model="/models/sd15", open_clip_model="ViT-L-14")
    assert configured_scorer(real, Role.LARGE, _no_embedder) is None  # architecture only: random weights


def test_real_models_with_real_clip_weights_are_scored_by_clip_score(tmp_path: Path) -> None:
    settings = load_settings(
        data_dir=tmp_path,
        large_model="/models/sd15",
        open_clip_model="ViT-L-14",
        open_clip_pretrained="openai",
    )
    embedder = _FixedEmbedder({}, {})
    scorer = configured_scorer(settings, Role.LARGE, lambda: embedder)
    assert isinstance(scorer, ClipScore) and scorer.scale == CLIP_SCALE
    # The small role's model is still the lab's: its worker keeps the judge.
    assert isinstance(configured_scorer(settings, Role.SMALL, _no_embedder), Judge)


class _Scorer:
    name = "stand-in"
    scale = CLIP_SCALE

    def reads(self, prompt: str) -> bool:
        return True

    def score(self, images: Sequence[Image.Image], prompts: Sequence[str]) -> list[float]:
        return [42.0 for _ in images]


class _Runtime:
    def decode(self, latent: Any, *, family: str) -> Any:
        raise AssertionError("a served job is never decoded only to be scored")


def test_a_served_job_is_scored_only_when_its_image_was_decoded_anyway() -> None:
    context = SimpleNamespace(scorer=lambda: _Scorer(), runtime=lambda: _Runtime())
    job = SimpleNamespace(params=SimpleNamespace(prompt="a lighthouse"))
    assert _judged(cast(Any, context), cast(Any, job), None) is None  # LatentBox's decode on read kept
    assert _judged(cast(Any, context), cast(Any, job), Image.new("RGB", (4, 4))) == 42.0
