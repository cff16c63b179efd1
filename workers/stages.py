"""Where a job's run spends its worker's time, by stage (DESIGN, "What counts as work done").

A GPU task opens a StageClock for its job (`job_stages`); the code that does each kind of work times
itself with `stage(name)`, wherever it is (the runtime, the cache fill, the completion), without the
clock being passed down: it lives in a context variable of the task's thread. Stages nest exclusively:
time spent in an inner stage is not also the outer one's, so the stages of a run add up to the time
they cover and none is counted twice.

The stages, in a run's order:

    claim          the job's claim and lease (one transaction), its start announced
    read           a hit's cached item: its row, its blob, its codec
    encode_prompt  the text encoder                                     (a model call)
    denoise        the job's share of its denoising steps' UNet calls   (a model call)
    vae_decode     latents to pixels                                    (a model call)
    vae_encode     pixels to latents (a refine across latent families)  (a model call)
    score          the configured scorer's reading of the image
    store          the final latent's codec and blob, an eager request's image
    cache_fill     the cache entry: embeddings, codecs, room in the budget, blobs, its row
    complete       the completion's transaction
    notify         the end announced, the webhook queued

`denoise` is the job's share of the steps it took part in: a step-level batch's call divided among its
members by their UNet rows (workers.runtime.batching), not the time the job's thread waited for it. The
device time of a job is the sum of its model calls (core.vocabulary.device_ms); the rest is the platform's.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from core.vocabulary import in_stage_order


class StageClock:
    """Milliseconds per stage of one job's run; stages timed by `timing` nest exclusively."""

    def __init__(self) -> None:
        self.ms: dict[str, float] = {}
        self._open: list[tuple[str, float]] = []  # the stages being timed, innermost last, since when

    def add(self, stage: str, ms: float) -> None:
        self.ms[stage] = self.ms.get(stage, 0.0) + max(ms, 0.0)

    @contextmanager
    def timing(self, stage: str) -> Iterator[None]:
        """Time the block as `stage`, pausing the stage it runs inside."""
        now = time.perf_counter()
        if self._open:  # the outer stage's time so far is its own
            outer, since = self._open[-1]
            self.add(outer, (now - since) * 1e3)
        self._open.append((stage, now))
        try:
            yield
        finally:
            ended = time.perf_counter()
            _, since = self._open.pop()
            self.add(stage, (ended - since) * 1e3)
            if self._open:  # the outer stage goes on from here
                self._open[-1] = (self._open[-1][0], ended)

    def so_far(self) -> dict[str, float]:
        """The stages in their run's order (core.vocabulary.JOB_STAGES), to the microsecond, the open one
        with its time until now (what a completion records while its own stage runs)."""
        now = time.perf_counter()
        ms = dict(self.ms)
        if self._open:  # only the innermost open stage is running; the outer ones are paused
            name, since = self._open[-1]
            ms[name] = ms.get(name, 0.0) + (now - since) * 1e3
        return in_stage_order({name: round(value, 3) for name, value in ms.items()})


_CLOCK: ContextVar[StageClock | None] = ContextVar("reprise_stage_clock", default=None)


@contextmanager
def job_stages() -> Iterator[StageClock]:
    """A clock for the job run in this block (this thread): `stage` and `add` time into it."""
    clock = StageClock()
    token = _CLOCK.set(clock)
    try:
        yield clock
    finally:
        _CLOCK.reset(token)


def current() -> StageClock | None:
    """The clock of the job this thread runs; None outside a job's run."""
    return _CLOCK.get()


@contextmanager
def stage(name: str) -> Iterator[None]:
    """Time the block as stage `name` of the running job; outside a job's run, only run it."""
    clock = _CLOCK.get()
    if clock is None:
        yield
        return
    with clock.timing(name):
        yield


def add(name: str, ms: float) -> None:
    """Book `ms` to stage `name` of the running job (a share measured elsewhere: a batch's step)."""
    clock = _CLOCK.get()
    if clock is not None:
        clock.add(name, ms)
