"""An image job (core.vocabulary.JobKind.IMAGE): its admission (admission), its runs on the role's
model (generation) and the cache entries they fill (cache_fill), behind workers.kinds.base.Kind."""

from __future__ import annotations

from db.codec.latent import DecodedLatent
from db.images import encode_image, parse_image_format
from workers.context import WorkerContext
from workers.job import JobView
from workers.kinds.base import Admitted, StageTimer
from workers.kinds.image.admission import admit_image
from workers.kinds.image.generation import generate_run, reuse_run
from workers.lease import LeaseKeeper


class ImageKind:
    """An image job: NIRVANA's or MoDM's lookup and hit, a PNG (or another image format) on read."""

    cascades = True

    def admit(self, context: WorkerContext, job: JobView, timer: StageTimer) -> Admitted:
        return admit_image(context, job, timer)

    def generate(self, context: WorkerContext, job: JobView, lease: LeaseKeeper) -> None:
        generate_run(context, job, lease)

    def reuse(self, context: WorkerContext, job: JobView, lease: LeaseKeeper) -> None:
        reuse_run(context, job, lease)

    def decode(self, context: WorkerContext, latent: DecodedLatent, fmt: str) -> bytes:
        decoded = context.runtime().decode(latent.array, family=latent.family)
        return encode_image(decoded.image, parse_image_format(fmt))
