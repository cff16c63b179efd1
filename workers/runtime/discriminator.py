"""DiffServe's discriminator (3.2): how likely an image is a real one, read as the confidence that the
light model's image is good enough to keep.

The paper trains an EfficientNet to tell real images (MS-COCO, the ground truth) from generated ones
(both models'), and reads its softmax for "real" as the confidence score. Here the confidence is a
logistic regression over image features a network already computes, which is what fits a CPU:
- for the lab's models, the lab's own discriminator network (lab.discriminator: trained on true
  renders against both lab models' images, committed under lab/weights/discriminator/; the feature
  reader the lab registers, core.plugins): its hidden feature and its "real" logit. It is not the
  quality lab's judge, so the cascade is graded by a judge whose readings it does not route on;
- CLIP image features (open_clip, the image embedder) for real models, with real images supplied.
Its weights are a small JSON document, versioned in Postgres (db.discriminators) like the predictor.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from core.embedders import ImageEmbedder
from core.plugins import FeatureReader
from core.vocabulary import DiscriminatorFeatures as FeatureKind

FORMAT = 1
REGULARISATION = 0.1
"""C of the logistic regression (inverse L2 strength). A strong prior keeps the confidence graded
rather than saturated at 0 for every generated image, which a threshold could not tune (our choice)."""

Features = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Discriminator:
    """Standardised features, a linear score and a sigmoid: P(real | image)."""

    kind: FeatureKind
    mean: Features
    scale: Features
    coef: Features
    intercept: float

    def confidence(self, features: Features) -> npt.NDArray[np.float64]:
        """Per row of `features`, the probability that the image is real (DiffServe's confidence)."""
        rows = np.atleast_2d(np.asarray(features, dtype=np.float64))
        if rows.shape[1] != self.coef.shape[0]:
            raise ValueError(
                f"expected {self.coef.shape[0]}-d {self.kind.value} features, got {rows.shape[1]}-d"
            )
        logits = ((rows - self.mean) / self.scale) @ self.coef + self.intercept
        return np.asarray(1.0 / (1.0 + np.exp(-np.clip(logits, -500, 500))), dtype=np.float64)

    def to_bytes(self) -> bytes:
        body = {
            "format": FORMAT,
            "kind": self.kind.value,
            "mean": self.mean.tolist(),
            "scale": self.scale.tolist(),
            "coef": self.coef.tolist(),
            "intercept": self.intercept,
        }
        return json.dumps(body).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Discriminator:
        body: dict[str, Any] = json.loads(data)
        if body.get("format") != FORMAT:
            raise ValueError(f"discriminator format {body.get('format')!r} is not {FORMAT}: train it again")
        return cls(
            kind=FeatureKind(body["kind"]),
            mean=np.asarray(body["mean"], dtype=np.float64),
            scale=np.asarray(body["scale"], dtype=np.float64),
            coef=np.asarray(body["coef"], dtype=np.float64),
            intercept=float(body["intercept"]),
        )


def fit_discriminator(real: Features, generated: Features, *, kind: FeatureKind) -> Discriminator:
    """DiffServe 3.2's training task: real images (label 1) against generated ones, both models' (0),
    classes weighted equally."""
    from sklearn.linear_model import LogisticRegression

    if len(real) == 0 or len(generated) == 0:
        raise ValueError("a discriminator needs both real and generated images")
    features = np.vstack([real, generated]).astype(np.float64)
    labels = np.concatenate([np.ones(len(real)), np.zeros(len(generated))])
    mean = features.mean(axis=0)
    scale = features.std(axis=0)
    scale[scale < 1e-8] = 1.0
    model = LogisticRegression(C=REGULARISATION, class_weight="balanced", max_iter=2000)
    model.fit((features - mean) / scale, labels)
    return Discriminator(kind, mean, scale, model.coef_[0].astype(np.float64), float(model.intercept_[0]))


def accuracy(discriminator: Discriminator, real: Features, generated: Features) -> float:
    """Balanced accuracy at the 0.5 boundary: the mean of the real and the generated images' hit rates."""
    on_real = float((discriminator.confidence(real) >= 0.5).mean())
    on_generated = float((discriminator.confidence(generated) < 0.5).mean())
    return (on_real + on_generated) / 2


def image_features(
    kind: FeatureKind,
    images: Sequence[Any],
    *,
    lab: FeatureReader | None = None,
    embedder: ImageEmbedder | None = None,
) -> Features:
    """The features a discriminator of `kind` reads: the lab discriminator network's (`lab`: the reader
    the lab registers, core.plugins.feature_reader), or CLIP image features from the image embedder."""
    if kind is FeatureKind.LAB:
        if lab is None:
            raise ValueError(
                "lab features need the lab's discriminator network (core.plugins.feature_reader)"
            )
        return np.asarray(lab.features(list(images)), dtype=np.float64)
    if embedder is None:
        raise ValueError("CLIP features need the image embedder")
    return np.asarray(embedder.embed_image(list(images)), dtype=np.float64)
