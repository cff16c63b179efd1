"""FlexCache's compression measured on cached video states (bench.video.compression): each technique's
bytes and the error it causes in the state and in a run resumed from it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from bench.video.compression import (
    compression_report,
    intra_only,
    measure_compression,
    relative_error,
    stored_states,
)
from workers.runtime.tiny import ensure_tiny_video_model
from workers.runtime.video import load_video_pipeline


def moving_square(frames: int = 8, *, still: int = 4) -> np.ndarray:
    """A (4, F, 8, 8) latent: a square that stands still for `still` frames, then moves one pixel a
    frame, on a smooth background."""
    background = np.linspace(-1.0, 1.0, 4 * 8 * 8, dtype=np.float32).reshape(4, 1, 8, 8)
    latent = np.repeat(background, frames, axis=1).copy()
    for f in range(frames):
        x = max(0, f - still + 1)
        latent[:, f, 2:5, x : x + 3] += 2.0
    return latent


def test_intra_only_repeats_the_key_frames_and_stores_fewer_bytes() -> None:
    latent = moving_square()
    rebuilt, stored = intra_only(latent)
    assert np.array_equal(rebuilt[:, :4], np.repeat(latent[:, :1], 4, axis=1))  # still frames: one key
    assert np.array_equal(rebuilt[:, 4:], latent[:, 4:])  # each moved frame is its own key
    _, all_keys = intra_only(latent, threshold=1.0 + 1e-9)
    assert stored < all_keys


def test_each_technique_decodes_every_state_within_its_error() -> None:
    rng = np.random.default_rng(0)
    clean, noise = moving_square(), rng.normal(size=(4, 8, 8, 8)).astype(np.float32)
    states = {k: (k / 25) * clean + (1 - k / 25) * noise for k in (5, 10, 15, 20, 25)}
    techniques = stored_states(states, threshold=0.99, error_bound=1e-3)
    assert set(techniques) == {"intra", "intra+inter", "bounded"}
    for k, latent in states.items():
        assert np.abs(techniques["bounded"][0][k] - latent).max() <= 1e-3 + 1e-6
    raw = sum(latent.nbytes for latent in states.values())
    # On the bound's grid an element of these states (spread about 1) costs about log2(1 / 2e-3) + 2
    # = 11 bits, not float32's 32: the bounded technique stores less than half the raw bytes.
    assert techniques["bounded"][1] < raw / 2
    assert relative_error(states[5], states[5]) == 0.0


@pytest.fixture(scope="module")
def video_pipe(tmp_path_factory: pytest.TempPathFactory) -> object:
    directory = ensure_tiny_video_model(Path(tmp_path_factory.mktemp("video-models")))
    return load_video_pipeline(str(directory), device=torch.device("cpu"), dtype=torch.float32)


def test_resuming_from_a_lossless_state_reproduces_the_run_and_lossy_ones_cost_error(
    video_pipe: object,
) -> None:
    figures = measure_compression(
        video_pipe, ["a red circle moving left"], frames=4, steps=12, capture=(3, 6, 9), error_bound=1e-3
    )
    by_name = {entry.technique: entry for entry in figures.by_technique}
    assert figures.raw_bytes == 3 * 4 * 4 * 8 * 8 * 4  # three captured float32 (4, 4, 8, 8) states
    assert set(figures.compression) == {"intra", "inter", "total"}
    assert figures.compression["total"] == pytest.approx(
        figures.compression["intra"] * figures.compression["inter"], rel=0.01
    )
    # Intra-step compression repeats only frames within cosine 0.99: what it keeps resumes exactly
    # when no frame was dropped, and the bounded residual keeps the run within a small error.
    if by_name["intra"].state_error == 0.0:
        assert by_name["intra"].resume_error == 0.0
    assert by_name["bounded"].resume_error < by_name["intra+inter"].resume_error
    # What the cache stores at its bound is the contract's compression and resume error.
    assert (figures.stored, figures.error_bound) == ("bounded", 1e-3)
    assert figures.resume_error == by_name["bounded"].resume_error > 0.0
    assert figures.compression["total"] == pytest.approx(
        figures.raw_bytes / by_name["bounded"].stored_bytes, rel=1e-3
    )


def test_a_hit_resumes_from_the_state_as_the_cache_stores_it() -> None:
    from bench.video.quality import stored_state

    rng = np.random.default_rng(3)
    captured = {k: rng.normal(size=(4, 8, 8, 8)).astype(np.float32) for k in (2, 4, 6)}

    for bound in (1e-3, 0.05):
        state = stored_state(captured, 4, bound)
        error = np.abs(state.astype(np.float64) - captured[4])
        assert error.max() <= bound * (1 + 1e-6) and error.max() > bound / 10  # on the grid, not exact


def test_bounded_mode_drops_the_bits_below_its_bound_on_noise_like_frames() -> None:
    # A trained model's early states: every frame its own noise (no key frame repeats), the steps
    # sharing it. On the grid of 2 eps = 0.04 an element of unit spread costs about log2(1 / 0.04) + 2
    # = 6.7 bits, where pcodec alone keeps float32's low bits (about 1.2x).
    rng = np.random.default_rng(0)
    noise, clean = rng.standard_normal((4, 16, 8, 8)), rng.standard_normal((4, 16, 8, 8))
    states = {
        k: ((k / 50) * clean + np.sqrt(1 - (k / 50) ** 2) * noise).astype(np.float32) for k in (5, 15, 25)
    }

    report = compression_report(states, error_bound=0.02)

    assert report.max_abs_error <= 0.02 * (1 + 1e-6)
    assert report.total > 4.0 and report.total_bytes < report.lossless_bytes / 3
