"""The kinds of job: an image job and a video job are two kinds of one job. Each implements one
interface (base.Kind: admit, generate with capture, resume from the cache, decode for a read) in its
own package (image, video); the task bodies look the kind up here, once, from the job's kind or from
the format of an output read."""

from __future__ import annotations

from core.vocabulary import JobKind
from db.images import video_fps
from workers.kinds.base import Kind
from workers.kinds.image import ImageKind
from workers.kinds.video import VideoKind

KINDS: dict[JobKind, Kind] = {JobKind.IMAGE: ImageKind(), JobKind.VIDEO: VideoKind()}


def kind_of(kind: str) -> Kind:
    """The implementation of a job's kind (its row's `kind`)."""
    return KINDS[JobKind(kind)]


def kind_of_output(fmt: str) -> Kind:
    """The kind of job whose output `fmt` is (db.images: a video format names its frame rate)."""
    return KINDS[JobKind.VIDEO if video_fps(fmt) is not None else JobKind.IMAGE]
