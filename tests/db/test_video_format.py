"""The read path's name of a video job's output (db.images.video_format), and back."""

from __future__ import annotations

import pytest

from db.blobs import keys
from db.images import video_format, video_fps


@pytest.mark.parametrize("fps", [1, 8, 60])
def test_a_video_format_names_its_fps_and_is_a_valid_blob_format(fps: int) -> None:
    fmt = video_format(fps)
    assert video_fps(fmt) == fps
    assert keys.image_key("0" * 32, fmt).endswith(f"image.video{fps}")


@pytest.mark.parametrize("fmt", ["png", "webp", "jpeg", "video", "video0", "videox", "xvideo8"])
def test_image_formats_and_malformed_names_have_no_fps(fmt: str) -> None:
    assert video_fps(fmt) is None


def test_fps_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="fps"):
        video_format(0)
