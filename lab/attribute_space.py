"""The quality lab's joint text-image space: MoDM's text-to-image lookup (MoDM 3.2, 5.2) on the lab's
world, where no CLIP was trained.

A coordinate per value of every attribute of the lab's world (lab.world.ATTRIBUTES: 32 values), and
one more for prompts the world cannot express:
- a prompt lands on the values its caption asks for (lab.captions.parse): a one-hot block per asked
  attribute; a prompt the parser cannot read lands on the last coordinate, orthogonal to every image;
- an image lands on the second judge's reading of it (lab.judge_b, another architecture and seed than
  the judge that grades the lab's images): its probabilities per attribute, the second object's
  blocks weighted by the probability that the image shows two objects.

So the cosine of a prompt and an image is, for a confident reading, the share of the prompt's
attributes the image shows: the lab's analogue of a CLIP score, which ranks a cached image by how well
it depicts the new request rather than by how alike two captions read. That is the property MoDM
retrieves by: a near miss whose cached image lacks the changed attribute scores lower than a
paraphrase's image, which sentence embedders (MiniLM) cannot tell apart on this world.

The vectors fill the first 33 coordinates of the configured column (REPRISE_IMAGE_EMBEDDING_DIM, at
least 33; the rest are zero and change no cosine). The lab registers it as the image embedder
REPRISE_OPEN_CLIP_MODEL=lab:attributes names (lab.registration), which the workers build through
core.plugins.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from pathlib import Path

import numpy as np
import numpy.typing as npt
import torch
from PIL import Image

from core.embedders import Embeddings, ImageEmbedder, l2_normalise
from core.vocabulary import LAB_ATTRIBUTES
from lab.captions import parse
from lab.judge import Judge, to_tensor
from lab.world import ATTRIBUTES, PAIR_LAYOUTS


def attribute_vector(shown: dict[str, str] | None, dim: int) -> npt.NDArray[np.float32]:
    """A unit vector of the space: the values `shown` (a caption's parsed attributes, or a reading of
    an image) one-hot per attribute; None (a prompt outside the lab's world) on the last coordinate."""
    index, values = _layout()
    vector = np.zeros(dim, dtype=np.float32)
    if shown is None:
        vector[values] = 1.0
    else:
        for name, value in shown.items():
            vector[index[name][value]] = 1.0
    normalised: npt.NDArray[np.float32] = vector / np.float32(np.linalg.norm(vector))
    return normalised


def value_coordinate(name: str, value: str) -> int:
    """The coordinate of attribute `name`'s `value` in the space."""
    return _layout()[0][name][value]


def space_size() -> int:
    """How many of the column's coordinates the space uses: one per attribute value, and the last for
    prompts outside the lab's world."""
    return _layout()[1] + 1


@cache
def _layout() -> tuple[dict[str, dict[str, int]], int]:
    """Each attribute value's coordinate, and how many there are (read, never changed)."""
    index: dict[str, dict[str, int]] = {}
    position = 0
    for name, values in ATTRIBUTES.items():
        index[name] = {value: position + offset for offset, value in enumerate(values)}
        position += len(values)
    return index, position


class LabAttributeEmbedder(ImageEmbedder):
    """Prompts by their parsed attributes, images by the second judge's reading, in one space."""

    name = LAB_ATTRIBUTES

    def __init__(self, judge_directory: Path, dim: int) -> None:
        self._index, values = _layout()
        if dim < values + 1:
            raise ValueError(f"the lab's attribute space needs {values + 1} dimensions, not {dim}")
        self._dim = dim
        # It retrieves, it does not grade: the floors that admit a grader (lab.judge_floors) are for
        # the first judge; the second's validation (held-out 0.94) is in its judge.json.
        self._judge = Judge.load(judge_directory, validated=False)

    @property
    def dim(self) -> int:
        return self._dim

    def embed_text(self, texts: Sequence[str]) -> Embeddings:
        vectors = np.zeros((len(texts), self._dim), dtype=np.float32)
        for row, text in enumerate(texts):
            vectors[row] = attribute_vector(parse(text), self._dim)
        return vectors

    def embed_image(self, images: Sequence[Image.Image]) -> Embeddings:
        vectors = np.zeros((len(images), self._dim), dtype=np.float32)
        if not images:
            return vectors
        with torch.inference_mode():
            _, logits = self._judge.network(to_tensor(list(images)))
        probabilities = {name: torch.softmax(logit.double(), dim=1).numpy() for name, logit in logits.items()}
        arrangements = list(self._index["arrangement"])  # PAIR_LAYOUTS: those that show a second object
        shown = [arrangements.index(value) for value in PAIR_LAYOUTS]
        pair = probabilities["arrangement"][:, shown].sum(axis=1)  # the probability of a second object
        for name, values in self._index.items():
            start = min(values.values())
            block = probabilities[name] * (pair[:, None] if name.startswith("b_") else 1.0)
            vectors[:, start : start + len(values)] = block
        return l2_normalise(vectors)
