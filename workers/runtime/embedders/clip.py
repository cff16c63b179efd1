"""open_clip embedder: image tower and text tower in one space (configurable model and weights).

settings.open_clip_model / open_clip_pretrained name any open_clip model and tag or checkpoint
path, e.g. ViT-L-14 + openai (768 dimensions; needs its weights in the local cache, since this
service never downloads). Unset, the tiny random "reprise-tiny-clip" (64 dimensions) is used:
it runs everywhere but its similarities mean nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from PIL import Image

from core.embedders import Embeddings, ImageEmbedder, l2_normalise


class OpenClipEmbedder(ImageEmbedder):
    """open_clip's `encode_image` / `encode_text`, L2-normalised, in batches."""

    def __init__(
        self,
        model_name: str,
        pretrained: str | None,
        *,
        device: torch.device | str = "cpu",
        batch_size: int = 32,
    ) -> None:
        import open_clip

        self.name = f"open_clip:{model_name}"
        self._device = torch.device(device)
        self._batch_size = batch_size
        model, _, preprocess = open_clip.create_model_and_transforms(
            model_name, pretrained=pretrained, device=self._device
        )
        self._model: Any = model.eval()
        self._preprocess: Any = preprocess
        self._tokenizer: Any = open_clip.get_tokenizer(model_name)
        with torch.inference_mode():
            probe = self._model.encode_text(self._tokenizer(["probe"]).to(self._device))
        self._dim = int(probe.shape[-1])

    @property
    def dim(self) -> int:
        return self._dim

    def embed_text(self, texts: Sequence[str]) -> Embeddings:
        return self._batched(
            list(texts), lambda batch: self._model.encode_text(self._tokenizer(batch).to(self._device))
        )

    def embed_image(self, images: Sequence[Image.Image]) -> Embeddings:
        def encode(batch: list[Image.Image]) -> torch.Tensor:
            pixels = torch.stack([self._preprocess(image.convert("RGB")) for image in batch])
            features: torch.Tensor = self._model.encode_image(pixels.to(self._device))
            return features

        return self._batched(list(images), encode)

    def _batched(self, items: list[Any], encode: Callable[[list[Any]], torch.Tensor]) -> Embeddings:
        if not items:
            return np.zeros((0, self._dim), dtype=np.float32)
        parts = []
        with torch.inference_mode():
            for start in range(0, len(items), self._batch_size):
                features = encode(items[start : start + self._batch_size])
                parts.append(features.float().cpu().numpy())
        return l2_normalise(np.concatenate(parts))
