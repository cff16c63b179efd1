"""The latent codec: a latent array <-> self-describing bytes, losslessly compressed by pcodec.

LatentBox (papers/latentbox-latent-first-storage.txt, 5) stores latents with pcodec because it
models floating-point arrays; byte-stream compressors (zstd, LZ4) cannot exploit their smoothness.

Format, version 1 (all integers little-endian)::

    offset  size  field
    0       4     magic b"RPLT"
    4       2     format version (uint16) = 1
    6       4     header length H (uint32)
    10      H     header: a UTF-8 JSON object (below)
    10+H    rest  payload: one pcodec standalone file holding the elements in C order

    header = {"codec": "pcodec", "dtype": "float32", "shape": [1, 4, 64, 64],
              "family": "tiny-sd", "k": 5,          # k is null for a final latent
              "payload_bytes": 12345, "payload_crc32": 305419896}

Reading old data after an upgrade: magic, version and header length sit at the same offsets in
every version, so any later reader can tell what it holds. Readers ignore header keys they do
not know, so adding an informational key keeps the version; changing a key's meaning, the
layout or the payload encoding takes a new version with its own decoder in `_DECODERS`, and
the old decoders stay. pcodec's standalone file carries its own format version, and newer
pcodec releases read files written by older ones.

bfloat16: numpy has no bfloat16, so a bf16 latent travels as its raw bits in a uint16 array,
tagged dtype="bfloat16" (encode with `dtype="bfloat16"`; decode returns the uint16 bits and
`DecodedLatent.dtype == "bfloat16"`). With torch, outside db/:
`t.view(torch.int16).numpy().view(np.uint16)` to encode and
`torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16)` after decoding. pcodec compresses
the bits as uint16, which is exact and, on smooth latents, as small as widening to float32 first.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np
import numpy.typing as npt
from pcodec import ChunkConfig, standalone

from core.errors import CodecError, LatentError

MAGIC = b"RPLT"
FORMAT_VERSION = 1
_PREFIX = struct.Struct("<4sHI")  # magic, version, header length
_MAX_HEADER_BYTES = 64 * 1024  # a v1 header is ~150 bytes; a larger length means corruption


class LatentDtype(StrEnum):
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"  # carried as uint16 bits
    FLOAT32 = "float32"
    FLOAT64 = "float64"


# The numpy dtype that holds each latent dtype's elements, in memory and for pcodec.
_STORAGE: dict[LatentDtype, np.dtype[Any]] = {
    LatentDtype.FLOAT16: np.dtype(np.float16),
    LatentDtype.BFLOAT16: np.dtype(np.uint16),
    LatentDtype.FLOAT32: np.dtype(np.float32),
    LatentDtype.FLOAT64: np.dtype(np.float64),
}


@dataclass(frozen=True, slots=True)
class DecodedLatent:
    """A decoded latent. `array` has the stored shape; its numpy dtype is float16, float32 or
    float64, or uint16 holding the bits when `dtype` is "bfloat16". `k` is the denoising step
    the latent was captured after, None for a final latent. `version` is the blob's format."""

    array: npt.NDArray[Any]
    family: str
    k: int | None
    dtype: str
    version: int

    @property
    def is_final(self) -> bool:
        return self.k is None


def encode_latent(array: npt.NDArray[Any], *, family: str, k: int | None, dtype: str | None = None) -> bytes:
    """Compress a latent losslessly with its metadata; `decode_latent` returns it bit for bit.

    dtype: None takes it from the array (float16, float32, float64); "bfloat16" needs the
    bits as a uint16 array. k: the step the latent was captured after (>= 0), None if final.
    Raises LatentError for an unsupported or mismatched dtype, ValueError for a bad family or k.
    """
    latent_dtype = _latent_dtype(array, dtype)
    if not isinstance(family, str) or not family:
        raise ValueError(f"family must be a non-empty string, got {family!r}")
    _check_k(k, ValueError)
    # pcodec takes a 1-D contiguous native-endian array; the shape travels in the header.
    flat = np.ascontiguousarray(array, dtype=_STORAGE[latent_dtype]).reshape(-1)
    payload: bytes = standalone.simple_compress(flat, ChunkConfig())
    header = {
        "codec": "pcodec",
        "dtype": latent_dtype.value,
        "shape": [int(n) for n in array.shape],
        "family": family,
        "k": k,
        "payload_bytes": len(payload),
        "payload_crc32": zlib.crc32(payload),
    }
    header_bytes = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    return _PREFIX.pack(MAGIC, FORMAT_VERSION, len(header_bytes)) + header_bytes + payload


def decode_latent(data: bytes) -> DecodedLatent:
    """Read a blob written by `encode_latent` of this or any earlier format version.

    Raises CodecError (bad magic, unknown version, truncated or corrupt data) naming what
    was found and what is supported.
    """
    if len(data) < _PREFIX.size:
        raise CodecError(
            f"latent blob truncated: {len(data)} bytes, shorter than its {_PREFIX.size}-byte prefix"
        )
    magic, version, header_length = _PREFIX.unpack_from(data)
    if magic != MAGIC:
        raise CodecError(f"not a Reprise latent blob: starts with {bytes(magic)!r}, expected {MAGIC!r}")
    decoder = _DECODERS.get(version)
    if decoder is None:
        supported = ", ".join(str(v) for v in sorted(_DECODERS))
        raise CodecError(
            f"latent blob has format version {version}; this Reprise reads versions {supported} "
            "(a newer Reprise wrote it: upgrade to read it)"
        )
    return decoder(memoryview(data)[_PREFIX.size :], header_length, version)


def _decode_v1(body: memoryview, header_length: int, version: int) -> DecodedLatent:
    if header_length > _MAX_HEADER_BYTES or header_length > len(body):
        raise CodecError(
            f"latent blob truncated or corrupt: header of {header_length} bytes, {len(body)} left"
        )
    header = _parse_header(bytes(body[:header_length]))
    payload = bytes(body[header_length:])

    codec = _field(header, "codec", str)
    if codec != "pcodec":
        raise CodecError(f"latent blob payload codec {codec!r} is unknown; v1 supports 'pcodec'")
    try:
        latent_dtype = LatentDtype(_field(header, "dtype", str))
    except ValueError:
        raise CodecError(f"latent blob dtype {header['dtype']!r} is unknown") from None
    shape = _field(header, "shape", list)
    if not all(type(n) is int and n >= 0 for n in shape):
        raise CodecError(f"latent blob shape {shape!r} is not a list of non-negative integers")
    family = _field(header, "family", str)
    k = header.get("k")
    _check_k(k, CodecError)
    if len(payload) != _field(header, "payload_bytes", int):
        raise CodecError(
            f"latent blob truncated or corrupt: payload is {len(payload)} bytes, "
            f"header says {header['payload_bytes']}"
        )
    if zlib.crc32(payload) != _field(header, "payload_crc32", int):
        raise CodecError("latent blob corrupt: payload checksum (crc32) does not match the header")

    storage = _STORAGE[latent_dtype]
    count = int(np.prod(shape, dtype=np.int64))
    try:
        flat = standalone.simple_decompress(payload)
    except RuntimeError as error:  # pcodec reports corrupt data as RuntimeError
        raise CodecError(f"latent blob payload cannot be decompressed: {error}") from None
    if flat is None:  # pcodec returns None for an empty file without a dtype
        flat = np.empty(0, dtype=storage)
    if flat.dtype != storage or flat.size != count:
        raise CodecError(
            f"latent blob payload holds {flat.size} {flat.dtype} values; "
            f"the header says {count} ({latent_dtype.value}, shape {shape})"
        )
    return DecodedLatent(
        array=flat.reshape(shape), family=family, k=k, dtype=latent_dtype.value, version=version
    )


_DECODERS = {1: _decode_v1}


def _latent_dtype(array: npt.NDArray[Any], dtype: str | None) -> LatentDtype:
    accepted = ", ".join(d.value for d in LatentDtype)
    if not isinstance(array, np.ndarray):
        raise LatentError(f"a latent must be a numpy array, got {type(array).__name__}")
    if dtype is None:
        if array.dtype.kind == "u" and array.dtype.itemsize == 2:
            raise LatentError("a uint16 latent is ambiguous: pass dtype='bfloat16' if it holds bfloat16 bits")
        try:
            latent_dtype = LatentDtype(array.dtype.name)
        except ValueError:
            raise LatentError(
                f"latent dtype {array.dtype.name} is not supported; use one of {accepted}"
            ) from None
    else:
        try:
            latent_dtype = LatentDtype(dtype)
        except ValueError:
            raise LatentError(f"latent dtype {dtype!r} is not supported; use one of {accepted}") from None
    # Byte order aside, the array must already hold the storage dtype: casting would not be lossless.
    if array.dtype.newbyteorder("=") != _STORAGE[latent_dtype]:
        raise LatentError(
            f"a {latent_dtype.value} latent must be a {_STORAGE[latent_dtype].name} array, "
            f"got {array.dtype.name}"
        )
    return latent_dtype


def _check_k(k: object, error: type[Exception]) -> None:
    if k is not None and (type(k) is not int or k < 0):
        raise error(f"k must be a non-negative integer step or None for a final latent, got {k!r}")


def _parse_header(raw: bytes) -> dict[str, Any]:
    try:
        header = json.loads(raw.decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CodecError(f"latent blob header is not valid JSON: {error}") from None
    if not isinstance(header, dict):
        raise CodecError("latent blob header is not a JSON object")
    return header


def _field(header: dict[str, Any], name: str, kind: type[Any]) -> Any:
    value = header.get(name)
    if type(value) is not kind:
        raise CodecError(f"latent blob header field {name!r} is missing or not a {kind.__name__}: {value!r}")
    return value
