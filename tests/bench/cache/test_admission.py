"""`reprise bench admission` against the test database: with threads, the admitting threads of a process
share embedding calls (mean batch above 1), and every job is admitted, by one process or several."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence

import numpy as np
import pytest

import workers.runtime.embedders as embedders
from bench.cache.admission import AdmissionBenchOptions, run_admission_bench
from core.settings import Settings
from workers.runtime.embedders import Embeddings, TextEmbedder, l2_normalise


class SlowHashEmbedder(TextEmbedder):
    """A vector per text from its hash, after a few milliseconds of sleep per call (as a model's
    computation, with the GIL released): the bench's mechanics without loading a model."""

    name = "hash"

    def __init__(self, dim: int) -> None:
        self._dim = dim

    @property
    def dim(self) -> int:
        return self._dim

    def embed_text(self, texts: Sequence[str]) -> Embeddings:
        time.sleep(0.005)
        rows = [
            np.random.default_rng(int.from_bytes(hashlib.sha256(text.encode()).digest()[:8])).normal(
                size=self._dim
            )
            for text in texts
        ]
        return l2_normalise(np.array(rows, dtype=np.float32).reshape(len(texts), self._dim))


@pytest.fixture
def hash_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every context builds the hash embedder, in the bench's forked processes too."""
    monkeypatch.setattr(
        embedders, "build_text_embedder", lambda settings: SlowHashEmbedder(settings.text_embedding_dim)
    )


@pytest.mark.usefixtures("hash_embedder")
@pytest.mark.parametrize("processes", [1, 2])
def test_admitting_threads_embed_together_and_admit_every_job(db_settings: Settings, processes: int) -> None:
    options = AdmissionBenchOptions(
        jobs=20, processes=processes, threads=2, cached=20, repeats=0.0, batch_max=2, batch_wait_ms=500
    )
    report = run_admission_bench(db_settings, options)
    assert report["errors"] == []
    assert report["admitted"] == report["jobs"] == 20
    assert report["stages"]["embed"]["n"] == 20  # no repeats: every job was embedded
    batch = report["embed_batch"]
    assert batch is not None and batch["max"] == 2
    assert batch["mean_size"] > 1, batch  # the two threads of a process shared embedding calls
    assert batch["batches"] < 20
    assert report["admissions_per_s"] > 0 and report["admissions_per_s_per_core"] > 0


@pytest.mark.usefixtures("hash_embedder")
def test_one_thread_embeds_alone(db_settings: Settings) -> None:
    report = run_admission_bench(db_settings, AdmissionBenchOptions(jobs=6, cached=10, repeats=0.5))
    assert report["admitted"] == 6 and report["errors"] == []
    assert report["embed_batch"] is None  # one thread: no batching embedder
    assert sum(report["outcomes"].values()) == 6
