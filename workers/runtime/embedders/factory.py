"""Build the configured embedders and check their dimension against the settings.

The vector columns are created with settings.text_embedding_dim / image_embedding_dim, so an
embedder of another dimension must fail at start, naming the variable to change.
"""

from __future__ import annotations

from core import plugins
from core.embedders import ImageEmbedder, TextEmbedder
from core.errors import SettingsError
from core.settings import Settings
from core.vocabulary import LAB_ATTRIBUTES, TextEmbedderKind
from workers.runtime.embedders.clip import OpenClipEmbedder
from workers.runtime.embedders.minilm import MiniLMTextEmbedder
from workers.runtime.embedders.minilm_onnx import MiniLMOnnxEmbedder
from workers.runtime.loading import resolve_device
from workers.runtime.tiny import TINY_CLIP_NAME, ensure_tiny_models, register_tiny_clip


def open_clip_source(settings: Settings) -> tuple[str, str | None]:
    """(model name, pretrained tag or checkpoint path) for open_clip; the tiny CLIP when unset."""
    if settings.open_clip_model is not None:
        return settings.open_clip_model, settings.open_clip_pretrained
    tiny = ensure_tiny_models(settings)
    register_tiny_clip(tiny.clip_config)
    return TINY_CLIP_NAME, str(tiny.clip_checkpoint)


def build_image_embedder(settings: Settings) -> ImageEmbedder:
    """The open_clip embedder (image tower, and text tower for prompt-vs-image lookup), or the quality
    lab's attribute space where REPRISE_OPEN_CLIP_MODEL names it (lab:attributes, which the lab
    registers: core.plugins)."""
    if settings.open_clip_model == LAB_ATTRIBUTES:
        return plugins.image_embedder(settings, LAB_ATTRIBUTES)
    model_name, pretrained = open_clip_source(settings)
    embedder = OpenClipEmbedder(model_name, pretrained, device=resolve_device(settings.device))
    _check_dim(embedder, settings.image_embedding_dim, "REPRISE_IMAGE_EMBEDDING_DIM")
    return embedder


def build_text_embedder(settings: Settings) -> TextEmbedder:
    """The text embedder settings.text_embedder names (minilm on torch or on ONNX Runtime, or
    open_clip's text tower)."""
    embedder: TextEmbedder
    if settings.text_embedder is TextEmbedderKind.MINILM:
        embedder = MiniLMTextEmbedder(device=str(resolve_device(settings.device)))
    elif settings.text_embedder is TextEmbedderKind.MINILM_ONNX:
        embedder = MiniLMOnnxEmbedder(models_dir=settings.tiny_models_dir)  # CPU: built on first use
    elif settings.open_clip_model == LAB_ATTRIBUTES:
        raise SettingsError(
            "REPRISE_TEXT_EMBEDDER=open_clip with REPRISE_OPEN_CLIP_MODEL=lab:attributes: the lab's "
            "attribute space serves image lookups only; set REPRISE_TEXT_EMBEDDER=minilm-onnx or an "
            "open_clip model"
        )
    else:
        model_name, pretrained = open_clip_source(settings)
        embedder = OpenClipEmbedder(model_name, pretrained, device=resolve_device(settings.device))
    _check_dim(embedder, settings.text_embedding_dim, "REPRISE_TEXT_EMBEDDING_DIM")
    return embedder


def _check_dim(embedder: TextEmbedder, configured: int, variable: str) -> None:
    if embedder.dim != configured:
        raise SettingsError(
            f"embedder {embedder.name} produces {embedder.dim}-dimensional vectors but "
            f"{variable}={configured}: set {variable}={embedder.dim} (the vector index has that dimension)"
        )
