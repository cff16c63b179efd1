"""Embedders: MiniLM on its real weights (offline) and the tiny open_clip; one contract for both."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from core.errors import SettingsError
from core.settings import Settings, load_settings
from core.vocabulary import TextEmbedderKind
from workers.runtime.embedders import (
    ImageEmbedder,
    MiniLMTextEmbedder,
    OpenClipEmbedder,
    TextEmbedder,
    build_image_embedder,
    build_text_embedder,
    open_clip_source,
)

PROMPTS = ["a red cat on a sofa", "a crimson kitten lying on a couch", "quarterly tax report spreadsheet"]


@pytest.fixture(scope="module")
def minilm(tiny_settings: Settings) -> TextEmbedder:
    return build_text_embedder(tiny_settings.model_copy(update={"text_embedder": TextEmbedderKind.MINILM}))


def test_the_default_text_embedder_is_minilm_on_onnx_runtime(tiny_settings: Settings) -> None:
    from workers.runtime.embedders.minilm_onnx import MiniLMOnnxEmbedder

    assert isinstance(build_text_embedder(tiny_settings), MiniLMOnnxEmbedder)


@pytest.fixture(scope="module")
def clip(tiny_settings: Settings) -> ImageEmbedder:
    return build_image_embedder(tiny_settings)


def _images() -> list[Image.Image]:
    rng = np.random.default_rng(0)
    return [Image.fromarray(rng.integers(0, 256, (64, 48, 3), dtype=np.uint8)) for _ in range(3)]


def _assert_unit_rows(vectors: np.ndarray, n: int, dim: int) -> None:
    assert vectors.dtype == np.float32 and vectors.shape == (n, dim)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)


def test_minilm_is_the_real_model(minilm: TextEmbedder) -> None:
    assert isinstance(minilm, MiniLMTextEmbedder) and minilm.dim == 384
    vectors = minilm.embed_text(PROMPTS)
    _assert_unit_rows(vectors, 3, 384)
    similar, unrelated = float(vectors[0] @ vectors[1]), float(vectors[0] @ vectors[2])
    assert similar > 0.6 > unrelated  # real weights: a paraphrase is near, a different topic far


def test_minilm_batches_give_the_same_vectors(tiny_settings: Settings, minilm: TextEmbedder) -> None:
    small_batches = MiniLMTextEmbedder(batch_size=2)
    np.testing.assert_allclose(small_batches.embed_text(PROMPTS), minilm.embed_text(PROMPTS), atol=1e-5)
    assert minilm.embed_text([]).shape == (0, 384)


def test_open_clip_embeds_text_and_images_in_one_space(clip: ImageEmbedder, tiny_settings: Settings) -> None:
    assert isinstance(clip, OpenClipEmbedder)
    assert clip.dim == tiny_settings.image_embedding_dim == 64
    _assert_unit_rows(clip.embed_text(PROMPTS), 3, 64)
    _assert_unit_rows(clip.embed_image(_images()), 3, 64)
    assert clip.embed_image([]).shape == (0, 64)


def test_open_clip_batches_give_the_same_vectors(clip: ImageEmbedder, tiny_settings: Settings) -> None:
    name, pretrained = open_clip_source(tiny_settings)
    one_by_one = OpenClipEmbedder(name, pretrained, batch_size=1)
    np.testing.assert_allclose(one_by_one.embed_image(_images()), clip.embed_image(_images()), atol=1e-5)
    np.testing.assert_allclose(one_by_one.embed_text(PROMPTS), clip.embed_text(PROMPTS), atol=1e-5)


def test_open_clip_can_be_the_text_embedder(tiny_settings: Settings) -> None:
    settings = load_settings(
        data_dir=tiny_settings.data_dir, text_embedder=TextEmbedderKind.OPEN_CLIP, text_embedding_dim=64
    )
    embedder = build_text_embedder(settings)
    assert isinstance(embedder, OpenClipEmbedder)
    _assert_unit_rows(embedder.embed_text(PROMPTS), 3, 64)


@pytest.mark.parametrize(
    ("overrides", "variable"),
    [
        (
            {"text_embedder": TextEmbedderKind.OPEN_CLIP, "text_embedding_dim": 384},
            "REPRISE_TEXT_EMBEDDING_DIM=64",
        ),
        ({"image_embedding_dim": 768, "model_set": "tiny"}, "REPRISE_IMAGE_EMBEDDING_DIM=64"),
    ],
)
def test_a_dimension_mismatch_names_the_variable(
    tiny_settings: Settings, overrides: dict[str, object], variable: str
) -> None:
    settings = load_settings(data_dir=tiny_settings.data_dir, **overrides)
    build = build_image_embedder if "image_embedding_dim" in overrides else build_text_embedder
    with pytest.raises(SettingsError, match=f"set {variable}"):
        build(settings)
