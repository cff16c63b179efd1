"""Embedders: prompts and images to unit vectors. Interface in core.embedders, one module per backend
(the quality lab's attribute space is its own: lab.attribute_space, built through core.plugins)."""

from core.embedders import Embeddings, ImageEmbedder, TextEmbedder, l2_normalise
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
