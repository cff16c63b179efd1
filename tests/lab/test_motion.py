"""The lab's moving world: scenes, frame sequences, captions and their object/background split."""

from __future__ import annotations

import numpy as np
import pytest

from jobs.policies.decoupling import split_prompt
from lab.captions import parse as parse_still
from lab.motion import (
    FRAMES,
    MOTIONS,
    PAN_PIXELS,
    MovingScene,
    near_miss,
    render_video,
    render_video_with_masks,
    sample_moving_scene,
    scene_from_attributes,
)
from lab.motion_captions import caption, describe, parse
from lab.world import OBJECT_COLORS, SIZE, Thing


def _centre(mask: np.ndarray) -> tuple[float, float]:
    ys, xs = np.nonzero(mask)
    return float(xs.mean()), float(ys.mean())


@pytest.mark.parametrize(
    ("motion", "axis", "sign"), [("right", 0, 1), ("left", 0, -1), ("up", 1, -1), ("down", 1, 1)]
)
def test_a_moving_object_crosses_the_frame_in_its_direction(motion: str, axis: int, sign: int) -> None:
    scene = MovingScene("white", "plain", Thing("square", "red", "small"), motion)
    frames, masks = render_video_with_masks(scene)
    assert frames.shape == (FRAMES, SIZE, SIZE, 3) and frames.dtype == np.uint8
    path = [_centre(mask)[axis] for mask in masks]
    steps = np.diff(path) * sign
    assert (steps > 0).all() and path[-1] * sign - path[0] * sign >= 30
    for frame, mask in zip(frames, masks, strict=True):  # the object in its colour where it is
        assert (frame[mask] == OBJECT_COLORS["red"]).all()


def test_a_growing_object_grows_in_place_and_a_staying_one_does_not_move() -> None:
    grows = render_video_with_masks(MovingScene("gray", "plain", Thing("circle", "blue", "small"), "grows"))[
        1
    ]
    areas = grows.sum(axis=(1, 2))
    assert (np.diff(areas) >= 0).all() and areas[-1] > 2.5 * areas[0]
    assert np.allclose([_centre(mask) for mask in grows], _centre(grows[0]), atol=0.6)
    stays = MovingScene("gray", "plain", Thing("circle", "blue", "small"), "stays", position="left")
    masks = render_video_with_masks(stays)[1]
    assert all(np.array_equal(mask, masks[0]) for mask in masks) and _centre(masks[0])[0] < 24


def test_a_panning_background_shifts_its_texture_each_frame_and_a_still_one_does_not() -> None:
    thing = Thing("circle", "green", "small")
    pans = render_video(MovingScene("yellow", "striped", thing, "grows", "pans"))
    still = render_video(MovingScene("yellow", "striped", thing, "grows", "still"))
    row = 2  # above the object
    for index in range(1, FRAMES):
        assert np.array_equal(pans[index, row], np.roll(pans[0, row], -PAN_PIXELS * index, axis=0))
        assert np.array_equal(still[index, row], still[0, row])
    assert not np.array_equal(pans[1, row], pans[0, row])
    with pytest.raises(ValueError, match="plain"):
        MovingScene("yellow", "plain", thing, "grows", "pans")


def test_the_same_seed_draws_the_same_scenes_and_frames() -> None:
    first, second = np.random.default_rng(5), np.random.default_rng(5)
    for _ in range(20):
        a, b = sample_moving_scene(first), sample_moving_scene(second)
        assert a == b
        assert np.array_equal(render_video(a, first), render_video(b, second))


def test_every_caption_parses_back_to_its_scene_and_splits_into_object_and_background() -> None:
    rng = np.random.default_rng(0)
    seen = set()
    for _ in range(600):
        scene = sample_moving_scene(rng)
        text = caption(scene, rng)
        assert parse(text) == scene.attributes(), text
        assert scene_from_attributes(scene.attributes()) == scene
        assert parse(describe(scene.attributes())) == scene.attributes()
        parts = split_prompt(text)
        assert parts.decoupled, text
        # the object phrase carries the motion, the background phrase the backdrop and its pan
        assert parse_still(parts.object) is None and parts.background.endswith(("backdrop", "background"))
        assert set(parts.background.split()).isdisjoint({"moving", "growing", "rising", "falling"})
        seen.add(scene.motion)
    assert seen == set(MOTIONS)


def test_the_example_caption_of_the_brief_reads_as_its_scene() -> None:
    text = "a small red circle moving to the right in front of a striped yellow backdrop"
    assert parse(text) == {
        "background_color": "yellow",
        "background_texture": "striped",
        "background_motion": "still",
        "a_shape": "circle",
        "a_color": "red",
        "a_size": "small",
        "motion": "right",
    }
    parts = split_prompt(text)
    assert (parts.object, parts.background) == (
        "a small red circle moving to the right",
        "a striped yellow backdrop",
    )


@pytest.mark.parametrize(
    "text",
    [
        "a small red circle on the left on a plain white background",  # a still caption: no motion
        "a small red circle moving up and growing in front of a plain white backdrop",  # two motions
        "a small red circle moving up",  # no background
        "a red circle moving up in front of a plain white backdrop",  # a moving object without a size
        "a small red circle growing in front of a plain white backdrop",  # a growing one with a size
        "a small red circle resting in front of a plain white backdrop",  # staying: where?
        "a small red circle moving up in front of a panning plain white backdrop",  # a plain pan
        "a small red blue circle moving up in front of a plain white backdrop",  # a contradiction
    ],
)
def test_a_prompt_that_is_not_one_moving_scene_parses_to_none(text: str) -> None:
    assert parse(text) is None


def test_a_near_miss_changes_one_named_attribute() -> None:
    rng = np.random.default_rng(2)
    changed: set[str] = set()
    for _ in range(400):
        scene = sample_moving_scene(rng)
        shown, other = scene.attributes(), near_miss(scene, rng).attributes()
        names = {name for name in shown.keys() | other.keys() if shown.get(name) != other.get(name)}
        # plain -> textured also makes the background's (unnamed) stillness visible
        assert len(names) == 1 or names == {"background_texture", "background_motion"}, (shown, other)
        assert parse(describe(other)) == other
        changed |= names
    assert {"motion", "background_motion", "a_color", "arrangement", "a_size"} <= changed
