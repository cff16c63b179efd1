"""Video jobs on the tiny text-to-video model (FlexCache): built offline and reproducible, loaded like a
real model, exact capture and resume with 5-D latents, cancellation, frames and their animated WebP."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image, ImageSequence, WebPImagePlugin
from safetensors.torch import load_file

from core.errors import GenerationCanceled, InvalidInput, LatentError, StepsError
from core.params import VideoParams
from workers.runtime import tiny
from workers.runtime.tiny import (
    TINY_VIDEO_MARKER,
    build_tiny_video_model,
    ensure_tiny_video_model,
    tiny_video_model_dir,
)
from workers.runtime.video import (
    VideoRun,
    decode_frames,
    encode_webp,
    generate_video,
    load_video_pipeline,
    seeded_video_noise,
)

WEIGHTS = "diffusion_pytorch_model.safetensors"
FRAMES = 8
STEPS = 10
CAPTURE = {2, 4, 6}


PARAMS = VideoParams(
    prompt="an owl on a branch", seed=7, steps=STEPS, width=64, height=64, guidance=7.5, frames=FRAMES, fps=8
)


def _params(**changes: Any) -> VideoParams:
    return replace(PARAMS, **changes)


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("video-models")


@pytest.fixture(scope="module")
def video_dir(models_dir: Path) -> Path:
    return ensure_tiny_video_model(models_dir)


@pytest.fixture(scope="module")
def pipe(video_dir: Path) -> object:
    return load_video_pipeline(str(video_dir), device=torch.device("cpu"), dtype=torch.float32)


@pytest.fixture(scope="module")
def full_run(pipe: object) -> VideoRun:
    return generate_video(pipe, _params(), capture=CAPTURE)


def _same_tensors(first: Path, second: Path) -> bool:
    a, b = load_file(str(first)), load_file(str(second))
    return a.keys() == b.keys() and all(torch.equal(a[name], b[name]) for name in a)


def _durations(webp: Image.Image) -> list[int]:
    durations = []
    for frame in ImageSequence.Iterator(webp):
        frame.load()  # the WebP reader sets a frame's duration as it decodes the frame
        durations.append(int(frame.info["duration"]))
    return durations


# --- the tiny model ----------------------------------------------------------------------------


def test_the_saved_model_loads_back_as_a_text_to_video_pipeline(pipe: object, video_dir: Path) -> None:
    index = json.loads((video_dir / "model_index.json").read_text())
    assert index["_class_name"] == "TextToVideoSDPipeline"
    unet = pipe.unet  # type: ignore[attr-defined]
    assert type(unet).__name__ == "UNet3DConditionModel"
    hidden = pipe.text_encoder.config.hidden_size  # type: ignore[attr-defined]
    assert unet.config.cross_attention_dim == hidden
    # The VAE is the tiny image set's, built from the same seed: frames decode like its images.
    vae_state = pipe.vae.state_dict()  # type: ignore[attr-defined]
    rebuilt = tiny._build_vae().state_dict()
    assert all(torch.equal(vae_state[name], rebuilt[name]) for name in rebuilt)


def test_build_is_reproducible(tmp_path: Path, video_dir: Path) -> None:
    again = build_tiny_video_model(tmp_path / "again")
    for part in ("unet", "vae"):
        assert _same_tensors(video_dir / part / WEIGHTS, again / part / WEIGHTS)


def test_ensure_is_idempotent_and_leaves_no_staging(models_dir: Path, video_dir: Path) -> None:
    marker = video_dir / TINY_VIDEO_MARKER
    before = marker.stat().st_mtime_ns
    assert ensure_tiny_video_model(models_dir) == video_dir == tiny_video_model_dir(models_dir)
    assert marker.stat().st_mtime_ns == before
    assert [p.name for p in models_dir.iterdir()] == [video_dir.name]


# --- generation, capture and resume ------------------------------------------------------------


def test_a_full_run_captures_video_latents_and_counts_one_evaluation_a_step(full_run: VideoRun) -> None:
    assert full_run.final_latent.shape == (4, FRAMES, 8, 8) and full_run.final_latent.dtype == np.float32
    assert sorted(full_run.captured) == sorted(CAPTURE)
    assert all(latent.shape == (4, FRAMES, 8, 8) for latent in full_run.captured.values())
    assert full_run.evaluations == STEPS and len(full_run.step_ms) == STEPS and full_run.start_step == 0


@pytest.mark.parametrize("k", sorted(CAPTURE))
def test_resume_from_a_capture_reproduces_the_full_run_exactly(
    pipe: object, full_run: VideoRun, k: int
) -> None:
    resumed = generate_video(pipe, _params(), start_step=k, start_latent=full_run.captured[k], capture=())
    assert torch.equal(torch.from_numpy(resumed.final_latent), torch.from_numpy(full_run.final_latent))
    assert resumed.evaluations == STEPS - k and resumed.start_step == k


def test_default_capture_keeps_the_paper_steps_the_run_reaches(pipe: object, full_run: VideoRun) -> None:
    resumed = generate_video(pipe, _params(), start_step=4, start_latent=full_run.captured[4])
    assert sorted(resumed.captured) == [5]  # of 5, 10, ..., 25 only 5 lies in 5..9


def test_another_seed_gives_another_video(pipe: object, full_run: VideoRun) -> None:
    other = generate_video(pipe, _params(seed=8, steps=2), capture=())
    first = generate_video(pipe, _params(steps=2), capture=())
    assert not np.allclose(other.final_latent, first.final_latent)


def test_should_stop_cancels_and_on_step_reports_progress(pipe: object) -> None:
    progress: list[tuple[int, int]] = []
    with pytest.raises(GenerationCanceled) as canceled:
        generate_video(
            pipe,
            _params(),
            capture=(),
            should_stop=lambda: len(progress) >= 3,
            on_step=lambda done, total: progress.append((done, total)),
        )
    assert canceled.value.step == 3
    assert progress == [(1, STEPS), (2, STEPS), (3, STEPS)]


def test_bad_inputs_are_refused_before_any_model_work(pipe: object, full_run: VideoRun) -> None:
    latent = full_run.captured[4]
    with pytest.raises(LatentError, match="expected"):
        generate_video(pipe, _params(frames=FRAMES * 2), start_step=4, start_latent=latent)
    with pytest.raises(StepsError):
        generate_video(pipe, _params(), start_step=4)  # a resume needs its latent
    with pytest.raises(StepsError):
        generate_video(pipe, _params(), capture={STEPS})
    with pytest.raises(InvalidInput) as bad:
        generate_video(pipe, _params(frames=0))
    assert bad.value.field == "frames"


# --- frames and the animated WebP --------------------------------------------------------------


def test_frames_decode_and_encode_as_an_animated_webp(pipe: object, full_run: VideoRun) -> None:
    frames = decode_frames(pipe, full_run.final_latent)
    assert frames.shape == (FRAMES, 64, 64, 3) and frames.dtype == np.uint8
    webp = Image.open(io.BytesIO(encode_webp(frames, fps=8)))
    assert isinstance(webp, WebPImagePlugin.WebPImageFile) and webp.is_animated
    assert webp.n_frames == FRAMES and webp.info["loop"] == 0
    assert _durations(webp) == [125] * FRAMES  # 1000 / fps ms


def test_lossless_webp_gives_the_frames_back_exactly() -> None:
    frames = np.random.default_rng(0).integers(0, 256, (3, 16, 16, 3), dtype=np.uint8)
    webp = Image.open(io.BytesIO(encode_webp(frames, fps=4, lossless=True)))
    read_back = np.stack([np.asarray(frame.convert("RGB")) for frame in ImageSequence.Iterator(webp)])
    assert np.array_equal(read_back, frames)


def test_encode_webp_refuses_what_is_not_frames() -> None:
    with pytest.raises(ValueError, match="uint8"):
        encode_webp(np.zeros((2, 8, 8, 3), dtype=np.float32), fps=8)
    with pytest.raises(ValueError, match="fps"):
        encode_webp(np.zeros((2, 8, 8, 3), dtype=np.uint8), fps=0)


def test_freenoise_windows_repeat_the_first_windows_noise_shuffled() -> None:
    """FreeNoise (FlexCache 5): every window after the first is a permutation of the first's frames;
    without a window the frames' noise is independent, as before."""
    params = _params(frames=10, noise_window=4, width=64, height=64)
    noise = seeded_video_noise(params, 4, scale=8, device=torch.device("cpu"), dtype=torch.float32)[0]
    first = [noise[:, f] for f in range(4)]
    for f in range(4, 10):
        assert sum(torch.equal(noise[:, f], frame) for frame in first) == 1
    assert not torch.equal(noise[:, 4:8], noise[:, 0:4])  # shuffled, not copied (for this seed)
    plain = seeded_video_noise(
        replace(params, noise_window=None), 4, scale=8, device=torch.device("cpu"), dtype=torch.float32
    )[0]
    generator = torch.Generator("cpu").manual_seed(params.seed)
    assert torch.equal(plain, torch.randn((1, 4, 10, 8, 8), generator=generator)[0])
