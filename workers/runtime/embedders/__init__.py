"""Embedders: prompts and images to unit vectors. Interface in base.py, one module per backend."""

from workers.runtime.embedders.base import Embeddings, ImageEmbedder, TextEmbedder, l2_normalise
from workers.runtime.embedders.clip import OpenClipEmbedder
from workers.runtime.embedders.factory import build_image_embedder, build_text_embedder, open_clip_source
from workers.runtime.embedders.minilm import MiniLMTextEmbedder, minilm_model_path

__all__ = [
    "Embeddings",
    "ImageEmbedder",
    "MiniLMTextEmbedder",
    "OpenClipEmbedder",
    "TextEmbedder",
    "build_image_embedder",
    "build_text_embedder",
    "l2_normalise",
    "minilm_model_path",
    "open_clip_source",
]
