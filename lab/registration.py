"""The quality lab's plugin (core.plugins): its models, its judges, its discriminator network and its
attribute space, each under the name the settings use, so that workers serve and score the lab's models
without importing the lab. pyproject.toml names `register` in the `reprise.plugins` entry point group.

Everything heavy (torch, the networks' weights) is imported and loaded when a factory runs, not here.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from core.embedders import ImageEmbedder
from core.plugins import FeatureReader, Registry
from core.settings import Settings
from core.vocabulary import BUILTIN_VIDEO_MODELS, LAB_ATTRIBUTES, DiscriminatorFeatures, ModelSet
from lab.models import LAB_MODELS, LAB_VIDEO, ensure_lab_models, lab_weights, load_judge, load_video_judge


def register(registry: Registry) -> None:
    """The lab's models ('lab:large', 'lab:small', 'lab:small-b', 'lab:video'), the judge of their images,
    the video judge of lab:video, the discriminator network's features and the attribute space."""
    for model in (*LAB_MODELS, LAB_VIDEO):
        registry.models.add(
            f"{ModelSet.LAB.value}:{model.name}", partial(pipeline_directory, name=model.name)
        )
    registry.image_scorers.add(ModelSet.LAB.value, load_judge)
    registry.video_scorers.add(BUILTIN_VIDEO_MODELS[ModelSet.LAB], load_video_judge)
    registry.feature_readers.add(DiscriminatorFeatures.LAB.value, discriminator_features)
    registry.image_embedders.add(LAB_ATTRIBUTES, attribute_space)


def pipeline_directory(settings: Settings, *, name: str) -> Path:
    """The assembled pipeline directory of the lab's model `name` (assembled on first use)."""
    return ensure_lab_models(settings).pipeline(name)


def discriminator_features(settings: Settings) -> FeatureReader:
    """The lab's discriminator network of the weights the lab serves (REPRISE_LAB_WEIGHTS or the
    committed ones), loaded once per process."""
    from lab.discriminator import lab_feature_reader

    return lab_feature_reader(lab_weights(settings))


def attribute_space(settings: Settings) -> ImageEmbedder:
    """The lab's joint text-image space, its images read by the second judge, in the configured column
    (REPRISE_IMAGE_EMBEDDING_DIM)."""
    from lab.attribute_space import LabAttributeEmbedder

    judge_b = ensure_lab_models(settings).weights / "judge-b"
    return LabAttributeEmbedder(judge_b, settings.image_embedding_dim)
