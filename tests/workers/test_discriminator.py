"""The cascade's discriminator (DiffServe 3.2): real against generated, its confidence, its storage."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pytest
from PIL import Image

from core.vocabulary import DiscriminatorFeatures
from workers.runtime.discriminator import Discriminator, accuracy, fit_discriminator, image_features


def _features(seed: int, shift: float, n: int = 200) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 8)) + shift


def test_it_learns_real_from_generated_and_grades_in_between() -> None:
    real, generated = _features(0, 1.0), _features(1, -1.0)
    disc = fit_discriminator(real, generated, kind=DiscriminatorFeatures.LAB)
    assert accuracy(disc, _features(2, 1.0), _features(3, -1.0)) > 0.9
    halfway = disc.confidence(np.zeros((1, 8)))[0]
    assert disc.confidence(_features(4, 1.0)).mean() > halfway > disc.confidence(_features(5, -1.0)).mean()
    assert 0.0 < halfway < 1.0


def test_it_cannot_learn_what_is_not_there() -> None:
    disc = fit_discriminator(_features(0, 0.0), _features(1, 0.0), kind=DiscriminatorFeatures.LAB)
    assert 0.35 < accuracy(disc, _features(2, 0.0), _features(3, 0.0)) < 0.65


def test_it_round_trips_through_bytes() -> None:
    disc = fit_discriminator(_features(0, 1.0), _features(1, -1.0), kind=DiscriminatorFeatures.CLIP)
    again = Discriminator.from_bytes(disc.to_bytes())
    probe = _features(9, 0.3, n=5)
    assert again.kind is DiscriminatorFeatures.CLIP
    np.testing.assert_allclose(again.confidence(probe), disc.confidence(probe))


def test_bad_inputs_are_refused_with_the_fix() -> None:
    disc = fit_discriminator(_features(0, 1.0), _features(1, -1.0), kind=DiscriminatorFeatures.LAB)
    with pytest.raises(ValueError, match="expected 8-d lab features"):
        disc.confidence(np.zeros((1, 4)))
    with pytest.raises(ValueError, match="train it again"):
        Discriminator.from_bytes(b'{"format": 0}')
    with pytest.raises(ValueError, match="both real and generated"):
        fit_discriminator(np.zeros((0, 8)), _features(1, 0.0), kind=DiscriminatorFeatures.LAB)


class _Reader:
    """A lab feature reader reading every image as the same two features."""

    def features(self, images: Sequence[Image.Image]) -> npt.NDArray[np.float64]:
        return np.tile([0.9, 0.1], (len(images), 1))


class _Embedder:
    def embed_image(self, images: Sequence[Image.Image]) -> npt.NDArray[np.float32]:
        return np.ones((len(images), 3), dtype=np.float32)


def test_lab_features_come_from_the_lab_network_and_clip_features_from_the_embedder() -> None:
    images = [Image.new("RGB", (8, 8)) for _ in range(2)]
    judged = image_features(DiscriminatorFeatures.LAB, images, lab=_Reader())
    assert judged.dtype == np.float64 and judged.tolist() == [[0.9, 0.1], [0.9, 0.1]]
    clip = image_features(DiscriminatorFeatures.CLIP, images, embedder=_Embedder())  # type: ignore[arg-type]
    assert clip.shape == (2, 3) and clip.dtype == np.float64
    with pytest.raises(ValueError, match="image embedder"):
        image_features(DiscriminatorFeatures.CLIP, images, lab=_Reader())


def test_the_committed_lab_network_reads_true_renders_as_more_real_than_noise() -> None:
    """The lab's features are the committed discriminator network's (its hidden feature and its "real"
    logit, the reader the lab registers), never the judge's; without that network given, there are none."""
    from core import plugins
    from core.settings import load_settings
    from lab.world import render, sample_scene

    rng = np.random.default_rng(3)
    renders = [render(sample_scene(rng)) for _ in range(16)]
    muddled = [np.full((64, 64, 3), 128, np.uint8) for _ in range(16)]
    reader = plugins.feature_reader(load_settings(), DiscriminatorFeatures.LAB.value)
    real, flat = (
        image_features(DiscriminatorFeatures.LAB, renders, lab=reader),
        image_features(DiscriminatorFeatures.LAB, muddled, lab=reader),
    )
    assert real.shape == (16, 17) and real[:, -1].mean() > flat[:, -1].mean()
    with pytest.raises(ValueError, match=r"plugins\.feature_reader"):
        image_features(DiscriminatorFeatures.LAB, renders)
