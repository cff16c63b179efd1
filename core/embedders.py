"""The embedder interfaces: prompts (and images) to unit vectors for the vector index.

They sit in core so that every family implements them from its own package: the workers' backends
(workers.runtime.embedders: MiniLM, open_clip) and the quality lab's attribute space
(lab.attribute_space, registered through core.plugins).

Contract shared by every implementation: the output is a float32 numpy array of shape (n, dim),
each row L2-normalised (so a dot product is the cosine similarity pgvector ranks by), in input
order, computed in batches of at most `batch_size`. An empty input gives a (0, dim) array.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from PIL import Image

Embeddings = npt.NDArray[np.float32]


class TextEmbedder(ABC):
    """Prompts to unit vectors (NIRVANA 5.1 text-to-text lookup; MoDM's query side)."""

    name: str

    @property
    @abstractmethod
    def dim(self) -> int:
        """Length of every vector; must equal the pgvector column's dimension."""

    @abstractmethod
    def embed_text(self, texts: Sequence[str]) -> Embeddings:
        """(len(texts), dim) float32, rows L2-normalised."""


class ImageEmbedder(TextEmbedder):
    """A joint text-image space (CLIP): images, and prompts through the text tower, land in the
    same space, so a prompt is compared with cached images (MoDM 5.2 text-to-image lookup)."""

    @abstractmethod
    def embed_image(self, images: Sequence[Image.Image]) -> Embeddings:
        """(len(images), dim) float32, rows L2-normalised."""


def l2_normalise(vectors: npt.NDArray[np.floating]) -> Embeddings:
    """Rows scaled to unit length as float32; an all-zero row stays zero rather than NaN."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    normalised: Embeddings = vectors / np.maximum(norms, np.float32(1e-12))
    return normalised
