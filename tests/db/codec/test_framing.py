"""The blob framing both codecs share: what it writes, and what it refuses before a codec reads."""

from __future__ import annotations

import json

import pytest

from core.errors import CodecError
from db.codec.framing import PREFIX, read_frame, write_frame


def test_a_frame_reads_back_with_its_length_and_checksum_in_the_header() -> None:
    blob = write_frame(b"TEST", {"codec": "none", "n": 3}, b"payload")

    frame = read_frame(blob, magic=b"TEST", what="test", max_header_bytes=1024)

    assert (frame.version, frame.payload) == (1, b"payload")
    assert frame.header["n"] == 3 and frame.header["payload_bytes"] == len(b"payload")
    magic, version, length = PREFIX.unpack_from(blob)
    assert (magic, version) == (b"TEST", 1)
    assert json.loads(blob[PREFIX.size : PREFIX.size + length]) == frame.header  # sorted, compact JSON


@pytest.mark.parametrize(
    ("blob", "message"),
    [
        (b"TE", "test blob truncated"),
        (PREFIX.pack(b"ELSE", 1, 0), "not a Reprise test blob"),
        (PREFIX.pack(b"TEST", 9, 0), "format version 9; this Reprise reads versions 1"),
        (PREFIX.pack(b"TEST", 1, 4096), "header of 4096 bytes"),
        (PREFIX.pack(b"TEST", 1, 2) + b"[]", "not a JSON object"),
    ],
)
def test_a_broken_frame_is_a_codec_error_naming_the_codec(blob: bytes, message: str) -> None:
    with pytest.raises(CodecError, match=message):
        read_frame(blob, magic=b"TEST", what="test", max_header_bytes=1024)


def test_a_payload_that_does_not_match_its_checksum_is_refused() -> None:
    blob = bytearray(write_frame(b"TEST", {}, b"payload"))
    blob[-1] ^= 0xFF

    with pytest.raises(CodecError, match="checksum"):
        read_frame(bytes(blob), magic=b"TEST", what="test", max_header_bytes=1024)
