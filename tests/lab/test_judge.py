"""The judges' validation: a judge without one, or below a floor, is refused at load with the reason;
the committed judges carry theirs, and the second judge is another network."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from core.errors import RepriseError
from lab import judge_b
from lab.judge import ARCHITECTURE, Judge, JudgeNet, JudgeRefused, train_judge
from lab.judge_b import JudgeNetB
from lab.judge_floors import FLOORS, refusal
from lab.models import WEIGHTS_DIR
from lab.validation import (
    agreement,
    blurred,
    noisy,
    rival,
    rival_agreement,
    round_trip_agreement,
    round_trips,
)
from lab.world import render, sample_scene


def _copy(tmp_path: Path, name: str = "judge") -> Path:
    directory = tmp_path / name
    shutil.copytree(WEIGHTS_DIR / name, directory)
    return directory


def _rewrite(directory: Path, **changes: object) -> None:
    meta = json.loads((directory / "judge.json").read_text())
    for key, value in changes.items():
        if value is None:
            meta.pop(key, None)
        else:
            meta[key] = value
    (directory / "judge.json").write_text(json.dumps(meta))


def test_the_committed_judge_is_validated_at_or_above_every_floor() -> None:
    validation = json.loads((WEIGHTS_DIR / "judge" / "judge.json").read_text())["validation"]
    assert refusal(validation) is None
    assert set(FLOORS) <= set(validation) and validation["generated_images"] > 0
    assert isinstance(Judge.load(WEIGHTS_DIR / "judge"), Judge)


def test_the_committed_second_judge_passes_every_floor_the_scorer_does() -> None:
    """Trained until its held-out accuracy matched the first's (lab.stages), the second opinion would
    itself be taken as a scorer: its validation clears every floor, agreement included."""
    second = json.loads((WEIGHTS_DIR / "judge-b" / "judge.json").read_text())["validation"]
    assert refusal(second) is None and second["heldout_accuracy"] >= 0.99
    assert isinstance(Judge.load(WEIGHTS_DIR / "judge-b"), Judge)


def test_a_judge_without_validation_is_refused_with_the_fix(tmp_path: Path) -> None:
    directory = _copy(tmp_path)
    _rewrite(directory, validation=None)
    with pytest.raises(JudgeRefused, match=r"no validation.*--only judge-b,discriminator"):
        Judge.load(directory)
    assert isinstance(Judge.load(directory, validated=False), Judge)  # the validation itself loads it


def test_a_judge_below_a_floor_is_refused_naming_the_figure(tmp_path: Path) -> None:
    directory = _copy(tmp_path)
    validation = json.loads((directory / "judge.json").read_text())["validation"]
    _rewrite(directory, validation=validation | {"generated_agreement": 0.4})
    with pytest.raises(JudgeRefused, match=r"generated_agreement 0\.4000 is below the floor 0\.5") as refused:
        Judge.load(directory)
    assert isinstance(refused.value, RepriseError) and not refused.value.recoverable


def test_the_second_judge_is_another_architecture_and_loads_as_one() -> None:
    meta = json.loads((WEIGHTS_DIR / "judge-b" / "judge.json").read_text())
    first = json.loads((WEIGHTS_DIR / "judge" / "judge.json").read_text())
    assert meta["architecture"] == judge_b.ARCHITECTURE != first.get("architecture", ARCHITECTURE)
    loaded = Judge.load(WEIGHTS_DIR / "judge-b", validated=False)
    assert isinstance(loaded._net, JudgeNetB) and not isinstance(loaded._net, JudgeNet)


def test_degradations_change_the_image_and_keep_its_shape() -> None:
    import numpy as np

    image = render(sample_scene(np.random.default_rng(0)))
    soft, grainy = blurred(image), noisy(image, np.random.default_rng(1))
    assert soft.shape == grainy.shape == image.shape and soft.dtype == grainy.dtype == np.uint8
    assert np.abs(soft.astype(int) - image).mean() > 0 and np.abs(grainy.astype(int) - image).mean() > 3


def test_agreement_reports_the_verdicts_and_scores_a_drop_is_made_of() -> None:
    """On renders of other scenes than the captions ask (scores spread from 0 up), a judge agrees with
    itself on every reading, verdict and score; the second judge less, on the same images."""
    rng = np.random.default_rng(7)
    scenes = [sample_scene(rng) for _ in range(24)]
    images = {
        "others": [render(sample_scene(rng), rng) for _ in scenes],
        "own": [render(s, rng) for s in scenes],
    }
    first = Judge.load(WEIGHTS_DIR / "judge", validated=False)
    alone = agreement(first, first, scenes, images)
    assert alone["generated_agreement"] == alone["verdict_agreement"] == 1.0
    assert alone["score_correlation"] == pytest.approx(1.0)
    own, others = alone["scores_per_model"]["own"], alone["scores_per_model"]["others"]
    assert own["judge"] == own["judge_b"] > others["judge"] == others["judge_b"]
    second = agreement(first, Judge.load(WEIGHTS_DIR / "judge-b", validated=False), scenes, images)
    assert second["verdict_agreement"] < 1.0 and second["score_correlation"] is not None
    assert 0.5 < second["score_correlation"] < 1.0


def test_a_rival_of_the_judge_s_own_seed_agrees_on_everything_and_another_seed_less() -> None:
    """The rival is trained by the judge's own recipe: from the judge's seed it is the same network
    (every reading agrees), from another it is a second reader of the same kind that does not."""
    rng = np.random.default_rng(11)
    scenes = [sample_scene(rng) for _ in range(16)]
    images = {"own": [render(s, rng) for s in scenes]}
    first = Judge(train_judge(3, seed=5, log=lambda _line: None))
    same = rival_agreement(first, rival(3, seed=5), scenes, images, heldout=20)
    assert same["generated_agreement"] == same["verdict_agreement"] == 1.0
    assert same["architecture"] == ARCHITECTURE and same["heldout_accuracy"] < 0.95  # 3 steps: untrained
    other = rival_agreement(first, rival(3, seed=6), scenes, images, heldout=20)
    assert other["generated_agreement"] < 1.0 and set(other["agreement_per_model"]) == {"own"}


def test_the_autoencoder_s_round_trip_keeps_a_render_readable_and_reports_each_judge() -> None:
    """A round trip through the lab's autoencoder changes the pixels but keeps what the judge reads
    on most attributes; the report names each other judge's agreement on the round trips."""
    from lab.training import load_vae

    rng = np.random.default_rng(12)
    scenes = [sample_scene(rng) for _ in range(24)]
    renders = [render(s, rng) for s in scenes]
    trips = round_trips(load_vae(WEIGHTS_DIR / "vae-a"), renders)
    assert len(trips) == 24 and trips[0].shape == renders[0].shape and trips[0].dtype == np.uint8
    assert any(not np.array_equal(a, b) for a, b in zip(trips, renders, strict=True))
    first = Judge.load(WEIGHTS_DIR / "judge", validated=False)
    report = round_trip_agreement(
        first, {"self": first, "judge_b": Judge.load(WEIGHTS_DIR / "judge-b", validated=False)}, scenes, trips
    )
    assert report["images"] == 24 and report["agreement_self"] == 1.0
    assert 0.9 < report["score"] <= 1.0 and 0.9 < report["agreement_judge_b"] <= 1.0
