"""The quality lab's joint text-image space (MoDM's text-to-image lookup on the lab): a prompt against an
image scores the share of its attributes the image shows, so a near miss's image ranks below the
image of the scene asked for, and prompts outside the lab's world match no image."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from core.settings import load_settings
from core.vocabulary import LAB_ATTRIBUTES, LookupMode
from jobs.policies.k_selection import LAB_T2I, configured_table, embedder_tag
from lab.attribute_space import LabAttributeEmbedder
from lab.captions import caption
from lab.world import ATTRIBUTES, near_miss, render, sample_scene
from workers.runtime.embedders.factory import build_image_embedder

VALUES = sum(len(values) for values in ATTRIBUTES.values())


@pytest.fixture(scope="module")
def space() -> LabAttributeEmbedder:
    embedder = build_image_embedder(load_settings(open_clip_model=LAB_ATTRIBUTES))
    assert isinstance(embedder, LabAttributeEmbedder)
    return embedder


def test_prompts_meet_in_the_share_of_attributes_they_have_in_common(space: LabAttributeEmbedder) -> None:
    rng = np.random.default_rng(3)
    scene = sample_scene(rng)
    other = near_miss(scene, rng)
    asked = len(scene.attributes())
    vectors = space.embed_text(
        [caption(scene, rng), caption(scene, rng), caption(other, rng), "a cat on a sofa"]
    )
    assert vectors.shape == (4, load_settings().image_embedding_dim)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    assert vectors[0] @ vectors[1] == pytest.approx(1.0)  # a paraphrase: the same attributes
    assert vectors[0] @ vectors[2] == pytest.approx((asked - 1) / asked)  # one attribute changed
    assert abs(vectors[3] @ vectors[0]) < 1e-6  # outside the lab's world: orthogonal to every prompt


def test_an_image_is_closest_to_its_own_caption(space: LabAttributeEmbedder) -> None:
    rng = np.random.default_rng(11)
    wins = 0
    for _ in range(12):
        scene = sample_scene(rng)
        image = Image.fromarray(render(scene, rng))
        texts = space.embed_text([caption(scene, rng), caption(near_miss(scene, rng), rng), "a cat"])
        similarity = texts @ space.embed_image([image])[0]
        wins += similarity[0] > similarity[1]
        assert similarity[0] > 0.75 and abs(similarity[2]) < 1e-6
    assert wins >= 11  # the second judge misreads a true render about one attribute in twenty


def test_the_space_needs_room_in_the_column() -> None:
    with pytest.raises(ValueError, match=f"{VALUES + 1} dimensions"):
        build_image_embedder(load_settings(open_clip_model=LAB_ATTRIBUTES, image_embedding_dim=VALUES))


def test_on_the_lab_image_lookups_in_this_space_use_the_table_profiled_there() -> None:
    settings = load_settings(lookup_mode=LookupMode.TEXT_TO_IMAGE, open_clip_model=LAB_ATTRIBUTES)
    assert (
        embedder_tag(settings.text_embedder, settings.open_clip_model, settings.lookup_mode) == LAB_ATTRIBUTES
    )
    assert configured_table(settings) is LAB_T2I
