"""The lab's plugin (lab.registration): the workers find the lab's models, judges, discriminator
network and attribute space through core.plugins, under the names the settings use, and get what the
lab itself builds."""

from __future__ import annotations

import pytest

from core import plugins
from core.settings import Settings, load_settings
from core.vocabulary import BUILTIN_FAMILIES, BUILTIN_VIDEO_MODELS, DiscriminatorFeatures, ModelSet
from lab.discriminator import LabDiscriminator
from lab.judge import Judge
from lab.models import LAB_VIDEO, ensure_lab_models
from lab.video.judge import VideoJudge


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return load_settings(data_dir=tmp_path_factory.mktemp("lab-plugin"), device="cpu")


def test_every_built_lab_model_is_a_registered_source_read_from_its_assembled_pipeline(
    settings: Settings,
) -> None:
    paths = ensure_lab_models(settings)
    built = [source for source in BUILTIN_FAMILIES if source.startswith(f"{ModelSet.LAB.value}:")]
    assert built  # the settings' names of the lab's image models
    for source in built:
        assert plugins.model_path(settings, source) == paths.pipeline(source.partition(":")[2])
    video = BUILTIN_VIDEO_MODELS[ModelSet.LAB]
    assert plugins.model_path(settings, video) == paths.pipeline(LAB_VIDEO.name)


def test_the_lab_judges_and_reads_through_the_registry(settings: Settings) -> None:
    judge = plugins.image_scorer(settings, ModelSet.LAB.value)
    assert isinstance(judge, Judge) and judge.name == "lab-judge"
    assert isinstance(plugins.video_scorer(settings, BUILTIN_VIDEO_MODELS[ModelSet.LAB]), VideoJudge)
    reader = plugins.feature_reader(settings, DiscriminatorFeatures.LAB.value)
    assert isinstance(reader, LabDiscriminator)
    again = plugins.feature_reader(settings, DiscriminatorFeatures.LAB.value)
    assert again is reader  # the network loads once per process and weights directory
