"""The latent codec: a latent array <-> self-describing bytes, losslessly compressed by pcodec.

LatentBox (papers/latentbox-latent-first-storage.txt, 5) stores latents with pcodec because it
models floating-point arrays; byte-stream compressors (zstd, LZ4) cannot exploit their smoothness.

Blob layout: db.codec.framing's frame under magic b"RPLT", whose header is::

    {"codec": "pcodec", "dtype": "float32", "shape": [1, 4, 64, 64],
     "family": "tiny-sd", "k": 5,          # k is null for a final latent
     "payload_bytes": 12345, "payload_crc32": 305419896}

and whose payload is one pcodec standalone file holding the elements in C order. pcodec's standalone
file carries its own format version, and newer pcodec releases read files written by older ones.

bfloat16: numpy has no bfloat16, so a bf16 latent travels as its raw bits in a uint16 array,
tagged dtype="bfloat16" (encode with `dtype="bfloat16"`; decode returns the uint16 bits and
`DecodedLatent.dtype == "bfloat16"`). With torch, outside db/:
`t.view(torch.int16).numpy().view(np.uint16)` to encode and
`torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16)` after decoding. pcodec compresses
the bits as uint16, which is exact and, on smooth latents, as small as widening to float32 first.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np
import numpy.typing as npt
from pcodec import ChunkConfig, standalone

from core.errors import CodecError, LatentError
from db.codec.framing import header_field, read_frame, write_frame

MAGIC = b"RPLT"
_WHAT = "latent"
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
    }
    return write_frame(MAGIC, header, payload)


def decode_latent(data: bytes) -> DecodedLatent:
    """Read a blob written by `encode_latent` of this or any earlier format version.

    Raises CodecError (bad magic, unknown version, truncated or corrupt data) naming what
    was found and what is supported.
    """
    frame = read_frame(data, magic=MAGIC, what=_WHAT, max_header_bytes=_MAX_HEADER_BYTES)
    header, payload = frame.header, frame.payload
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
        array=flat.reshape(shape), family=family, k=k, dtype=latent_dtype.value, version=frame.version
    )


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


def _field(header: dict[str, Any], name: str, kind: type[Any]) -> Any:
    return header_field(header, name, kind, _WHAT)
