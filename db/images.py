"""Encode a decoded image as PNG, WebP or JPEG, the formats a client can ask for."""

from __future__ import annotations

import io
from enum import StrEnum

from PIL import Image

from core.errors import ImageFormatError

# Lossy settings: quality 90 keeps diffusion output visually intact at a fraction of PNG's size.
JPEG_QUALITY = 90
WEBP_QUALITY = 90


class ImageFormat(StrEnum):
    """The value is also the file extension in blob keys (db/blobs/keys.image_key)."""

    PNG = "png"
    WEBP = "webp"
    JPEG = "jpeg"

    @property
    def media_type(self) -> str:
        return f"image/{self.value}"


_ALIASES = {"jpg": ImageFormat.JPEG}


def parse_image_format(value: str) -> ImageFormat:
    """The format a client named, case-insensitively ('jpg' means jpeg).

    Raises ImageFormatError (field "format") naming the accepted formats.
    """
    name = value.strip().lower() if isinstance(value, str) else ""
    if name in _ALIASES:
        return _ALIASES[name]
    try:
        return ImageFormat(name)
    except ValueError:
        accepted = ", ".join(fmt.value for fmt in ImageFormat)
        raise ImageFormatError(
            f"image format {value!r} is not supported; accepted formats: {accepted}", field="format"
        ) from None


def encode_image(image: Image.Image, fmt: ImageFormat | str) -> bytes:
    """The image encoded in fmt (an ImageFormat or a name `parse_image_format` accepts).

    PNG is lossless and keeps an alpha channel; WebP and JPEG are lossy. JPEG has no alpha, so
    other modes are converted to RGB (alpha dropped). Raises ImageFormatError for an unknown fmt.
    """
    fmt = parse_image_format(fmt)
    buffer = io.BytesIO()
    if fmt is ImageFormat.PNG:
        image.save(buffer, format="PNG")
    elif fmt is ImageFormat.WEBP:
        image.save(buffer, format="WEBP", quality=WEBP_QUALITY)
    else:
        if image.mode not in ("RGB", "L"):
            image = image.convert("RGB")
        image.save(buffer, format="JPEG", quality=JPEG_QUALITY)
    return buffer.getvalue()
