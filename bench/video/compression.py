"""What FlexCache's compression does to cached video states (papers/flexcache 4.1, 6.2.4):
bytes per technique and the error each causes when a hit resumes from the decompressed state.

For each prompt the video model runs T steps, capturing the states at FlexCache's key steps (3.2:
5, 10, 15, 20, 25). Each state is then stored four ways: pcodec alone (lossless, db.codec), intra-step
compression only (key frames repeated, 4.1.1), intra + inter (the paper's lossy method, 4.1.2,
db.video_codec), and intra + inter with a bounded residual (db.video_codec's error_bound). For every
technique and captured step k the run resumes from the decompressed state and its final latent is
compared with the full run's (which resuming from the exact state reproduces, under DDIM with eta 0):

    resume_error = ||final(resumed from decompressed k) - final(full run)|| / ||final(full run)||

averaged over prompts and steps. The ratios are raw float32 bytes over stored bytes, summed over every
state, as the paper's 6.7x (3.1.1). `compression` is what the cache stores: the bounded technique at the
configured bound (REPRISE_VIDEO_STATE_ERROR_BOUND), or the paper's lossy method where it is unset. With
the tiny model's random weights the frames of a step are not alike as a trained model's are (the paper's
Fig. 14b: 20-60% redundant frames at 0.99), so its figures measure the code path and its error
accounting, not a trained model's ratio.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from core.params import VideoParams
from db.codec.latent import encode_latent
from db.codec.video import DEFAULT_THRESHOLD, decode_video_state, encode_video_states, select_key_frames

TECHNIQUES = ("intra", "intra+inter", "bounded")
"""Intra-step only (4.1.1), the paper's intra + inter (4.1.2), and intra + inter with every element on
the grid of `error_bound` (ours: a stated bound on the error, db.codec.video)."""

Array = npt.NDArray[Any]


@dataclass(frozen=True, slots=True)
class TechniqueFigures:
    """One technique over every prompt: stored bytes, raw / stored, the states' own relative error and
    the resumed final latents' (mean over prompts and captured steps, and the worst)."""

    technique: str
    stored_bytes: int
    ratio: float
    state_error: float
    resume_error: float
    resume_error_max: float


@dataclass(frozen=True, slots=True)
class CompressionFigures:
    """`compression` is the JSON contract's {intra, inter, total} of what the cache stores (`stored`:
    "bounded" at error_bound, or the paper's "intra+inter" without one): intra = raw / intra-only
    bytes, inter = intra-only bytes / stored bytes, total = raw / stored bytes; `resume_error` is the
    stored technique's."""

    prompts: int
    frames: int
    error_bound: float | None
    stored: str
    raw_bytes: int
    lossless_bytes: int
    compression: dict[str, float]
    resume_error: float
    by_technique: list[TechniqueFigures]
    key_frame_share: dict[int, float]  # captured step -> key frames / frames (Fig. 14b's complement)


def intra_only(latent: Array, threshold: float = DEFAULT_THRESHOLD) -> tuple[Array, int]:
    """The state rebuilt from its key frames alone (4.1.1: "repeat the key frames"), and the bytes
    those key frames take through pcodec plus the key map."""
    key_map = select_key_frames(latent, threshold)
    keys = sorted(set(key_map))
    stored = len(encode_latent(np.ascontiguousarray(latent[:, keys]), family="bench", k=None))
    return latent[:, key_map], stored + 2 * len(key_map)


def stored_states(
    states: dict[int, Array], *, threshold: float, error_bound: float | None
) -> dict[str, tuple[dict[int, Array], int]]:
    """Each technique's decompressed states and the bytes it stores for them (no "bounded" without
    a bound)."""
    rebuilt: dict[str, tuple[dict[int, Array], int]] = {}
    intra = {k: intra_only(latent, threshold) for k, latent in states.items()}
    rebuilt["intra"] = ({k: pair[0] for k, pair in intra.items()}, sum(pair[1] for pair in intra.values()))
    for name, bound in (("intra+inter", None), ("bounded", error_bound)):
        if name == "bounded" and bound is None:
            continue
        encoded = encode_video_states(states, family="bench", threshold=threshold, error_bound=bound)
        decoded = {k: decode_video_state(encoded.states[k], encoded.base) for k in states}
        rebuilt[name] = (decoded, encoded.total_bytes)
    return rebuilt


def relative_error(value: Array, reference: Array) -> float:
    reference64 = np.asarray(reference, dtype=np.float64)
    difference = np.asarray(value, dtype=np.float64) - reference64
    return float(np.linalg.norm(difference) / max(np.linalg.norm(reference64), np.finfo(np.float64).tiny))


def measure_compression(
    pipe: Any,
    prompts: list[str],
    *,
    frames: int = 16,
    steps: int = 50,
    size: int = 64,
    threshold: float = DEFAULT_THRESHOLD,
    error_bound: float | None,
    capture: tuple[int, ...] | None = None,
    noise_window: int | None = None,
) -> CompressionFigures:
    """Run, compress and resume every prompt (module doc); `error_bound`: the cache's (settings.
    video_state_error_bound, None: the paper's lossy method); `capture`: the steps cached (default
    FlexCache's, workers.runtime.video.CAPTURE_STEPS); `noise_window`: FreeNoise's (VideoParams)."""
    from workers.runtime.video import CAPTURE_STEPS, generate_video

    captured_steps = sorted(CAPTURE_STEPS if capture is None else capture)

    techniques = TECHNIQUES if error_bound is not None else TECHNIQUES[:2]
    sums: dict[str, list[float]] = {name: [] for name in techniques}
    state_errors: dict[str, list[float]] = {name: [] for name in techniques}
    stored = dict.fromkeys(techniques, 0)
    raw = lossless = 0
    key_shares: dict[int, list[float]] = {}
    for seed, prompt in enumerate(prompts):
        params = VideoParams(
            prompt=prompt,
            seed=seed,
            steps=steps,
            frames=frames,
            width=size,
            height=size,
            noise_window=noise_window,
        )
        full = generate_video(pipe, params, capture=captured_steps)
        states = {k: np.asarray(v, dtype=np.float32) for k, v in full.captured.items()}
        raw += sum(latent.nbytes for latent in states.values())
        lossless += sum(len(encode_latent(latent, family="bench", k=k)) for k, latent in states.items())
        for k, latent in states.items():
            share = len(set(select_key_frames(latent, threshold))) / latent.shape[1]
            key_shares.setdefault(k, []).append(share)
        for name, (decoded, size_bytes) in stored_states(
            states, threshold=threshold, error_bound=error_bound
        ).items():
            stored[name] += size_bytes
            for k, latent in decoded.items():
                state_errors[name].append(relative_error(latent, states[k]))
                resumed = generate_video(pipe, params, start_latent=latent, start_step=k, capture=())
                sums[name].append(relative_error(resumed.final_latent, full.final_latent))
    counts = _Counts(raw, lossless, stored, state_errors, sums, key_shares)
    return _figures(len(prompts), frames, counts, error_bound)


@dataclass(frozen=True, slots=True)
class _Counts:
    """What measure_compression sums over its prompts: bytes raw, lossless and per technique, and each
    technique's state and resume errors; key frame shares by captured step."""

    raw: int
    lossless: int
    stored: dict[str, int]
    state_errors: dict[str, list[float]]
    resume_errors: dict[str, list[float]]
    key_shares: dict[int, list[float]]


def _figures(prompts: int, frames: int, counts: _Counts, error_bound: float | None) -> CompressionFigures:
    """The figures, with what the cache stores at `error_bound` as the contract's compression and resume
    error: the bounded technique, or the paper's intra + inter without a bound."""
    raw, stored = counts.raw, counts.stored
    by_technique = [
        TechniqueFigures(
            technique=name,
            stored_bytes=stored[name],
            ratio=round(raw / stored[name], 3),
            state_error=round(float(np.mean(counts.state_errors[name])), 6),
            resume_error=round(float(np.mean(counts.resume_errors[name])), 6),
            resume_error_max=round(max(counts.resume_errors[name]), 6),
        )
        for name in stored
    ]
    if not all(math.isfinite(figures.resume_error) for figures in by_technique):
        raise ArithmeticError("a resumed run produced a non-finite latent")
    technique = "intra+inter" if error_bound is None else "bounded"
    intra, kept = stored["intra"], stored[technique]
    return CompressionFigures(
        prompts=prompts,
        frames=frames,
        error_bound=error_bound,
        stored=technique,
        raw_bytes=raw,
        lossless_bytes=counts.lossless,
        compression={
            "intra": round(raw / intra, 3),
            "inter": round(intra / kept, 3),
            "total": round(raw / kept, 3),
        },
        resume_error=next(f.resume_error for f in by_technique if f.technique == technique),
        by_technique=by_technique,
        key_frame_share={k: round(float(np.mean(v)), 3) for k, v in sorted(counts.key_shares.items())},
    )


@dataclass(frozen=True, slots=True)
class CompressionReport:
    """Bytes of one entry's states raw, through db.codec.latent (pcodec alone), intra-step only (key frames
    + maps through db.codec.latent) and intra + inter (db.codec.video), with its errors over all
    states (relative: ||x - x_hat|| / ||x||). The paper: total 6.7x on average (3.1.1, 6.2.4)."""

    raw_bytes: int
    lossless_bytes: int
    intra_bytes: int
    total_bytes: int
    max_abs_error: float
    relative_error: float

    @property
    def intra(self) -> float:
        return self.raw_bytes / self.intra_bytes

    @property
    def inter(self) -> float:
        return self.intra_bytes / self.total_bytes

    @property
    def total(self) -> float:
        return self.raw_bytes / self.total_bytes


def compression_report(
    states: Mapping[int, Array], *, threshold: float = DEFAULT_THRESHOLD, error_bound: float | None = None
) -> CompressionReport:
    """Sizes and errors of one entry's states under db.codec.video, beside db.codec.latent and intra only."""
    encoded = encode_video_states(states, family="report", threshold=threshold, error_bound=error_bound)
    raw = lossless = intra = 0
    squared_error = squared_norm = max_abs = 0.0
    for k, latent in states.items():
        raw += latent.nbytes
        lossless += len(encode_latent(np.ascontiguousarray(latent), family="report", k=k))
        key_map = select_key_frames(latent, threshold)
        key_frames = np.ascontiguousarray(latent[:, [f for f, m in enumerate(key_map) if f == m]])
        intra += len(encode_latent(key_frames, family="report", k=k)) + len(json.dumps(key_map))
        original = latent.astype(np.float64)
        error = decode_video_state(encoded.states[k], encoded.base).astype(np.float64) - original
        squared_error += float(np.sum(error**2))
        squared_norm += float(np.sum(original**2))
        max_abs = max(max_abs, float(np.abs(error).max()))
    relative = math.sqrt(squared_error / max(squared_norm, np.finfo(np.float64).tiny))
    return CompressionReport(raw, lossless, intra, encoded.total_bytes, max_abs, relative)
