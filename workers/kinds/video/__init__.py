"""A video job (core.vocabulary.JobKind.VIDEO, FlexCache): its three lookups (admission), its runs on
the video model (generation) and the compressed entries they fill (cache_fill), behind
workers.kinds.base.Kind."""

from __future__ import annotations

from core.errors import CodecError
from db.codec.latent import DecodedLatent
from db.images import video_fps
from workers.context import WorkerContext
from workers.job import JobView
from workers.kinds.base import Admitted, StageTimer
from workers.kinds.video.admission import admit_video
from workers.kinds.video.generation import run_video_hit, run_video_miss
from workers.lease import LeaseKeeper


class VideoKind:
    """A video job: FlexCache's whole or decoupled lookup and hit, an animated WebP on read."""

    cascades = False  # no light video model: a video miss runs the video model

    def admit(self, context: WorkerContext, job: JobView, timer: StageTimer) -> Admitted:
        return admit_video(context, job, timer)

    def generate(self, context: WorkerContext, job: JobView, lease: LeaseKeeper) -> None:
        with context.video_lock:  # one video at a time, also in a GPU worker's batching threads
            run_video_miss(context, job, lease)

    def reuse(self, context: WorkerContext, job: JobView, lease: LeaseKeeper) -> None:
        with context.video_lock:
            run_video_hit(context, job, lease)

    def decode(self, context: WorkerContext, latent: DecodedLatent, fmt: str) -> bytes:
        fps = video_fps(fmt)
        if fps is None:
            raise CodecError(f"{fmt!r} is no video format")
        data, _ = context.video_runtime().to_webp(latent.array, fps)
        return data
