"""A job's decoded images: the formats a client can ask for, their encoding (PNG, WebP, JPEG), and
where each decoded image of a job is recorded (jobs.image_keys: format -> blob key)."""

from __future__ import annotations

import io
import uuid
from dataclasses import dataclass
from enum import StrEnum

from PIL import Image
from sqlalchemy import func, update
from sqlalchemy.orm import Session

from core.errors import ImageFormatError
from db.models import Job

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


@dataclass(frozen=True, slots=True)
class JobImage:
    """What a job holds for one image format."""

    latent_key: str | None  # the job's final latent, None while it has none
    image_key: str | None  # the image decoded in the format asked for, None while there is none


def job_image(session: Session, job_id: uuid.UUID, fmt: str) -> JobImage | None:
    """The job's final latent and its decoded image in `fmt` (a format's value); None: no such job."""
    job = session.get(Job, job_id)
    if job is None:
        return None
    return JobImage(latent_key=job.final_latent_key, image_key=(job.image_keys or {}).get(fmt))


def decoded_image_key(session: Session, job_id: uuid.UUID, fmt: str) -> str | None:
    """The blob key of a job's decoded image in `fmt`; None while there is none (or no such job)."""
    found = job_image(session, job_id, fmt)
    return found.image_key if found is not None else None


def record_image_key(session: Session, job_id: uuid.UUID, fmt: str, key: str) -> None:
    """Record where the job's image in `fmt` is stored. jsonb || merges, so concurrent decodes of two
    formats both land."""
    session.execute(
        update(Job)
        .where(Job.id == job_id)
        .values(image_keys=Job.image_keys.op("||")(func.jsonb_build_object(fmt, key)))
    )


VIDEO_FORMAT_PREFIX = "video"


def video_format(fps: int) -> str:
    """The read path's name for a video job's output: its animated WebP at `fps`, e.g.
    'video8'. A decode node decodes such a read with the video model (workers.decoding); its tiers keep
    the WebP under this name like an image format."""
    if fps < 1:
        raise ValueError(f"fps must be at least 1, got {fps}")
    return f"{VIDEO_FORMAT_PREFIX}{fps}"


def video_fps(fmt: str) -> int | None:
    """The fps of a video_format name; None for an image format."""
    digits = fmt.removeprefix(VIDEO_FORMAT_PREFIX)
    return int(digits) if digits != fmt and digits.isdigit() and int(digits) >= 1 else None
