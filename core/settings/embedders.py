"""Embedders: the text embedder that keys the cache lookup, and the open_clip model that embeds
images (MoDM's text-to-image lookup)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings

from core.vocabulary import TextEmbedderKind


class EmbedderSettings(BaseSettings):
    """Embedders: the text embedder and open_clip, and the dimensions of their vectors.

    Admission embeds every prompt; a worker embeds each image it stores. The dimensions must match
    the vector columns the migrations create.
    """

    text_embedder: TextEmbedderKind = Field(
        TextEmbedderKind.MINILM_ONNX,
        description="minilm-onnx (all-MiniLM-L6-v2 exported to ONNX Runtime on first use: cosine 1.0 to "
        "minilm, single-prompt p50 23 ms vs 136 ms, `reprise models embedder`), minilm (the same on "
        "torch) or open_clip.",
    )
    open_clip_model: str | None = Field(
        None,
        description="open_clip model name (e.g. ViT-L-14), or lab:attributes (the quality lab's "
        "joint text-image space). Unset: lab:attributes for image lookups on the lab's models, else the tiny "
        "random open_clip.",
    )
    open_clip_pretrained: str | None = Field(None, description="open_clip pretrained tag or checkpoint path.")
    text_embedding_dim: int = Field(
        384, ge=2, le=16000, description="Dimension of the text embedder (all-MiniLM-L6-v2: 384)."
    )
    image_embedding_dim: int = Field(
        64, ge=2, le=16000, description="Dimension of the open_clip embedding (tiny: 64; ViT-L-14: 768)."
    )
