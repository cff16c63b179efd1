"""One denoising run of a job, stopped by its cancel flag or a lost lease: what the image and the video
task bodies (workers.generation, workers.video_generation) share."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from core.errors import GenerationCanceled, InvalidInput
from core.vocabulary import JobStatus
from db.engine import session_scope
from db.job_runs import is_cancel_requested
from workers.context import WorkerContext
from workers.lease import LeaseKeeper
from workers.progress import ProgressReporter
from workers.runtime.denoising import OnStep, ShouldStop
from workers.runtime.results import GenerationResult

CANCEL_POLL_S = 0.25  # how often a running job re-reads its cancel flag

Operation = Callable[[ShouldStop, OnStep], GenerationResult]
EndJob = Callable[[JobStatus, str | None], None]


def run_denoising(
    context: WorkerContext, job_id: uuid.UUID, lease: LeaseKeeper, operation: Operation, end: EndJob
) -> GenerationResult | None:
    """Run the denoising, reporting its progress; None when it stopped: canceled (`end` records it) or a
    lost lease (LeaseLost: the job runs again elsewhere), or its input was invalid (`end` fails it)."""
    last_poll = [0.0]

    def should_stop() -> bool:
        if lease.lost:
            return True
        now = time.monotonic()
        if now - last_poll[0] < CANCEL_POLL_S:
            return False
        last_poll[0] = now
        with session_scope(context.settings) as session:
            return is_cancel_requested(session, job_id)

    try:
        return operation(should_stop, ProgressReporter(context, job_id))
    except GenerationCanceled:
        lease.check()  # stopped for a lost lease: no cancel to record, the job runs again elsewhere
        end(JobStatus.CANCELED, None)
    except InvalidInput as invalid:
        end(JobStatus.FAILED, f"invalid input: {invalid}")
    return None
