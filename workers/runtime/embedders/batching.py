"""Requests that arrive together are embedded together: one embedder shared by the threads of
an admit process, gathering their prompts into one call of the embedder it wraps.

The first caller of an idle batcher opens a batch and leads it: it waits at most `max_wait_ms` for other
callers (less once `max_batch` texts are in), closes the batch, runs one `embed_text` of the inner
embedder on every text and hands each caller its own rows. A caller arriving after its batch closed opens
the next one, whose leader runs it without waiting for the batch before (the embedders release the GIL
while they compute, so two batches can run on two cores). An error of the inner call, or a result of the
wrong shape, is raised in every caller of that batch, and every batch ends in a result or an error, so
no caller is left waiting. A lone caller pays at most `max_wait_ms` more than the inner call.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np

from core.embedders import Embeddings, TextEmbedder


@dataclass(eq=False)
class _Batch:
    """The texts of one or more callers and their one result."""

    texts: list[str] = field(default_factory=list)
    closed: bool = False
    result: Future[Embeddings] = field(default_factory=Future)

    def rows(self, start: int, count: int) -> Embeddings:
        """This caller's rows, once the batch has run (its error, if it failed)."""
        vectors = self.result.result()
        return np.array(vectors[start : start + count], dtype=np.float32)


@dataclass(frozen=True, slots=True)
class BatchStats:
    """Inner calls made and the texts they embedded (the mean batch size is their ratio)."""

    batches: int
    texts: int

    @property
    def mean_size(self) -> float:
        return self.texts / self.batches if self.batches else 0.0


class BatchingEmbedder(TextEmbedder):
    """Wraps `inner`: concurrent `embed_text` calls are served by shared calls of `inner.embed_text`."""

    def __init__(self, inner: TextEmbedder, *, max_batch: int, max_wait_ms: float) -> None:
        if max_batch < 1 or max_wait_ms < 0:
            raise ValueError(f"max_batch must be >= 1 and max_wait_ms >= 0, not {max_batch}, {max_wait_ms}")
        self.inner = inner
        self.name = inner.name
        self.max_batch = max_batch
        self.max_wait_s = max_wait_ms / 1e3
        self._changed = threading.Condition()
        self._open: _Batch | None = None
        self._batches = 0
        self._texts = 0

    @property
    def dim(self) -> int:
        return self.inner.dim

    def stats(self) -> BatchStats:
        with self._changed:
            return BatchStats(self._batches, self._texts)

    def embed_text(self, texts: Sequence[str]) -> Embeddings:
        items = list(texts)
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        batch, start, leads = self._join(items)
        if leads:
            self._lead(batch)
        return batch.rows(start, len(items))

    def _join(self, items: list[str]) -> tuple[_Batch, int, bool]:
        """Add a caller's texts to the open batch, or open one (then the caller leads it)."""
        with self._changed:
            batch, leads = self._open, False
            if batch is not None and len(batch.texts) + len(items) > self.max_batch:
                self._close(batch)  # full for this caller: its leader runs it now
                batch = None
            if batch is None:
                batch, leads = _Batch(), True
                self._open = batch
            start = len(batch.texts)
            batch.texts.extend(items)
            if len(batch.texts) >= self.max_batch:
                self._close(batch)
            return batch, start, leads

    def _close(self, batch: _Batch) -> None:
        """No caller joins `batch` any more; its leader stops waiting. Holding the condition."""
        batch.closed = True
        if self._open is batch:
            self._open = None
        self._changed.notify_all()

    def _lead(self, batch: _Batch) -> None:
        """Wait for the batch to fill or for max_wait, then run it: it ends in a result or an error."""
        try:
            deadline = time.monotonic() + self.max_wait_s
            with self._changed:
                while not batch.closed and (remaining := deadline - time.monotonic()) > 0:
                    self._changed.wait(remaining)
                self._close(batch)
                self._batches += 1
                self._texts += len(batch.texts)
            vectors = np.asarray(self.inner.embed_text(batch.texts), dtype=np.float32)
            if vectors.ndim != 2 or vectors.shape[0] != len(batch.texts):
                raise ValueError(
                    f"{self.inner.name} returned {vectors.shape} for a batch of {len(batch.texts)} texts"
                )
        except BaseException as error:  # every caller of the batch gets it, the leader too
            batch.result.set_exception(error)
        else:
            batch.result.set_result(vectors)
