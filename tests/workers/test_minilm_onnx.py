"""MiniLM on ONNX Runtime: the local export gives MiniLMTextEmbedder's vectors (cosine >= 0.999)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime
import pytest

from core.settings import Settings, load_settings
from core.vocabulary import TextEmbedderKind
from workers.runtime.embedders import MiniLMTextEmbedder, build_text_embedder, minilm_model_path, minilm_onnx
from workers.runtime.embedders.minilm_onnx import (
    EXPORT_VERSION,
    MODEL_FILES,
    ONNX_DIR_NAME,
    MiniLMOnnxEmbedder,
    OnnxPrecision,
    ensure_minilm_onnx,
    export_key,
    max_seq_length,
)

LONG = " ".join(f"word{i} of a very long prompt, highly detailed, artstation" for i in range(120))
PROMPTS = [
    "",
    "cat",
    "a red cat on a sofa",
    "a crimson kitten lying on a couch",
    "quarterly tax report spreadsheet",
    "a portrait of an old fisherman, oil painting by rembrandt, dramatic lighting, 8k, artstation",
    "cyberpunk city at night, neon lights, rain, blade runner style, octane render",
    "Un château médiéval au coucher du soleil, peinture à l'huile",
    "富士山と桜、浮世絵スタイル",
    "Собака в космосе, цифровое искусство",
    "🐉 dragon breathing fire 🔥 over a castle",
    "a bowl of ramen, studio ghibli, watercolor",
    "  leading and trailing spaces  ",
    "UPPERCASE PROMPT WITH NUMBERS 12345 AND PUNCTUATION!!! ???",
    "a photo of an astronaut riding a horse on mars",
    "minimalist logo, vector, flat design, white background",
    "((masterpiece)), best quality, 1girl, [blue hair], {{detailed eyes}}",
    "tabs\tand\nnewlines\nin a prompt",
    LONG,
    LONG + " and a different ending past the truncation",
]


@pytest.fixture(scope="module")
def onnx_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    data_dir = tmp_path_factory.mktemp("minilm-onnx-data")
    return load_settings(
        data_dir=data_dir, device="cpu", model_set="tiny", text_embedder=TextEmbedderKind.MINILM_ONNX
    )


@pytest.fixture(scope="module")
def onnx_embedder(onnx_settings: Settings) -> MiniLMOnnxEmbedder:
    embedder = build_text_embedder(onnx_settings)  # exports into the temp data dir on first use
    assert isinstance(embedder, MiniLMOnnxEmbedder)
    return embedder


@pytest.fixture(scope="module")
def torch_embedder() -> MiniLMTextEmbedder:
    return MiniLMTextEmbedder()


def test_the_factory_exports_into_the_data_dir(
    onnx_settings: Settings, onnx_embedder: MiniLMOnnxEmbedder
) -> None:
    expected = onnx_settings.data_dir / "models" / ONNX_DIR_NAME / export_key(minilm_model_path())
    assert onnx_embedder.root == expected
    assert (expected / MODEL_FILES[OnnxPrecision.FP32]).is_file()
    assert onnx_embedder.dim == onnx_settings.text_embedding_dim == 384
    assert onnx_embedder.name == TextEmbedderKind.MINILM_ONNX.value


def test_vectors_match_sentence_transformers(
    onnx_embedder: MiniLMOnnxEmbedder, torch_embedder: MiniLMTextEmbedder
) -> None:
    assert len(LONG.split()) > max_seq_length(minilm_model_path())  # truncated by both
    ours, theirs = onnx_embedder.embed_text(PROMPTS), torch_embedder.embed_text(PROMPTS)
    assert ours.dtype == np.float32 and ours.shape == (len(PROMPTS), 384)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-6)
    cosines = (ours * theirs).sum(axis=1)
    assert cosines.min() >= 0.999, dict(zip(PROMPTS, cosines.tolist(), strict=True))


def test_a_batch_equals_one_by_one(onnx_embedder: MiniLMOnnxEmbedder) -> None:
    one_by_one = np.concatenate([onnx_embedder.embed_text([prompt]) for prompt in PROMPTS])
    np.testing.assert_allclose(onnx_embedder.embed_text(PROMPTS), one_by_one, atol=1e-5)
    assert onnx_embedder.embed_text([]).shape == (0, 384)


def test_small_batches_give_the_same_vectors(
    onnx_settings: Settings, onnx_embedder: MiniLMOnnxEmbedder
) -> None:
    small = MiniLMOnnxEmbedder(models_dir=onnx_settings.tiny_models_dir, batch_size=3, intra_op_threads=1)
    np.testing.assert_allclose(small.embed_text(PROMPTS), onnx_embedder.embed_text(PROMPTS), atol=1e-5)


def test_a_second_build_reuses_the_export(
    onnx_settings: Settings, onnx_embedder: MiniLMOnnxEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = onnx_embedder.root / MODEL_FILES[OnnxPrecision.FP32]
    mtime = model.stat().st_mtime_ns

    def no_export(out_dir: Path, **_: object) -> Path:
        raise AssertionError("exported again")

    monkeypatch.setattr(minilm_onnx, "export_minilm_onnx", no_export)
    assert ensure_minilm_onnx(onnx_settings.tiny_models_dir) == onnx_embedder.root
    again = build_text_embedder(onnx_settings)
    assert isinstance(again, MiniLMOnnxEmbedder) and again.root == onnx_embedder.root
    assert model.stat().st_mtime_ns == mtime
    assert not [p for p in onnx_embedder.root.parent.iterdir() if p.name.startswith(".")]  # no staging left


def test_a_new_onnxruntime_gets_a_new_export(monkeypatch: pytest.MonkeyPatch) -> None:
    before = export_key(minilm_model_path())
    monkeypatch.setattr(onnxruntime, "__version__", "0.0.0-test")
    after = export_key(minilm_model_path())
    assert before != after and after.endswith(f"-ort0.0.0-test-v{EXPORT_VERSION}")
