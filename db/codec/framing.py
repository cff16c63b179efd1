"""The one blob framing every latent codec writes and reads: a fixed prefix, a JSON header, a payload.

Format, version 1 (all integers little-endian)::

    offset  size  field
    0       4     magic: the codec's and the blob's kind (b"RPLT" a latent, b"RPVS"/b"RPVB" video)
    4       2     format version (uint16): 1, or the codec's later version (db.codec.video: 2)
    6       4     header length H (uint32)
    10      H     header: a UTF-8 JSON object, keys sorted, no spaces; it always holds
                  "payload_bytes" and "payload_crc32", the rest is the codec's
    10+H    rest  payload: the codec's compressed arrays

Magic, version and header length sit at the same offsets in every version, so any later reader can
tell what it holds (DESIGN: storage keys and codec headers carry enough to read old data). Readers
ignore header keys they do not know; a change of layout is a new version read beside the old ones:
a codec writes its newest version and passes read_frame every version it still reads.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass
from typing import Any

from core.errors import CodecError

FORMAT_VERSION = 1
PREFIX = struct.Struct("<4sHI")  # magic, version, header length
READS_VERSIONS = (1,)


@dataclass(frozen=True, slots=True)
class Frame:
    """A blob's format version, its header (checked to describe its payload) and its payload."""

    version: int
    header: dict[str, Any]
    payload: bytes


def write_frame(
    magic: bytes, header: dict[str, Any], payload: bytes, *, version: int = FORMAT_VERSION
) -> bytes:
    """The framed blob: `header` with the payload's length and checksum added, then the payload."""
    header = header | {"payload_bytes": len(payload), "payload_crc32": zlib.crc32(payload)}
    raw = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    return PREFIX.pack(magic, version, len(raw)) + raw + payload


def read_frame(
    data: bytes, *, magic: bytes, what: str, max_header_bytes: int, versions: tuple[int, ...] = READS_VERSIONS
) -> Frame:
    """The frame of a blob of any of `versions`. Raises CodecError naming `what` ("latent", "video
    state"...): truncated, another magic, an unknown version, a corrupt header or payload.
    `max_header_bytes`: a longer header length can only be corruption."""
    if len(data) < PREFIX.size:
        raise CodecError(
            f"{what} blob truncated: {len(data)} bytes, shorter than its {PREFIX.size}-byte prefix"
        )
    found, version, header_length = PREFIX.unpack_from(data)
    if found != magic:
        raise CodecError(f"not a Reprise {what} blob: starts with {bytes(found)!r}, expected {magic!r}")
    if version not in versions:
        supported = ", ".join(str(v) for v in versions)
        raise CodecError(
            f"{what} blob has format version {version}; this Reprise reads versions {supported} "
            "(a newer Reprise wrote it: upgrade to read it)"
        )
    body = memoryview(data)[PREFIX.size :]
    if header_length > max_header_bytes or header_length > len(body):
        raise CodecError(
            f"{what} blob truncated or corrupt: header of {header_length} bytes, {len(body)} left"
        )
    header = _parse_header(bytes(body[:header_length]), what)
    payload = bytes(body[header_length:])
    if len(payload) != header_field(header, "payload_bytes", int, what):
        raise CodecError(
            f"{what} blob truncated or corrupt: payload is {len(payload)} bytes, "
            f"header says {header['payload_bytes']}"
        )
    if zlib.crc32(payload) != header_field(header, "payload_crc32", int, what):
        raise CodecError(f"{what} blob corrupt: payload checksum (crc32) does not match the header")
    return Frame(version, header, payload)


def header_field(header: dict[str, Any], name: str, kind: type[Any], what: str) -> Any:
    """A header's field, which must be exactly of type `kind` (a bool is no int here)."""
    value = header.get(name)
    if type(value) is not kind:
        raise CodecError(f"{what} blob header field {name!r} is missing or not a {kind.__name__}: {value!r}")
    return value


def _parse_header(raw: bytes, what: str) -> dict[str, Any]:
    try:
        header = json.loads(raw.decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CodecError(f"{what} blob header is not valid JSON: {error}") from None
    if not isinstance(header, dict):
        raise CodecError(f"{what} blob header is not a JSON object")
    return header
