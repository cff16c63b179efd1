"""The one scorer interface (core.scoring.Scorer): the lab's trained judge and CLIP score (on the tiny
open_clip) both implement it, say which scorer and scale they are, and give one score per pair; the
judge has none (None) for a prompt of no lab scene, and only it reads confidences for the cascade."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from core.scoring import CLIP_SCALE, JUDGE_SCALE, ConfidenceReader, Scorer
from core.settings import load_settings
from lab.captions import caption
from lab.judge import Judge
from lab.models import load_judge
from lab.world import ATTRIBUTES, render, sample_scene
from workers.runtime.embedders import build_image_embedder
from workers.runtime.quality import ClipScore

torch.set_num_threads(1)
NOT_A_LAB_SCENE = "a watercolour of a lighthouse at dusk"


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("scoring-data")


@pytest.fixture(scope="module")
def judge(data_dir: Path) -> Judge:
    return load_judge(load_settings(data_dir=data_dir, device="cpu"))


@pytest.fixture(scope="module")
def clip_score(data_dir: Path) -> ClipScore:
    return ClipScore(build_image_embedder(load_settings(data_dir=data_dir, device="cpu", model_set="tiny")))


def _lab_pairs(count: int) -> tuple[list[Image.Image], list[str]]:
    """True renders of lab scenes and their captions: images that show everything asked."""
    rng = np.random.default_rng(3)
    scenes = [sample_scene(rng) for _ in range(count)]
    return [Image.fromarray(render(scene)) for scene in scenes], [caption(scene, rng) for scene in scenes]


def test_both_scorers_implement_the_interface_and_name_their_scale(
    judge: Judge, clip_score: ClipScore
) -> None:
    scorers: list[Scorer] = [judge, clip_score]
    assert all(isinstance(scorer, Scorer) for scorer in scorers)
    assert [(scorer.name, scorer.scale) for scorer in scorers] == [
        ("lab-judge", JUDGE_SCALE),
        ("clip-score", CLIP_SCALE),
    ]
    assert (JUDGE_SCALE.low, JUDGE_SCALE.high, CLIP_SCALE.low, CLIP_SCALE.high) == (0.0, 1.0, 0.0, 100.0)
    assert str(CLIP_SCALE).endswith("0..100")
    # The cascade's discriminator reads confidences from the judge only.
    assert isinstance(judge, ConfidenceReader) and not isinstance(clip_score, ConfidenceReader)


def test_the_judge_scores_each_pair_and_has_no_score_for_a_prompt_of_no_lab_scene(judge: Judge) -> None:
    images, prompts = _lab_pairs(6)
    prompts[2] = NOT_A_LAB_SCENE
    scores = judge.score(images, prompts)
    assert len(scores) == 6 and scores[2] is None
    read = [score for score in scores if score is not None]
    assert len(read) == 5 and all(0.0 <= score <= 1.0 for score in read)
    assert float(np.mean(read)) > 0.9  # true renders show every attribute asked
    assert [judge.reads(prompt) for prompt in prompts] == [score is not None for score in scores]


def test_the_judges_confidences_are_one_row_per_image(judge: Judge) -> None:
    images, _ = _lab_pairs(3)
    assert judge.confidences(images).shape == (3, 2 * len(ATTRIBUTES))


def test_clip_score_reads_every_prompt_with_one_score_in_range_per_pair(clip_score: ClipScore) -> None:
    images, prompts = _lab_pairs(4)
    prompts[1] = NOT_A_LAB_SCENE
    scores = clip_score.score(images, prompts)
    assert len(scores) == 4 and all(0.0 <= score <= 100.0 for score in scores)
    assert all(clip_score.reads(prompt) for prompt in prompts)


@pytest.mark.parametrize("which", ["judge", "clip_score"])
def test_every_scorer_scores_pairs_only(which: str, request: pytest.FixtureRequest) -> None:
    scorer: Scorer = request.getfixturevalue(which)
    images, prompts = _lab_pairs(2)
    assert list(scorer.score([], [])) == []
    with pytest.raises(ValueError, match="pairs"):
        scorer.score(images, prompts[:1])
