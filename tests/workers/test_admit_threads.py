"""REPRISE_ADMIT_THREADS: an admit worker with threads runs Celery's threads pool and batches its prompts'
embeddings; with 1 (the default), and for every other role (GPU roles without batching:
tests/workers/test_batch_loop.py), the prefork pool and a plain embedder."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from core.errors import SettingsError
from core.settings import Settings, load_settings
from core.vocabulary import Role
from tests.support.dispatch import RecordingDispatcher
from workers.bootstrap import pool_arguments
from workers.context import WorkerContext
from workers.runtime.embedders import Embeddings, TextEmbedder
from workers.runtime.embedders.batching import BatchingEmbedder


class Ones(TextEmbedder):
    name = "ones"

    @property
    def dim(self) -> int:
        return 4

    def embed_text(self, texts: Sequence[str]) -> Embeddings:
        return np.full((len(texts), 4), 0.5, dtype=np.float32)


def settings_with(tmp_path: Path, **overrides: object) -> Settings:
    return load_settings(data_dir=tmp_path, **overrides)


def test_the_settings_are_read_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("REPRISE_ADMIT_THREADS", "4")
    monkeypatch.setenv("REPRISE_EMBED_BATCH_MAX", "16")
    monkeypatch.setenv("REPRISE_EMBED_BATCH_WAIT_MS", "2.5")
    settings = settings_with(tmp_path)
    assert (settings.admit_threads, settings.embed_batch_max, settings.embed_batch_wait_ms) == (4, 16, 2.5)
    with pytest.raises(SettingsError, match="REPRISE_ADMIT_THREADS"):
        settings_with(tmp_path, admit_threads=0)


def test_only_an_admit_worker_with_threads_runs_the_threads_pool(tmp_path: Path) -> None:
    threaded = settings_with(tmp_path, admit_threads=4, max_batch=1)
    assert pool_arguments(Role.ADMIT, threaded, 1) == ["--pool=threads", "--concurrency=4"]
    assert pool_arguments(Role.ADMIT, settings_with(tmp_path), 2) == ["--pool=prefork", "--concurrency=2"]
    for role in (Role.LARGE, Role.SMALL, Role.DECODE, Role.IO):
        assert pool_arguments(role, threaded, 1) == ["--pool=prefork", "--concurrency=1"]
    with pytest.raises(SettingsError, match="one worker per process"):
        pool_arguments(Role.ADMIT, threaded, 2)


def query_embedder(settings: Settings, role: Role) -> object:
    context = WorkerContext(settings, role, dispatcher=RecordingDispatcher())
    context._text_embedder = context._image_embedder = Ones()  # the query side of either lookup mode
    return context.query_embedder()


def test_an_admit_context_with_threads_batches_its_query_embedder(tmp_path: Path) -> None:
    batched = query_embedder(
        settings_with(tmp_path, admit_threads=4, embed_batch_max=6, embed_batch_wait_ms=3), Role.ADMIT
    )
    assert isinstance(batched, BatchingEmbedder)
    assert (
        isinstance(batched.inner, Ones)
        and batched.max_batch == 6
        and batched.max_wait_s == pytest.approx(0.003)
    )
    assert batched.embed_text(["a prompt"]).tolist() == [[0.5] * 4]
    assert isinstance(query_embedder(settings_with(tmp_path), Role.ADMIT), Ones)  # one thread
    assert isinstance(
        query_embedder(settings_with(tmp_path, admit_threads=4, embed_batch_max=1), Role.ADMIT), Ones
    )
    assert isinstance(query_embedder(settings_with(tmp_path, admit_threads=4), Role.LARGE), Ones)
