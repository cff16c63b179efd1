"""The lab's video parts: the video judge, the inflated video UNet, its training and its pipeline."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from core.params import VideoParams
from core.settings import Settings, load_settings
from lab.build import digests
from lab.judge import JudgeNet, JudgeRefused
from lab.models import LAB_VIDEO, WEIGHTS_DIR, ensure_lab_models, lab_family
from lab.motion import FRAMES, MOTIONS, MovingScene, render_video, sample_moving_scene
from lab.motion_captions import caption
from lab.training import TextStates, load_unet
from lab.video.judge import FLOORS, MotionNet, VideoJudge, quality, tracked_motion
from lab.video.training import inflated
from lab.world import Thing
from reprise.cli import app as cli
from workers.runtime.video import (
    LAB_VIDEO_MODEL,
    decode_frames,
    generate_video,
    load_video_pipeline,
    video_model_source,
)

torch.set_num_threads(1)
pytestmark = pytest.mark.usefixtures("fresh_settings")  # tests.support.fixtures


@pytest.fixture(scope="module")
def lab_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return load_settings(
        data_dir=tmp_path_factory.mktemp("lab-video"), device="cpu", video_model=LAB_VIDEO_MODEL
    )


def test_a_videos_quality_is_the_share_of_asked_attributes_read_averaged_over_frames() -> None:
    asked = {"a_color": "red", "a_shape": "circle", "motion": "right", "background_motion": "still"}
    good = {"a_color": "red", "a_shape": "circle"}
    bad = {"a_color": "orange", "a_shape": "circle"}
    assert quality(asked, [good, good], {"motion": "right", "background_motion": "still"}) == 1.0
    # one frame reads 3 of 4, the other 4 of 4; a wrong motion costs its share on every frame
    assert quality(asked, [good, bad], {"motion": "right", "background_motion": "still"}) == pytest.approx(
        7 / 8
    )
    assert quality(asked, [good, good], {"motion": "left", "background_motion": "still"}) == pytest.approx(
        3 / 4
    )


def test_the_colour_tracker_reads_every_motion_of_true_renders() -> None:
    rng = np.random.default_rng(11)
    for motion in MOTIONS:
        for _ in range(5):
            scene = sample_moving_scene(rng)
            position = "left" if motion == "stays" else "center"
            size = "small" if motion == "grows" else scene.thing.size
            thing = Thing(scene.thing.shape, scene.thing.color, size)
            moving = MovingScene(scene.background_color, "plain", thing, motion, position=position)
            assert tracked_motion(render_video(moving, rng), thing.color) == motion
    assert tracked_motion(render_video(moving), "blue" if thing.color != "blue" else "red") is None


def test_a_video_judge_without_a_validation_at_its_floors_is_refused(tmp_path: Path) -> None:
    judge = VideoJudge(JudgeNet(), MotionNet())
    judge.save(tmp_path / "none")
    low = dict.fromkeys(FLOORS, 0.99) | {"motion_accuracy": 0.5}
    judge.save(tmp_path / "low", validation=low)
    judge.save(tmp_path / "ok", validation=dict.fromkeys(FLOORS, 0.99))
    with pytest.raises(JudgeRefused, match="no validation"):
        VideoJudge.load(tmp_path / "none")
    with pytest.raises(JudgeRefused, match=r"motion_accuracy 0\.500 is below"):
        VideoJudge.load(tmp_path / "low")
    VideoJudge.load(tmp_path / "ok")
    VideoJudge.load(tmp_path / "low", validated=False)


def test_the_committed_video_judge_is_validated_and_reads_held_out_renders() -> None:
    meta = json.loads((WEIGHTS_DIR / "video-judge" / "video_judge.json").read_text())
    validation = meta["validation"]
    assert all(validation[name] >= floor for name, floor in FLOORS.items())
    assert validation["motion_accuracy"] > 3 * validation["motion_chance_majority"]
    judge = VideoJudge.load(WEIGHTS_DIR / "video-judge")
    rng = np.random.default_rng(31)
    scenes = [sample_moving_scene(rng) for _ in range(12)]
    videos = [render_video(scene, rng) for scene in scenes]
    texts = [caption(scene, rng) for scene in scenes]
    scores = judge.score(videos, texts)
    assert np.mean([score or 0.0 for score in scores]) > 0.9
    shuffled = judge.score(videos, texts[1:] + texts[:1])
    assert np.mean([score or 0.0 for score in shuffled]) < 0.6
    assert judge.score(videos[:1], ["a small red circle on the left on a plain white background"]) == [None]


def test_an_inflated_video_unet_is_the_image_unet_on_every_frame() -> None:
    image = load_unet(WEIGHTS_DIR / "unet-large")
    states = TextStates()(["a small red circle moving up in front of a plain white backdrop"])
    video = inflated(image, states.repeat(4, 1, 1)).eval()  # one caption: its mean pooled text is its own
    generator = torch.Generator().manual_seed(0)
    latents = torch.randn((1, 8, FRAMES, 8, 8), generator=generator)
    timestep = torch.tensor([500])
    with torch.no_grad():
        moving = video(latents, timestep, encoder_hidden_states=states).sample
        frames = latents[0].permute(1, 0, 2, 3)
        still = image(
            frames, timestep.repeat(FRAMES), encoder_hidden_states=states.repeat(FRAMES, 1, 1)
        ).sample
    assert torch.allclose(moving[0].permute(1, 0, 2, 3), still, atol=1e-4)


def test_the_video_model_loads_through_from_pretrained_and_generates(lab_settings: Settings) -> None:
    source = video_model_source(lab_settings)
    assert Path(source) == ensure_lab_models(lab_settings).pipeline(LAB_VIDEO.name)
    assert lab_family(source) == "lab:video" and lab_settings.video_family == LAB_VIDEO_MODEL
    pipe = load_video_pipeline(source, device=torch.device("cpu"), dtype=torch.float32)
    assert (
        type(pipe).__name__ == "TextToVideoSDPipeline" and type(pipe.unet).__name__ == "UNet3DConditionModel"
    )
    params = VideoParams(
        prompt="a big blue square moving to the right against a plain white background",
        seed=1,
        steps=4,
        width=64,
        height=64,
        frames=FRAMES,
        fps=8,
    )
    run = generate_video(pipe, params, capture={2})
    assert run.final_latent.shape == (8, FRAMES, 8, 8) and set(run.captured) == {2}
    assert decode_frames(pipe, run.final_latent).shape == (FRAMES, 64, 64, 3)


def test_training_the_video_parts_again_reproduces_their_bytes_and_keeps_the_image_ones(
    tmp_path: Path,
) -> None:
    runs = []
    for name in ("first", "second"):
        weights = tmp_path / name / "weights"
        weights.mkdir(parents=True)
        for part in ("judge", "vae-a", "unet-large"):
            shutil.copytree(WEIGHTS_DIR / part, weights / part)
        manifest = json.loads((WEIGHTS_DIR / "manifest.json").read_text())
        (weights / "manifest.json").write_text(json.dumps(manifest))
        before = digests(weights)["files"]
        args = ["models", "train", "--smoke", "--only", "video-judge,unet-video", "--out", str(weights)]
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 0, result.output
        files = digests(weights)["files"]
        assert {path: files[path] for path in before} == before  # the image parts untouched
        written = json.loads((weights / "manifest.json").read_text())
        assert written["files"] == files and written["video_threads"] == 1
        assert written["video_judge_validation"]["videos"] == 8
        runs.append({path: digest for path, digest in files.items() if path not in before})
    assert runs[0] == runs[1] and any(path.startswith("unet-video/") for path in runs[0])
    assert any(path.startswith("video-judge/") for path in runs[0])


def test_the_video_quality_command_judges_the_trained_model_against_chance_and_true_renders(
    tmp_path: Path, lab_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REPRISE_DATA_DIR", str(lab_settings.data_dir))
    out = tmp_path / "quality.json"
    args = ["lab", "quality", "--video", "--prompts", "3", "--steps", "3", "--json", str(out)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["model"] == LAB_VIDEO_MODEL and report["steps"] == 3 and report["prompts"] == 3
    assert report["true_renders"]["mean"] > 0.9 > report["chance"]["mean"]
    low, high = report["generated"]["interval_95"]
    assert 0.0 <= low <= report["generated"]["mean"] <= high <= 1.0
    assert {"motion", "a_color"} <= set(report["generated"]["attributes"])
    assert report["tracker_on_true_renders"] == 1.0 and report["judge_on_generated"]["videos"] == 3
    assert "chance" in result.output and "read on lab:video's videos" in result.output


def test_reuse_on_the_trained_model_is_judged_against_fresh_generations(lab_settings: Settings) -> None:
    from bench.video.quality import measure_reuse_quality
    from lab.models import load_video_judge

    pipe = load_video_pipeline(
        video_model_source(lab_settings), device=torch.device("cpu"), dtype=torch.float32
    )
    judge = load_video_judge(lab_settings)
    report = measure_reuse_quality(pipe, judge, requests=2, steps=4, k=2, error_bound=0.05)
    assert set(report) >= {"miss_mean", "whole_hit_drop", "stitched_hit_drop", "codec_drop", "detail"}
    assert all(len(values) == 2 for values in report["scores"].values())
    codec = np.subtract(report["scores"]["whole_hit_exact"], report["scores"]["whole_hit"])
    assert report["codec_drop"] == pytest.approx(float(codec.mean())) and report["error_bound"] == 0.05
    for name in ("whole_hit", "stitched_hit"):
        drops = np.subtract(report["scores"]["miss"], report["scores"][name])
        assert report[f"{name}_drop"] == pytest.approx(float(drops.mean()))
        low, high = report["detail"][name]["drop_interval_95"]
        assert low <= report[f"{name}_drop"] <= high
    assert 0.0 <= report["miss_mean"] <= 1.0 and (report["k"], report["steps"]) == (2, 4)
