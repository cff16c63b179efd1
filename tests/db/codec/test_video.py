"""The video latent codec: FlexCache's key frames, alphas and base choice, its bounds, and its format."""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from bench.video.compression import compression_report
from core.errors import CodecError
from db.codec.video import (
    MAGIC_BASE,
    MAGIC_STATE,
    decode_video_state,
    encode_video_states,
    inter_step_alpha,
    select_key_frames,
)

PREFIX = struct.Struct("<4sHI")  # magic, version, header length
Array = npt.NDArray[Any]

# Written by format version 1; later versions must keep reading it. States 5: frames [f0, f0,
# f0 + d], 10: [f0 + 1, f0 + 1 + 0.6 at (0, 0), f0 + 1 + 2d] (float32, (1, 3, 2, 2)), f0 = [[1, 2],
# [3, 4]], d = [[0.5, -1], [2, 0]], family tiny, error_bound 0.25; below: the base and state 10.
GOLDEN_V1_BASE = bytes.fromhex(
    "525056420100db0000007b22626173655f73746570223a352c22636f646563223a2270636f646563222c22636f6d6d6f"
    "6e5f6672616d6573223a5b325d2c226474797065223a22666c6f61743332222c22656e747279223a2236373631326436"
    "61303637346434653132396265633035323630643833313331222c2266616d696c79223a2274696e79222c227061796c"
    "6f61645f6279746573223a34302c227061796c6f61645f6372633332223a333832323332313536312c2273656374696f"
    "6e73223a5b5b226469666673222c34305d5d2c227368617065223a5b312c332c322c325d7d70636f2103000201040105"
    "030000001000f8ffff03fa000100807e000000400000e03f0000f00700"
)
GOLDEN_V1_STATE_10 = bytes.fromhex(
    "5250565301004c0100007b22616c70686173223a5b322e305d2c22626173655f646967657374223a2231636431646438"
    "61653234323866623865306266653330343164336634366131222c22626173655f73746570223a352c22636f64656322"
    "3a2270636f646563222c22636f6d6d6f6e5f6672616d6573223a5b325d2c226474797065223a22666c6f61743332222c"
    "226572726f725f626f756e64223a302e32352c2265787472615f6672616d6573223a5b5d2c2266616d696c79223a2274"
    "696e79222c226b223a31302c226b65795f6d6170223a5b302c302c325d2c227061796c6f61645f6279746573223a3636"
    "2c227061796c6f61645f6372633332223a323437333835333236332c2273656374696f6e73223a5b5b226672616d6530"
    "222c33365d2c5b22657874726173222c305d2c5b22726573696475616c222c33305d5d2c227368617065223a5b312c33"
    "2c322c325d7d70636f210300020104010503000000100000000000c6000000000000400000800000a00070636f210300"
    "03030401040b000000100000000000000000000c00100000"
)

# The same states written by format version 2 (everything on the bound's grid of 0.5, as counts).
GOLDEN_V2_BASE = bytes.fromhex(
    "525056420200ee0000007b22626173655f73746570223a352c22636f646563223a2270636f646563222c22636f6d6d6f"
    "6e5f6672616d6573223a5b325d2c226474797065223a22666c6f61743332222c22656e747279223a2236373631326436"
    "61303637346434653132396265633035323630643833313331222c226572726f725f626f756e64223a302e32352c2266"
    "616d696c79223a2274696e79222c227061796c6f61645f6279746573223a33302c227061796c6f61645f637263333222"
    "3a323433353738383436322c2273656374696f6e73223a5b5b226469666673222c33305d5d2c227368617065223a5b31"
    "2c332c322c325d7d70636f2103000201040104030000001000f0ffffffffffffff1b00830500"
)
GOLDEN_V2_STATE_10 = bytes.fromhex(
    "5250565302004c0100007b22616c70686173223a5b322e305d2c22626173655f646967657374223a2263633930663831"
    "36633464666563613661303364623730353531626136303030222c22626173655f73746570223a352c22636f64656322"
    "3a2270636f646563222c22636f6d6d6f6e5f6672616d6573223a5b325d2c226474797065223a22666c6f61743332222c"
    "226572726f725f626f756e64223a302e32352c2265787472615f6672616d6573223a5b5d2c2266616d696c79223a2274"
    "696e79222c226b223a31302c226b65795f6d6170223a5b302c302c325d2c227061796c6f61645f6279746573223a3630"
    "2c227061796c6f61645f6372633332223a333331313733363130372c2273656374696f6e73223a5b5b226672616d6530"
    "222c33305d2c5b22657874726173222c305d2c5b22726573696475616c222c33305d5d2c227368617065223a5b312c33"
    "2c322c325d7d70636f210300020104010403000000100020000000000000001c00100d0070636f21030003030401040b"
    "000000100000000000000000000c00100000"
)


def synthetic_video_states(
    seed: int,
    channels: int = 4,
    frames: int = 16,
    height: int = 8,
    width: int = 8,
    steps: Sequence[int] = (5, 10, 15, 20, 25),
) -> dict[int, Array]:
    """A blob moving across a textured background every 4 frames, on a denoising trajectory
    x_k = a_k * clean + b_k * noise with one noise tensor, mostly shared by the frames (as FreeNoise
    shares noise across frames) and shrinking by step: frames repeat within a step, and diffs scale
    across steps. Later steps show more of the per-frame detail, so they can have more key frames."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float64)
    background = rng.standard_normal((channels, height, width))
    colour = 2.0 * rng.standard_normal((channels, 1, 1))
    clean = 0.05 * rng.standard_normal((channels, frames, height, width))  # per-frame detail
    for f in range(frames):
        cx = 1.0 + (width - 2.0) * (f // 4) / max(1, (frames - 1) // 4)
        clean[:, f] += background + colour * np.exp(-((xx - cx) ** 2 + (yy - height / 2) ** 2) / 3.0)
    noise = rng.standard_normal((channels, 1, height, width))
    noise = noise + 0.01 * rng.standard_normal((channels, frames, height, width))
    a = {k: 0.3 + 0.5 * k / 25 for k in steps}  # the signal's share grows with the step (0.4 .. 0.8)
    return {k: (a[k] * clean + np.sqrt(1 - a[k] ** 2) * noise).astype(np.float32) for k in steps}


def paper_model_states(
    seed: int, *, keys: Sequence[int] = (0, 3, 7, 12), frames: int = 16, noise: dict[int, float] | None = None
) -> dict[int, Array]:
    """Exactly FlexCache's model (4.1.2): Frame_s^f = Frame_s^0 + alpha_s * D^key(f), key frames
    repeated until the next key; `noise[k]` adds that much independent noise to step k's diffs."""
    rng = np.random.default_rng(seed)
    shape = (4, frames, 16, 16)
    diffs = rng.standard_normal(shape)
    owner = np.searchsorted(keys, np.arange(frames), side="right") - 1
    diffs = diffs[:, [keys[i] for i in owner]]
    diffs[:, : keys[1] if len(keys) > 1 else frames] = 0.0
    states = {}
    for k, alpha in zip((5, 10, 15, 20, 25), (0.6, 0.8, 1.0, 1.3, 1.7), strict=True):
        extra = (noise or {}).get(k, 0.0) * rng.standard_normal(shape)[:, [keys[i] for i in owner]]
        extra[:, : keys[1] if len(keys) > 1 else frames] = 0.0
        frame0 = rng.standard_normal((4, 1, 16, 16))
        states[k] = (frame0 + alpha * diffs + extra).astype(np.float32)
    return states


def header_of(blob: bytes) -> dict[str, Any]:
    _, _, length = PREFIX.unpack_from(blob)
    header: dict[str, Any] = json.loads(blob[PREFIX.size : PREFIX.size + length])
    return header


def reframe(blob: bytes, *, version: int | None = None, **changes: Any) -> bytes:
    """The blob with its version or header fields changed, the length field kept consistent."""
    magic, old_version, length = PREFIX.unpack_from(blob)
    header = json.loads(blob[PREFIX.size : PREFIX.size + length]) | changes
    raw = json.dumps(header).encode()
    return (
        PREFIX.pack(magic, old_version if version is None else version, len(raw))
        + raw
        + blob[PREFIX.size + length :]
    )


def video_of(*frames: Array) -> Array:
    return np.stack(frames, axis=1).astype(np.float32)  # (C, F, H, W) from (C, H, W) frames


# --- intra-step: key frames (4.1.1) ---------------------------------------------------------


def test_near_repeats_map_to_their_key_and_a_distinct_frame_becomes_a_key() -> None:
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal((2, 4, 4)) for _ in range(3))

    def near(x: Array) -> Array:  # cosine > 0.999 with x
        return x + 0.01 * rng.standard_normal(x.shape)

    key_map = select_key_frames(video_of(a, near(a), b, near(a), near(b), c))

    assert key_map == [0, 0, 2, 0, 2, 5]


def test_the_threshold_is_inclusive_at_the_boundary() -> None:
    e1, e2 = np.zeros((1, 1, 2)), np.zeros((1, 1, 2))
    e1[0, 0, 0], e2[0, 0, 1] = 1.0, 1.0
    video = video_of(e1, 3 * e1 + 4 * e2)  # cosine exactly 3/5

    assert select_key_frames(video, threshold=0.6) == [0, 0]
    assert select_key_frames(video, threshold=float(np.nextafter(0.6, 1.0))) == [0, 1]


def test_a_frame_maps_to_its_most_similar_key_not_the_first_above_threshold() -> None:
    e = np.eye(3).reshape(3, 3, 1, 1)
    video = video_of(e[0], e[1], 0.6 * e[0] + 0.8 * e[1])  # cosine 0.6 with key 0, 0.8 with key 1

    assert select_key_frames(video, threshold=0.5) == [0, 1, 1]


# --- inter-step: alphas and the base (4.1.2) ------------------------------------------------


def test_alpha_is_the_least_squares_coefficient_and_zero_for_a_zero_base() -> None:
    rng = np.random.default_rng(1)
    base, diff = rng.standard_normal((4, 8, 8)), rng.standard_normal((4, 8, 8))
    diff += 0.7 * base

    expected = np.linalg.lstsq(base.reshape(-1, 1), diff.reshape(-1), rcond=None)[0][0]

    assert inter_step_alpha(diff, base) == pytest.approx(expected, rel=1e-12)
    assert inter_step_alpha(diff, np.zeros_like(base)) == 0.0


def test_stored_alphas_are_least_squares_fits_of_each_frame_to_the_base() -> None:
    states = paper_model_states(2, noise={5: 0.3, 10: 0.3, 15: 0.0, 20: 0.3, 25: 0.3})
    encoded = encode_video_states(states, family="vc2", threshold=0.99)
    base = header_of(encoded.base)
    b = states[base["base_step"]]

    for k, blob in encoded.states.items():
        header, x = header_of(blob), states[k]
        for m, alpha in zip(header["common_frames"], header["alphas"], strict=True):
            base_diff = (b[:, m] - b[:, 0]).reshape(-1, 1)
            fit = np.linalg.lstsq(base_diff, (x[:, m] - x[:, 0]).reshape(-1), rcond=None)[0][0]
            assert alpha == pytest.approx(fit, rel=1e-6), (k, m)
    assert header_of(encoded.states[base["base_step"]])["alphas"] == [1.0] * len(base["common_frames"])


def test_the_base_is_the_step_that_rebuilds_all_states_with_the_smallest_error() -> None:
    # Step 15's diffs are the clean ones: as the base they bring no noise into the other steps.
    states = paper_model_states(3, noise={5: 0.4, 10: 0.2, 15: 0.0, 20: 0.2, 25: 0.4})

    def error_with_base(b: int) -> float:
        total = 0.0
        for x in states.values():
            for f in range(3, 16):  # frames 0..2 repeat frame 0; the others rebuild from the base
                d_base, d = (states[b][:, f] - states[b][:, 0]).ravel(), (x[:, f] - x[:, 0]).ravel()
                alpha = np.linalg.lstsq(d_base[:, None].astype(np.float64), d, rcond=None)[0][0]
                total += float(np.sum((d - alpha * d_base) ** 2))
        return total

    errors = {b: error_with_base(b) for b in states}
    chosen = header_of(encode_video_states(states, family="vc2").base)["base_step"]

    assert chosen == min(errors, key=errors.__getitem__) == 15


def test_the_paper_model_rebuilds_almost_exactly_and_compresses_more_than_3x() -> None:
    states = paper_model_states(4)

    encoded = encode_video_states(states, family="vc2")
    report = compression_report(states)

    for blob in encoded.states.values():
        header = header_of(blob)
        assert (header["common_frames"], header["extra_frames"]) == ([3, 7, 12], [])
        assert header["key_map"] == [0, 0, 0, 3, 3, 3, 3, 7, 7, 7, 7, 7, 12, 12, 12, 12]
    assert report.relative_error < 1e-5
    assert report.total > 3.0
    assert report.inter > 1.5  # the alphas replace 3 key frames in 4 of 5 steps


def test_a_video_breaking_the_linear_model_keeps_badly_predicted_frames_whole() -> None:
    # Pure noise: no frame repeats, and no diff predicts another step's (the guard, not the paper).
    rng = np.random.default_rng(5)
    states = {k: rng.standard_normal((4, 16, 8, 8)).astype(np.float32) for k in (5, 10, 15, 20, 25)}

    report = compression_report(states)

    assert all(select_key_frames(x) == list(range(16)) for x in states.values())
    assert report.relative_error < 1e-6
    assert report.total_bytes <= report.lossless_bytes / 0.9


# --- error modes ----------------------------------------------------------------------------


@pytest.mark.parametrize("eps", [1e-3, 3e-2])
def test_bounded_mode_keeps_every_element_within_the_bound(eps: float) -> None:
    states = synthetic_video_states(6)
    states = {
        k: x + 0.05 * np.random.default_rng(k).standard_normal(x.shape, np.float32) for k, x in states.items()
    }

    encoded = encode_video_states(states, family="vc2", error_bound=eps)

    for k, x in states.items():
        decoded = decode_video_state(encoded.states[k], encoded.base)
        assert decoded.dtype == np.float32 and decoded.shape == x.shape
        assert np.all(np.abs(decoded.astype(np.float64) - x) <= eps * (1 + 1e-9) + np.spacing(np.abs(x)))


def test_a_generous_bound_stores_less_than_lossless_pcodec() -> None:
    report = compression_report(synthetic_video_states(7), error_bound=0.05)

    assert report.max_abs_error <= 0.05 * (1 + 1e-6)
    assert report.total_bytes < report.lossless_bytes


def test_lossy_mode_on_the_synthetic_video_is_close_and_compresses() -> None:
    report = compression_report(synthetic_video_states(8))

    assert report.relative_error < 0.1
    assert report.intra > 3.0 and report.inter > 1.0 and report.total > 4.0


def test_float16_latents_come_back_as_float16() -> None:
    states = {k: x.astype(np.float16) for k, x in synthetic_video_states(9).items()}

    encoded = encode_video_states(states, family="vc2", error_bound=1e-2)

    for k, x in states.items():
        decoded = decode_video_state(encoded.states[k], encoded.base)
        assert decoded.dtype == np.float16
        bound = 1e-2 + np.spacing(np.abs(x)).astype(np.float64)
        assert np.all(np.abs(decoded.astype(np.float64) - x.astype(np.float64)) <= bound)


def test_big_endian_latents_keep_their_values() -> None:
    states = synthetic_video_states(13, steps=(5, 10))
    swapped = {k: x.astype(">f4") for k, x in states.items()}

    encoded = encode_video_states(swapped, family="vc2", error_bound=1e-3)

    for k, x in states.items():
        decoded = decode_video_state(encoded.states[k], encoded.base)
        assert decoded.dtype == np.dtype("=f4")
        assert np.all(np.abs(decoded - x) <= 1e-3 + np.spacing(np.abs(x)))
    with pytest.raises(ValueError):
        select_key_frames(states[5][0])  # 3-D


def test_a_single_state_needs_no_other_state() -> None:
    x = synthetic_video_states(10, steps=(25,))[25]

    encoded = encode_video_states({25: x}, family="vc2")

    assert header_of(encoded.base)["base_step"] == 25
    decoded = decode_video_state(encoded.states[25], encoded.base)
    assert np.linalg.norm(decoded - x) < 0.1 * np.linalg.norm(x)


# --- the stored format ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def encoded_pair() -> tuple[bytes, bytes, bytes]:
    """A state, its base, and the base of another entry."""
    one = encode_video_states(synthetic_video_states(11), family="vc2")
    other = encode_video_states(synthetic_video_states(12), family="vc2")
    return one.states[10], one.base, other.base


def test_golden_v1_blobs_still_decode() -> None:
    decoded = decode_video_state(GOLDEN_V1_STATE_10, GOLDEN_V1_BASE)

    # Frame 1 repeats frame 0 (cosine 0.997); the residual puts back 0.5 of its 0.6 (bound 0.25).
    expected = [[[[2.0, 3.0], [4.0, 5.0]], [[2.5, 3.0], [4.0, 5.0]], [[3.0, 1.0], [8.0, 5.0]]]]
    assert decoded.dtype == np.float32
    np.testing.assert_array_equal(decoded, np.array(expected, dtype=np.float32))


def test_golden_v2_blobs_still_decode() -> None:
    decoded = decode_video_state(GOLDEN_V2_STATE_10, GOLDEN_V2_BASE)

    # Frame 0's counts 4, 6, 8, 10 are exact; frame 1 repeats it and the residual's one count puts back
    # 0.5 of its 0.6; frame 2 is frame 0 plus alpha 2 times the base's diff counts (1, -2, 4, 0).
    expected = [[[[2.0, 3.0], [4.0, 5.0]], [[2.5, 3.0], [4.0, 5.0]], [[3.0, 1.0], [8.0, 5.0]]]]
    assert decoded.dtype == np.float32
    np.testing.assert_array_equal(decoded, np.array(expected, dtype=np.float32))


def test_another_entrys_base_is_refused(encoded_pair: tuple[bytes, bytes, bytes]) -> None:
    state, _, other_base = encoded_pair

    with pytest.raises(CodecError, match="another entry"):
        decode_video_state(state, other_base)


@pytest.mark.parametrize("cut", [3, 9, 40, -1])
def test_truncated_blobs_are_refused(encoded_pair: tuple[bytes, bytes, bytes], cut: int) -> None:
    state, base, _ = encoded_pair

    with pytest.raises(CodecError, match="truncated"):
        decode_video_state(state[:cut], base)
    with pytest.raises(CodecError, match="truncated"):
        decode_video_state(state, base[:cut])


def test_bad_magic_and_swapped_blobs_are_refused(encoded_pair: tuple[bytes, bytes, bytes]) -> None:
    state, base, _ = encoded_pair

    with pytest.raises(CodecError, match="not a Reprise video state"):
        decode_video_state(b"RPLT" + state[4:], base)
    with pytest.raises(CodecError, match="not a Reprise video state"):
        decode_video_state(base, state)
    assert state[:4] == MAGIC_STATE and base[:4] == MAGIC_BASE


def test_an_unknown_version_is_refused_naming_the_versions_read(
    encoded_pair: tuple[bytes, bytes, bytes],
) -> None:
    state, base, _ = encoded_pair

    with pytest.raises(CodecError, match="format version 3; this Reprise reads versions 1, 2"):
        decode_video_state(reframe(state, version=3), base)


def test_corrupt_payloads_and_headers_are_refused(encoded_pair: tuple[bytes, bytes, bytes]) -> None:
    state, base, _ = encoded_pair
    flipped = bytearray(state)
    flipped[-10] ^= 0xFF
    key_map = header_of(state)["key_map"]

    with pytest.raises(CodecError, match="checksum"):
        decode_video_state(bytes(flipped), base)
    with pytest.raises(CodecError, match="inconsistent"):
        decode_video_state(reframe(state, key_map=[0, 1, *key_map[2:]]), base)  # frame 1 never stored
    with pytest.raises(CodecError, match="not valid JSON"):
        decode_video_state(state[:10] + b"{" * 20 + state[30:], base)


def test_unknown_header_keys_are_ignored(encoded_pair: tuple[bytes, bytes, bytes]) -> None:
    state, base, _ = encoded_pair

    np.testing.assert_array_equal(
        decode_video_state(reframe(state, written_by="a later Reprise"), base),
        decode_video_state(state, base),
    )


# --- inputs ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "states",
    [
        {5: np.zeros((4, 8, 8), np.float32)},  # 3-D
        {5: np.zeros((1, 4, 2, 8, 8), np.float32)},  # a batch dimension
        {5: np.zeros((4, 2, 8, 8), np.float32), 10: np.zeros((4, 3, 8, 8), np.float32)},  # shapes differ
        {5: np.zeros((4, 2, 8, 8), np.float32), 10: np.zeros((4, 2, 8, 8), np.float16)},  # dtypes differ
        {5: np.zeros((4, 2, 8, 8), np.float64)},
        {5: np.full((4, 2, 8, 8), np.nan, np.float32)},
        {},
    ],
)
def test_bad_latents_are_refused(states: dict[int, Array]) -> None:
    with pytest.raises(ValueError):
        encode_video_states(states, family="vc2")


@pytest.mark.parametrize(
    "options",
    [
        {"family": ""},
        {"threshold": 0.0},
        {"threshold": 1.5},
        {"error_bound": 0.0},
        {"error_bound": float("inf")},
    ],
)
def test_bad_options_are_refused(options: dict[str, Any]) -> None:
    x = np.ones((1, 2, 2, 2), np.float32)

    with pytest.raises(ValueError):
        encode_video_states({5: x}, **({"family": "vc2"} | options))
