"""The latent codec: bit-exact round trips, the v1 format on disk, and clear errors."""

from __future__ import annotations

import json
import struct
import zlib
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from core.errors import CodecError, LatentError
from db.codec.framing import FORMAT_VERSION
from db.codec.latent import MAGIC, DecodedLatent, decode_latent, encode_latent

PREFIX = struct.Struct("<4sHI")  # magic, version, header length: the fixed part of every version

# Written by format version 1; later versions must keep reading it (DESIGN: read old data after
# an upgrade). float32 [[1.5, -0.0], [inf, NaN with payload 1]], family tiny-sd, k 5.
GOLDEN_V1 = bytes.fromhex(
    "52504c540100790000007b22636f646563223a2270636f646563222c226474797065223a22666c6f61743332222c2266"
    "616d696c79223a2274696e792d7364222c226b223a352c227061796c6f61645f6279746573223a34302c227061796c6f"
    "61645f6372633332223a323630353137383932362c227368617065223a5b322c325d7d70636f21030002010401050300"
    "00001000f8fffffffb000100c03f000000400000e05f0000f80f00"
)

FLOAT_BITS = {np.float16: np.uint16, np.float32: np.uint32, np.float64: np.uint64}
# -0.0, +inf, -inf, quiet NaN, NaN with a payload, negative NaN, smallest subnormal, as bit patterns
SPECIALS: dict[Any, list[int]] = {
    np.float16: [0x8000, 0x7C00, 0xFC00, 0x7E00, 0x7C01, 0xFE01, 0x0001],
    np.float32: [0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0xFFC12345, 0x00000001],
    np.float64: [1 << 63, 0x7FF0 << 48, 0xFFF0 << 48, 0x7FF8 << 48, (0x7FF0 << 48) | 1, 0xFFF8 << 48 | 7, 1],
}
BF16_SPECIALS = [0x8000, 0x7F80, 0xFF80, 0x7FC0, 0x7F81, 0xFFC1, 0x0001]


def _random_bits(rng: np.random.Generator, bits_dtype: Any, shape: tuple[int, ...]) -> npt.NDArray[Any]:
    """Uniform random bit patterns: every class of float (NaNs with payloads, subnormals) shows up."""
    info = np.iinfo(bits_dtype)
    return rng.integers(0, info.max, size=shape, dtype=bits_dtype, endpoint=True)


def _with_specials(bits: npt.NDArray[Any], specials: list[int]) -> npt.NDArray[Any]:
    flat = bits.reshape(-1).copy()
    flat[: len(specials)] = specials
    return flat.reshape(bits.shape)


def _reframe(blob: bytes, *, version: int | None = None, **header_changes: Any) -> bytes:
    """The blob with its version or header fields changed, the length field kept consistent."""
    magic, old_version, length = PREFIX.unpack_from(blob)
    header = json.loads(blob[PREFIX.size : PREFIX.size + length])
    header.update(header_changes)
    raw = json.dumps(header).encode()
    payload = blob[PREFIX.size + length :]
    return PREFIX.pack(magic, old_version if version is None else version, len(raw)) + raw + payload


def _small_blob() -> bytes:
    return encode_latent(np.arange(24, dtype=np.float32).reshape(2, 3, 4), family="tiny-sd", k=10)


# --- bit-exact round trips ---------------------------------------------------------------


@pytest.mark.parametrize("float_dtype", [np.float16, np.float32, np.float64])
def test_float_latents_round_trip_bit_for_bit(float_dtype: Any) -> None:
    bits_dtype = FLOAT_BITS[float_dtype]
    bits = _with_specials(
        _random_bits(np.random.default_rng(0), bits_dtype, (2, 4, 16, 16)), SPECIALS[float_dtype]
    )
    latent = bits.view(float_dtype)

    decoded = decode_latent(encode_latent(latent, family="sd15", k=10))

    assert decoded.array.dtype == np.dtype(float_dtype)
    assert decoded.array.shape == latent.shape
    np.testing.assert_array_equal(decoded.array.view(bits_dtype), bits)
    assert decoded.dtype == np.dtype(float_dtype).name


def test_bfloat16_travels_as_uint16_bits_and_round_trips_bit_for_bit() -> None:
    bits = _with_specials(_random_bits(np.random.default_rng(1), np.uint16, (1, 4, 32, 32)), BF16_SPECIALS)

    decoded = decode_latent(encode_latent(bits, family="flux", k=None, dtype="bfloat16"))

    assert decoded.dtype == "bfloat16"
    assert decoded.array.dtype == np.uint16
    np.testing.assert_array_equal(decoded.array, bits)


def test_metadata_round_trips() -> None:
    latent = np.zeros((1, 4, 8, 8), dtype=np.float32)

    state = decode_latent(encode_latent(latent, family="tiny-sd", k=25))
    final = decode_latent(encode_latent(latent, family="sdxl-base", k=None))

    assert state == DecodedLatent(array=state.array, family="tiny-sd", k=25, dtype="float32", version=1)
    assert not state.is_final
    assert (final.family, final.k, final.is_final, final.version) == ("sdxl-base", None, True, FORMAT_VERSION)


@pytest.mark.parametrize("shape", [(), (0,), (0, 4, 8, 8), (7,), (3, 1, 5)])
def test_any_shape_round_trips(shape: tuple[int, ...]) -> None:
    latent = np.random.default_rng(2).standard_normal(shape).astype(np.float32)

    decoded = decode_latent(encode_latent(latent, family="tiny-sd", k=1))

    assert decoded.array.shape == shape
    np.testing.assert_array_equal(decoded.array, latent)


def test_non_contiguous_and_big_endian_arrays_keep_their_values() -> None:
    base = np.random.default_rng(3).standard_normal((4, 6, 8)).astype(np.float32)
    transposed = base.transpose(2, 0, 1)[:, ::2]
    big_endian = base.astype(">f4")

    decoded_transposed = decode_latent(encode_latent(transposed, family="f", k=1)).array
    decoded_big_endian = decode_latent(encode_latent(big_endian, family="f", k=1)).array

    np.testing.assert_array_equal(decoded_transposed, transposed)
    assert decoded_big_endian.dtype == np.dtype("=f4")
    np.testing.assert_array_equal(decoded_big_endian.view(np.uint32), base.view(np.uint32))


def test_smooth_latents_are_stored_smaller_than_raw() -> None:
    # Latents are spatially smooth; random walks along the last axis stand in for one.
    steps = np.random.default_rng(4).standard_normal((1, 4, 64, 64))
    latent = (np.cumsum(steps, axis=-1) * 0.05).astype(np.float32)

    blob = encode_latent(latent, family="tiny-sd", k=5)

    assert len(blob) < 0.85 * latent.nbytes


# --- the stored format -------------------------------------------------------------------


def test_golden_v1_blob_still_decodes() -> None:
    decoded = decode_latent(GOLDEN_V1)

    assert (decoded.family, decoded.k, decoded.dtype, decoded.version) == ("tiny-sd", 5, "float32", 1)
    expected_bits = np.array([[0x3FC00000, 0x80000000], [0x7F800000, 0x7FC00001]], dtype=np.uint32)
    np.testing.assert_array_equal(decoded.array.view(np.uint32), expected_bits)


def test_header_is_self_describing_json_after_the_fixed_prefix() -> None:
    blob = _small_blob()
    magic, version, length = PREFIX.unpack_from(blob)
    header = json.loads(blob[PREFIX.size : PREFIX.size + length])

    assert (magic, version) == (MAGIC, 1)
    assert header["dtype"] == "float32"
    assert header["shape"] == [2, 3, 4]
    assert (header["family"], header["k"], header["codec"]) == ("tiny-sd", 10, "pcodec")
    assert header["payload_bytes"] == len(blob) - PREFIX.size - length


def test_unknown_header_fields_are_ignored() -> None:
    blob = _reframe(_small_blob(), written_by="reprise 9.0", note={"x": 1})

    np.testing.assert_array_equal(decode_latent(blob).array, np.arange(24, dtype=np.float32).reshape(2, 3, 4))


# --- errors ------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 2, 65535])
def test_unknown_version_names_the_found_and_supported_versions(version: int) -> None:
    with pytest.raises(CodecError, match=rf"version {version}; this Reprise reads versions 1\b"):
        decode_latent(_reframe(_small_blob(), version=version))


def test_bad_magic_is_refused() -> None:
    with pytest.raises(CodecError, match="not a Reprise latent blob"):
        decode_latent(b"\x89PNG\r\n\x1a\n" + _small_blob()[8:])


def test_every_truncation_is_a_codec_error() -> None:
    blob = _small_blob()

    for length in range(len(blob)):
        with pytest.raises(CodecError):
            decode_latent(blob[:length])


def test_a_flipped_payload_bit_is_caught() -> None:
    blob = bytearray(_small_blob())
    blob[-3] ^= 0x10

    with pytest.raises(CodecError, match="checksum"):
        decode_latent(bytes(blob))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"dtype": "int8"}, "dtype"),
        ({"codec": "zstd"}, "codec"),
        ({"shape": [5, 5]}, "payload holds 24"),
        ({"shape": [2, -3, -4]}, "shape"),
        ({"shape": "2x3x4"}, "shape"),
        ({"family": None}, "family"),
        ({"k": -1}, "k must be"),
        ({"k": "5"}, "k must be"),
        ({"payload_crc32": 0}, "checksum"),
    ],
)
def test_inconsistent_headers_are_codec_errors(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(CodecError, match=message):
        decode_latent(_reframe(_small_blob(), **changes))


def test_a_header_that_is_not_json_is_a_codec_error() -> None:
    blob = _small_blob()
    _, _, length = PREFIX.unpack_from(blob)
    garbled = blob[: PREFIX.size] + b"\xff" * length + blob[PREFIX.size + length :]

    with pytest.raises(CodecError, match="header"):
        decode_latent(garbled)


def test_pcodec_corruption_with_a_matching_checksum_is_a_codec_error() -> None:
    blob = _small_blob()
    _, _, length = PREFIX.unpack_from(blob)
    payload = b"not pcodec at all"
    forged = _reframe(
        blob[: PREFIX.size + length], payload_bytes=len(payload), payload_crc32=zlib.crc32(payload)
    )

    with pytest.raises(CodecError, match="decompress"):
        decode_latent(forged + payload)


@pytest.mark.parametrize(
    ("array", "dtype", "message"),
    [
        (np.zeros(4, dtype=np.int32), None, "int32 is not supported"),
        (np.zeros(4, dtype=np.uint16), None, "dtype='bfloat16'"),
        (np.zeros(4, dtype=np.float32), "bfloat16", "must be a uint16 array"),
        (np.zeros(4, dtype=np.float32), "float16", "must be a float16 array"),
        (np.zeros(4, dtype=np.float32), "int8", "'int8' is not supported"),
    ],
)
def test_unsupported_or_mismatched_dtypes_are_refused(array: Any, dtype: str | None, message: str) -> None:
    with pytest.raises(LatentError, match=message):
        encode_latent(array, family="tiny-sd", k=1, dtype=dtype)


def test_a_list_is_not_a_latent() -> None:
    with pytest.raises(LatentError, match="numpy array"):
        encode_latent([1.0, 2.0], family="tiny-sd", k=1)  # type: ignore[arg-type]


@pytest.mark.parametrize(("family", "k"), [("", 1), ("tiny-sd", -1), ("tiny-sd", True), ("tiny-sd", 2.0)])
def test_bad_family_or_step_is_refused(family: str, k: Any) -> None:
    with pytest.raises(ValueError):
        encode_latent(np.zeros(4, dtype=np.float32), family=family, k=k)
