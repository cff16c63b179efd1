"""The lab's world: scenes, renders and captions (pure logic, no model)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from bench.live.demo import quality_line
from lab.captions import caption, describe, parse
from lab.trace import lab_trace
from lab.world import (
    ATTRIBUTES,
    OBJECT_COLORS,
    SIZE,
    Scene,
    Thing,
    near_miss,
    render,
    render_with_mask,
    sample_scene,
)
from reprise.cli import app as cli

pytestmark = pytest.mark.usefixtures("fresh_settings")  # tests.support.fixtures


def test_the_same_seed_draws_the_same_scenes_and_pixels() -> None:
    first, second = np.random.default_rng(3), np.random.default_rng(3)
    for _ in range(20):
        a, b = sample_scene(first), sample_scene(second)
        assert a == b
        assert np.array_equal(render(a, first), render(b, second))


def test_a_render_shows_its_object_in_its_colour_where_the_scene_places_it() -> None:
    scene = Scene("white", "plain", "left", (Thing("square", "red", "large"),))
    image, mask = render_with_mask(scene)
    assert image.shape == (SIZE, SIZE, 3) and image.dtype == np.uint8
    assert tuple(image[32, 17]) == OBJECT_COLORS["red"]
    assert mask[:, :32].sum() > 0 and mask[:, 40:].sum() == 0  # nothing drawn on the right
    moved = render(Scene("white", "plain", "right", scene.things))
    assert tuple(moved[32, 47]) == OBJECT_COLORS["red"] and tuple(moved[32, 17]) != OBJECT_COLORS["red"]


def test_a_near_miss_differs_in_exactly_one_attribute_and_keeps_the_object_count() -> None:
    rng = np.random.default_rng(0)
    for _ in range(300):
        scene = sample_scene(rng)
        other = near_miss(scene, rng)
        shown, changed = scene.attributes(), other.attributes()
        assert shown.keys() == changed.keys()
        assert sum(shown[name] != changed[name] for name in shown) == 1


def test_every_caption_parses_back_to_the_attributes_of_its_scene() -> None:
    rng = np.random.default_rng(1)
    for _ in range(3000):
        scene = sample_scene(rng)
        assert parse(caption(scene, rng)) == scene.attributes()
        assert parse(describe(scene.attributes())) == scene.attributes()


def test_paraphrases_of_one_scene_use_different_words() -> None:
    rng = np.random.default_rng(2)
    scene = sample_scene(rng)
    assert len({caption(scene, rng) for _ in range(30)}) > 20


@pytest.mark.parametrize(
    "prompt",
    [
        "an astronaut riding a horse",  # not of the world
        "a red circle on the left on a plain white background",  # no size: an attribute missing
        "a small red circle on the left",  # no background
        "a small red circle on the left on a plain white black background",  # two background colours
        "a small red circle a big blue box a tiny green wedge above on a plain white background",  # 3 objects
        "a small red circle on the left and on the right on a plain white background",  # two places
    ],
)
def test_a_prompt_that_is_not_one_scene_of_the_world_does_not_parse(prompt: str) -> None:
    assert parse(prompt) is None


def test_relation_words_order_the_objects_into_their_slots() -> None:
    asked = parse("a small red circle right of a big blue square on a striped gray background")
    assert asked is not None
    assert (asked["arrangement"], asked["a_shape"], asked["b_shape"]) == ("horizontal", "square", "circle")
    assert set(asked) == set(ATTRIBUTES)


def test_the_lab_trace_is_zipf_skewed_and_every_repeat_is_a_paraphrase() -> None:
    trace = lab_trace([float(i) for i in range(2000)], scenes=500, zipf=1.0, seed=4)
    counts = np.bincount(trace.scene_of, minlength=500)
    assert counts[0] > 10 * max(1, int(np.median(counts)))  # the head is asked far more than the median
    assert all(parse(prompt) is not None for prompt in trace.prompts)
    repeats = [p for i, p in enumerate(trace.prompts) if trace.scene_of[i] == 0]
    assert len(set(repeats)) > len(repeats) // 2  # mostly worded anew
    again = lab_trace([float(i) for i in range(2000)], scenes=500, zipf=1.0, seed=4)
    assert again.prompts == trace.prompts


def test_the_trace_command_writes_prompts_and_arrivals_that_replay_in_order(tmp_path: Path) -> None:
    arrivals = tmp_path / "in.csv"
    arrivals.write_text("".join(f"{i * 100.0},{i % 7}\n" for i in range(50)))
    result = CliRunner().invoke(
        cli, ["lab", "trace", "--out", str(tmp_path / "t"), "--arrivals", str(arrivals), "--scenes", "10"]
    )
    assert result.exit_code == 0, result.output
    prompts = (tmp_path / "t" / "prompts.txt").read_text().splitlines()
    rows = (tmp_path / "t" / "arrivals.csv").read_text().splitlines()
    assert len(prompts) == len(rows) == 50 and all(parse(p) is not None for p in prompts)
    assert rows[3] == "300.0,3"  # its own prompt index, in file order, at the given time
    missing = CliRunner().invoke(cli, ["lab", "trace", "--out", str(tmp_path), "--arrivals", "nope.csv"])
    assert missing.exit_code == 2 and "--arrivals" in missing.output


def test_the_demo_summary_reports_the_judges_quality_per_route() -> None:
    line = quality_line(
        [{"route": "hit", "quality": 0.5}, {"route": "hit", "quality": 1.0}, {"route": "miss"}]
    )
    assert "hits 0.750" in line and "misses" not in line
    assert "judged only" in quality_line([{"route": "miss", "quality": None}])
