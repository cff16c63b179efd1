"""FlexCache's compressed video latent cache: a video job's captured latents <-> one blob per
state plus one base blob per entry, after intra- and inter-step compression, then pcodec.

FlexCache (papers/flexcache-video-approximate-cache.txt, 3.1.1, 4.1, Fig. 9) removes two redundancies:

1. Intra-step (4.1.1): per step, the key frames and a map frame -> key frame. Rule (the paper
   walks back from the last frame; this walks forward, deterministically): frame 0 is a key frame;
   each later frame f maps to its most similar earlier key frame (cosine of frames as C*H*W
   vectors, earliest on a tie) if that cosine is >= `threshold`, else f is a key frame mapping to
   itself. Decoding repeats each key frame into the positions mapped to it.
2. Inter-step (4.1.2): Diff_s^m = Frame_s^m - Frame_s^0. Common key frames are key in every step
   (frame 0 always is and needs no diff). One step's diffs of them are the base, stored once; each
   step stores per common key frame alpha_s^m = sum(Diff_s^m * Diff_base^m) / sum(Diff_base^m^2)
   (eq. 2; 0 for an all-zero base diff), its frame 0 and its other key frames whole (extra frames,
   Fig. 9 (3)), and rebuilds Frame_s^m = Frame_s^0 + alpha_s^m * Diff_base^m (alpha 1 for the base
   step). Each step is tried as the base and the smallest total squared rebuild error wins (4.1.2:
   "attempt each of them and choose the one that leads to the highest similarity after
   decompression"), the earliest step on a tie. Guard (ours, not the paper's): a common key frame
   rebuilt below `threshold` cosine with its original is stored whole as an extra frame, so a
   video that breaks the paper's linear model costs bytes instead of turning into noise.
3. error_bound=None is the paper's lossy method (6.2.4: cosine > 0.995). error_bound=eps > 0 is
   a stated bounded error mode (ours): everything stored lies on a grid of 2 eps, as integer
   counts q through pcodec (the value 2 eps q): frame 0, the extra frames and the base's diffs,
   from which the linear model rebuilds, and the residual r (original - that rebuild, all frames),
   so every decoded element is within eps of the original, plus the output dtype's rounding. A
   float's low bits below the bound are noise to pcodec; counts cost about log2(spread / 2 eps)
   bits. Lossless: db.codec.latent.

`threshold` 0.99 is the paper's cosine threshold (5, "Cache compressor", Fig. 14a); the capture
steps (5, 10, ..., 25 of 50 in 3.2) are whatever keys the caller passes. LRBU evicts each step's
state on its own (4.2.3): each state is one blob and needs only its entry's base blob, which it
names by digest. Both blobs are db.codec.framing's frames, under their own magic: b"RPVS" a state,
b"RPVB" the base, format version 2; a payload is header["sections"] ([name, bytes] pairs) in
order, each a pcodec standalone file of one array in C order (an empty array takes 0 bytes). With an
error bound, frame0, extras and diffs hold int64 counts on its grid; version 1 (still read) held
them in the latents' dtype whatever the bound. Headers::

    both  = {"codec": "pcodec", "family", "dtype": "float16"|"float32", "shape": [C, F, H, W],
             "base_step": 10, "common_frames": [5, 9], "sections", "payload_bytes", "payload_crc32"}
    base  = both + {"entry": <blake2b-128 hex of the states>, "error_bound": null}; sections: diffs
            (C, len(common), H, W)
    state = both + {"k": 15, "base_digest": <blake2b-128 hex of the base blob>, "key_map": [0, 0,
            5, ...], "alphas": [1.3, 1.2] (per common frame, unused if in extra_frames),
            "extra_frames": [12], "error_bound": null}; sections: frame0 (C, H, W), extras
            (C, len(extra_frames), H, W), residual (int64 (C, F, H, W), empty if lossy)

Readers ignore header keys they do not know; a change of meaning or layout is a new version, read
beside the old ones (db.codec.framing).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from itertools import accumulate
from typing import Any

import numpy as np
import numpy.typing as npt
from pcodec import ChunkConfig, standalone

from core.errors import CodecError, LatentError
from db.codec.framing import header_field, read_frame, write_frame

MAGIC_STATE = b"RPVS"
MAGIC_BASE = b"RPVB"
FORMAT_VERSION = 2  # with an error bound, frames and diffs are stored as counts on its grid
_READS_VERSIONS = (1, 2)
DEFAULT_THRESHOLD = 0.99  # paper 5, "Cache compressor", Fig. 14a
_MAX_HEADER_BYTES = 4 << 20  # a 64-frame header is ~1 kB; a larger length means corruption
_DTYPES: dict[str, np.dtype[Any]] = {"float16": np.dtype(np.float16), "float32": np.dtype(np.float32)}
_MAX_QUANTUM = 2.0**52  # counts beyond this lose integer precision in float64
_COUNTS = np.dtype(np.int64)
Array = npt.NDArray[Any]
_Parsed = tuple[int, dict[str, Any], dict[str, bytes]]  # a blob's version, header and sections


@dataclass(frozen=True, slots=True)
class EncodedVideo:
    """One entry's states: `states[k]` decodes with `base` alone, so each can be evicted alone."""

    base: bytes
    states: dict[int, bytes]

    @property
    def total_bytes(self) -> int:
        return len(self.base) + sum(len(blob) for blob in self.states.values())


@dataclass(frozen=True, slots=True)
class _State:
    """One step as `_rebuild` reads it; frames in the latent's dtype, residual None if lossy."""

    key_map: list[int]
    alphas: list[float]
    extras: list[int]
    frame0: Array  # (C, H, W)
    extra_frames: Array  # (C, len(extras), H, W)
    residual: Array | None = None  # int64 (C, F, H, W)


def select_key_frames(latent: Array, threshold: float = DEFAULT_THRESHOLD) -> list[int]:
    """The intra-step map of a (C, F, H, W) latent (4.1.1): entry f is the key frame that frame f
    repeats, f itself for a key frame. Rule in the module docstring; threshold: Fig. 14a."""
    _check_states({0: latent})
    vectors = np.moveaxis(np.asarray(latent, dtype=np.float64), 1, 0).reshape(latent.shape[1], -1)
    key_map, keys = [0], [0]
    for f in range(1, len(vectors)):
        scores = [_cosine(vectors[f], vectors[m]) for m in keys]
        best = int(np.argmax(scores))
        key_map.append(keys[best] if scores[best] >= threshold else f)
        if key_map[f] == f:
            keys.append(f)
    return key_map


def inter_step_alpha(diff: Array, base_diff: Array) -> float:
    """Eq. (2): the least-squares alpha with alpha * base_diff ~ diff; 0.0 for an all-zero base
    diff (then every alpha rebuilds the same frame)."""
    d = np.asarray(diff, dtype=np.float64).reshape(-1)
    b = np.asarray(base_diff, dtype=np.float64).reshape(-1)
    denominator = float(b @ b)
    return float(d @ b) / denominator if denominator > 0.0 else 0.0


def encode_video_states(
    states: Mapping[int, Array],
    *,
    family: str,
    threshold: float = DEFAULT_THRESHOLD,
    error_bound: float | None = None,
) -> EncodedVideo:
    """Compress one job's captured states (k -> (C, F, H, W) float16/float32, one shape and dtype)
    into a base blob and one blob per state. Raises ValueError (LatentError for the latents)."""
    latents = _check_states(states)
    _check_options(family, threshold, error_bound)
    key_maps = {k: select_key_frames(x, threshold) for k, x in latents.items()}
    common = _common_key_frames(list(key_maps.values()))
    base_step = _choose_base(latents, key_maps, common)
    dtype = latents[base_step].dtype
    stored_diff = base_diff = _base_diff(latents[base_step], common)
    if error_bound is not None:
        stored_diff, base_diff = _snap(base_diff, error_bound)
    meta: dict[str, Any] = {"family": family, "dtype": dtype.name, "base_step": base_step}
    meta |= {"shape": list(latents[base_step].shape), "common_frames": common, "error_bound": error_bound}
    entry = _digest(b"".join(latents[k].tobytes() for k in sorted(latents)))  # tells entries apart
    base = _pack(MAGIC_BASE, meta | {"entry": entry}, [("diffs", stored_diff)])
    meta |= {"base_digest": _digest(base)}
    blobs: dict[int, bytes] = {}
    bounded = error_bound is not None
    for k, latent in latents.items():
        plan = _plan_state(
            latent, key_maps[k], common, base_diff, base=k == base_step, guard=threshold, bounded=bounded
        )
        stored = [plan.frame0, plan.extra_frames]
        if error_bound is not None:
            (stored[0], frame0), (stored[1], extras) = (_snap(x, error_bound) for x in stored)
            plan = replace(plan, frame0=frame0, extra_frames=extras)
            residual = latent.astype(np.float64) - _rebuild(plan, common, base_diff).astype(np.float64)
            plan = replace(plan, residual=_counts(residual, error_bound))
        header = meta | {"k": k, "key_map": plan.key_map, "alphas": plan.alphas, "extra_frames": plan.extras}
        residual = np.empty(0, dtype=np.int64) if plan.residual is None else plan.residual
        sections = [("frame0", stored[0]), ("extras", stored[1]), ("residual", residual)]
        blobs[k] = _pack(MAGIC_STATE, header, sections)
    return EncodedVideo(base=base, states=blobs)


def decode_video_state(state: bytes, base: bytes) -> Array:
    """One step's (C, F, H, W) latent, in its original dtype, from its blob and its entry's base blob.
    Raises CodecError: bad magic, unknown version, truncated or corrupt blob, another entry's base."""
    version, header, sections = _unpack(state, MAGIC_STATE, "video state")
    _, base_header, base_sections = _unpack(base, MAGIC_BASE, "video base")
    if header.get("base_digest") != _digest(base):
        raise CodecError("video state belongs to another entry: its base digest differs from this base's")
    on_grid = version >= 2 and header.get("error_bound") is not None
    plan = _read_state(header, sections, on_grid=on_grid)
    names = ("dtype", "shape", "common_frames", "error_bound")[: 4 if version >= 2 else 3]
    if [base_header.get(name) for name in names] != [header.get(name) for name in names]:
        raise CodecError(f"video base header does not describe the state's {', '.join(names)}")
    dtype, (channels, _, height, width), common = (
        _DTYPES[header["dtype"]],
        header["shape"],
        header["common_frames"],
    )
    diffs_shape = (channels, len(common), height, width)
    if on_grid:
        base_diff = _on_grid(
            _array(base_sections.get("diffs", b""), _COUNTS, diffs_shape), header["error_bound"]
        )
    else:
        base_diff = _array(base_sections.get("diffs", b""), dtype, diffs_shape)
    rebuilt = _rebuild(plan, common, base_diff)
    if plan.residual is not None:
        rebuilt = rebuilt.astype(np.float64) + plan.residual * (2.0 * float(header["error_bound"]))
    return rebuilt.astype(dtype)


# --- compression -------------------------------------------------------------------------------


def _cosine(a: Array, b: Array) -> float:
    a, b = np.asarray(a, dtype=np.float64).reshape(-1), np.asarray(b, dtype=np.float64).reshape(-1)
    norm_a, norm_b = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if norm_a == 0.0 or norm_b == 0.0:
        return 1.0 if norm_a == norm_b else 0.0
    return float(a @ b) / (norm_a * norm_b)


def _common_key_frames(key_maps: list[list[int]]) -> list[int]:
    keys = [{f for f, m in enumerate(key_map) if f == m} for key_map in key_maps]
    return sorted(set.intersection(*keys) - {0})


def _base_diff(latent: Array, common: list[int]) -> Array:
    """Diff_base of the common key frames, (C, len(common), H, W), kept in the latent's dtype."""
    x = latent.astype(np.float32)
    return (x[:, common] - x[:, :1]).astype(latent.dtype)


def _choose_base(latents: dict[int, Array], key_maps: dict[int, list[int]], common: list[int]) -> int:
    """The step whose diffs, as the base, rebuild all states (paper method, no guard) best."""
    errors: dict[int, float] = {}
    for b in sorted(latents):
        base_diff = _base_diff(latents[b], common)
        errors[b] = 0.0
        for k, latent in latents.items():
            plan = _plan_state(latent, key_maps[k], common, base_diff, base=k == b, guard=None)
            rebuilt = _rebuild(plan, common, base_diff).astype(np.float64)
            errors[b] += float(np.sum((rebuilt - latent.astype(np.float64)) ** 2))
    return min(errors, key=lambda b: (errors[b], b))


def _plan_state(
    latent: Array,
    key_map: list[int],
    common: list[int],
    base_diff: Array,
    *,
    base: bool,
    guard: float | None,
    bounded: bool = False,
) -> _State:
    """What one step stores: alphas (1 for the base step), frame 0 and its extra frames; with a
    guard, common key frames rebuilt below that cosine become extra frames too. Bounded (the residual
    restores every frame, so a poor rebuild costs bytes, never accuracy): only a common key frame the
    rebuild misses by its own norm or more is stored whole, where its residual would cost more."""
    x = latent.astype(np.float32)
    if base:
        alphas = [1.0] * len(common)
    else:
        alphas = [
            _float32(inter_step_alpha(x[:, m] - x[:, 0], base_diff[:, i])) for i, m in enumerate(common)
        ]
    extras = [f for f, m in enumerate(key_map) if f == m and f != 0 and f not in common]
    plan = _State(key_map, alphas, extras, latent[:, 0], latent[:, extras])
    if guard is None or base:
        return plan
    rebuilt = _rebuild(plan, common, base_diff)
    if bounded:
        worse = [m for m in common if np.linalg.norm(rebuilt[:, m] - x[:, m]) >= np.linalg.norm(x[:, m])]
    else:
        worse = [m for m in common if _cosine(rebuilt[:, m], x[:, m]) < guard]
    extras = sorted(extras + worse)
    return replace(plan, extras=extras, extra_frames=latent[:, extras])


def _rebuild(plan: _State, common: list[int], base_diff: Array) -> Array:
    """The lossy (C, F, H, W) float32 rebuild; encoder and decoder share it bit for bit."""
    frame0 = plan.frame0.astype(np.float32)
    channels, height, width = frame0.shape
    out = np.empty((channels, len(plan.key_map), height, width), dtype=np.float32)
    out[:, 0] = frame0
    for i, m in enumerate(common):
        out[:, m] = frame0 + np.float32(plan.alphas[i]) * base_diff[:, i].astype(np.float32)
    out[:, plan.extras] = plan.extra_frames
    for f, m in enumerate(plan.key_map):
        if m != f:
            out[:, f] = out[:, m]
    return out


def _float32(value: float) -> float:
    """The shortest decimal of value's float32, the precision the rebuild multiplies by: half the
    header bytes of a float64's repr, the same rebuild."""
    return float(np.format_float_positional(np.float32(value), unique=True, trim="-"))


def _counts(values: Array, error_bound: float) -> Array:
    """Integers q with |values - 2 eps q| <= eps (the grid of the bounded mode)."""
    scaled = values.astype(np.float64) / (2.0 * error_bound)
    if scaled.size and np.abs(scaled).max() > _MAX_QUANTUM:
        raise ValueError(f"error_bound {error_bound} is too small for latents of this magnitude")
    return np.rint(scaled).astype(np.int64)


def _on_grid(counts: Array, error_bound: float) -> Array:
    """The float32 values counts stand for; encoder and decoder share it bit for bit."""
    return (counts.astype(np.float64) * (2.0 * error_bound)).astype(np.float32)


def _snap(values: Array, error_bound: float) -> tuple[Array, Array]:
    """values on the grid: the counts stored, and the float32 values the rebuild reads."""
    counts = _counts(values, error_bound)
    return counts, _on_grid(counts, error_bound)


# --- checks ------------------------------------------------------------------------------------


def _check_states(states: Mapping[int, Array]) -> dict[int, Array]:
    if not isinstance(states, Mapping) or not states:
        raise ValueError("states must be a non-empty mapping of capture step k -> latent")
    first = next(iter(states.values()))
    for k, latent in states.items():
        if type(k) is not int or k < 0:
            raise ValueError(f"capture steps must be non-negative integers, got {k!r}")
        if not isinstance(latent, np.ndarray) or latent.ndim != 4 or latent.dtype.name not in _DTYPES:
            got = f"{getattr(latent, 'shape', type(latent).__name__)} {getattr(latent, 'dtype', '')}"
            raise LatentError(f"state {k}: need a 4-D (C, F, H, W) float16 or float32 array, got {got}")
        if latent.shape != first.shape or latent.dtype != first.dtype or latent.size == 0:
            want = f"{first.shape} {first.dtype}, non-empty"
            raise LatentError(f"state {k} is {latent.shape} {latent.dtype}; every state must be {want}")
        if not np.isfinite(latent).all():
            raise LatentError(f"state {k} holds NaN or infinite values")
    return {k: x.astype(x.dtype.newbyteorder("="), copy=False) for k, x in states.items()}  # native order


def _check_options(family: str, threshold: float, error_bound: float | None) -> None:
    if not isinstance(family, str) or not family:
        raise ValueError(f"family must be a non-empty string, got {family!r}")
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold is a cosine similarity in (0, 1], got {threshold!r}")
    if error_bound is not None and not (math.isfinite(error_bound) and error_bound > 0):
        raise ValueError(f"error_bound must be None (lossy) or a finite number > 0, got {error_bound!r}")


# --- the stored format -------------------------------------------------------------------------


def _digest(blob: bytes) -> str:
    return hashlib.blake2b(blob, digest_size=16).hexdigest()


def _pack(magic: bytes, header: dict[str, Any], sections: list[tuple[str, Array]]) -> bytes:
    """A blob of this codec's newest format version."""
    parts = [standalone.simple_compress(a.ravel(), ChunkConfig()) if a.size else b"" for _, a in sections]
    header = header | {
        "codec": "pcodec",
        "sections": [[name, len(part)] for (name, _), part in zip(sections, parts, strict=True)],
    }
    return write_frame(magic, header, b"".join(parts), version=FORMAT_VERSION)


def _unpack(data: bytes, magic: bytes, what: str) -> _Parsed:
    """The version, header and payload's sections of a blob of any format version this reads."""
    frame = read_frame(
        data, magic=magic, what=what, max_header_bytes=_MAX_HEADER_BYTES, versions=_READS_VERSIONS
    )
    header, payload = frame.header, frame.payload
    if header.get("codec") != "pcodec":
        raise CodecError(f"{what} blob header is not a JSON object with codec 'pcodec'")
    listed = _field(header, "sections", list)
    if not all(isinstance(s, list) and [type(v) for v in s] == [str, int] and s[1] >= 0 for s in listed):
        raise CodecError(f"{what} blob header field 'sections' is not a list of [name, length] pairs")
    ends = list(accumulate((length for _, length in listed), initial=0))
    if ends[-1] != len(payload):
        raise CodecError(f"{what} blob corrupt: its sections do not add up to its payload")
    sections = {name: payload[a:b] for (name, _), a, b in zip(listed, ends[:-1], ends[1:], strict=True)}
    return frame.version, header, sections


def _read_state(header: dict[str, Any], sections: dict[str, bytes], *, on_grid: bool) -> _State:
    """The state a header and its sections describe, checked so that every frame gets rebuilt;
    on_grid: frame0 and extras are counts on the error bound's grid (version 2, bounded)."""
    dtype, shape = _DTYPES.get(_field(header, "dtype", str)), _field(header, "shape", list)
    if dtype is None or len(shape) != 4 or not all(type(n) is int and n > 0 for n in shape):
        raise CodecError(f"video state dtype {header['dtype']!r} or shape {shape!r} is not valid")
    channels, frames, height, width = shape
    key_map = _field(header, "key_map", list)
    common, extras = _field(header, "common_frames", list), _field(header, "extra_frames", list)
    alphas, error_bound = _field(header, "alphas", list), header.get("error_bound")
    keys = {f for f, m in enumerate(key_map) if f == m}
    valid = (
        len(key_map) == frames
        and all(type(m) is int and 0 <= m <= f and m in keys for f, m in enumerate(key_map))
        and all(type(m) is int and m in keys for m in common + extras)
        and keys <= {0, *common, *extras}
        and len(alphas) == len(common)
        and all(type(a) in (int, float) for a in alphas)
        and (error_bound is None or (type(error_bound) in (int, float) and error_bound > 0))
        and [name for name, _ in header["sections"]] == ["frame0", "extras", "residual"]
    )
    if not valid:
        raise CodecError("video state header is inconsistent (key map, frames, alphas or error bound)")
    residual = None if error_bound is None else _array(sections["residual"], _COUNTS, tuple(shape))
    sizes = {"frame0": (channels, height, width), "extras": (channels, len(extras), height, width)}
    frames_of = {
        name: _array(sections[name], _COUNTS if on_grid else dtype, size) for name, size in sizes.items()
    }
    if on_grid and error_bound is not None:
        frames_of = {name: _on_grid(counts, error_bound) for name, counts in frames_of.items()}
    return _State(
        key_map, [float(a) for a in alphas], extras, frames_of["frame0"], frames_of["extras"], residual
    )


def _array(part: bytes, dtype: np.dtype[Any], shape: tuple[int, ...]) -> Array:
    count = math.prod(shape)
    flat = np.empty(0, dtype=dtype)
    if part:
        try:
            flat = standalone.simple_decompress(part)
        except RuntimeError as error:  # pcodec reports corrupt data as RuntimeError
            raise CodecError(f"video blob section cannot be decompressed: {error}") from None
    if flat is None or flat.dtype != dtype or flat.size != count:
        raise CodecError(f"video blob section does not hold {count} {dtype.name} values (shape {shape})")
    return flat.reshape(shape)


def _field(header: dict[str, Any], name: str, kind: type[Any]) -> Any:
    return header_field(header, name, kind, "video")
