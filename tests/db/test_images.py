"""Image encoding: the three formats a client can ask for, and a clear refusal of the rest."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from core.errors import ImageFormatError, InvalidInput
from db.images import ImageFormat, encode_image, parse_image_format

PIL_NAMES = {ImageFormat.PNG: "PNG", ImageFormat.WEBP: "WEBP", ImageFormat.JPEG: "JPEG"}


def _gradient(mode: str = "RGB", size: tuple[int, int] = (48, 32)) -> Image.Image:
    """A smooth image, like a decoded latent, so lossy formats have something fair to keep."""
    width, height = size
    x = np.linspace(0, 255, width)[None, :]
    y = np.linspace(0, 255, height)[:, None]
    rgb = np.stack([x + 0 * y, y + 0 * x, (x + y) / 2], axis=-1).astype(np.uint8)
    return Image.fromarray(rgb, mode="RGB").convert(mode)


def _open(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


@pytest.mark.parametrize("fmt", list(ImageFormat))
def test_each_format_encodes_a_readable_image_of_that_format(fmt: ImageFormat) -> None:
    source = _gradient()

    decoded = _open(encode_image(source, fmt))

    assert decoded.format == PIL_NAMES[fmt]
    assert decoded.size == source.size
    error = np.abs(np.asarray(decoded.convert("RGB"), dtype=int) - np.asarray(source, dtype=int))
    assert error.mean() < 3  # lossy formats stay close at the chosen quality


def test_png_is_lossless_and_keeps_alpha() -> None:
    source = _gradient("RGBA")
    source.putalpha(Image.linear_gradient("L").resize(source.size))

    decoded = _open(encode_image(source, ImageFormat.PNG))

    assert decoded.mode == "RGBA"
    assert decoded.tobytes() == source.tobytes()


@pytest.mark.parametrize("mode", ["RGBA", "P", "LA", "I;16"])
def test_jpeg_accepts_modes_it_cannot_store_by_converting_to_rgb(mode: str) -> None:
    decoded = _open(encode_image(_gradient(mode), ImageFormat.JPEG))

    assert decoded.format == "JPEG"
    assert decoded.mode == "RGB"


def test_media_types() -> None:
    assert {fmt.value: fmt.media_type for fmt in ImageFormat} == {
        "png": "image/png",
        "webp": "image/webp",
        "jpeg": "image/jpeg",
    }


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("png", ImageFormat.PNG),
        ("WebP", ImageFormat.WEBP),
        (" jpeg ", ImageFormat.JPEG),
        ("JPG", ImageFormat.JPEG),
    ],
)
def test_format_names_are_read_case_insensitively_with_jpg_as_jpeg(name: str, expected: ImageFormat) -> None:
    assert parse_image_format(name) is expected


@pytest.mark.parametrize("name", ["gif", "bmp", "", "png8", "image/png"])
def test_unknown_formats_are_invalid_input_naming_the_accepted_ones(name: str) -> None:
    with pytest.raises(ImageFormatError) as caught:
        parse_image_format(name)

    assert isinstance(caught.value, InvalidInput)
    assert caught.value.field == "format"
    assert "accepted formats: png, webp, jpeg" in str(caught.value)
    assert repr(name) in str(caught.value)


def test_encode_image_refuses_an_unknown_format() -> None:
    with pytest.raises(ImageFormatError, match="'tiff'"):
        encode_image(_gradient(), "tiff")
