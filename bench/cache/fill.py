"""Filling the cache index for `reprise bench cache`: scopes of skewed sizes, clustered embeddings.

Tenants' caches are not alike: a few hold most entries, most hold few (the Zipf law of tenant sizes,
s = 1). With S > 1 scopes the bench makes S tenant scopes sharing TENANT_SHARE of the entries by that
law (each at least one entry) plus a shared scope with the rest; every scope is "bench:<run>:<name>",
never a tenant's. Embeddings are unit vectors in clusters of about CLUSTER_SIZE (prompts iterate on each
other, DiffusionDB README), generated per scope (a tenant has topics of its own) and in chunks, so that a
million 768-d entries never sit in memory at once.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from core.settings import Settings
from core.vocabulary import EntryState
from db import cache
from db.blobs import keys
from db.engine import session_scope

BENCH_FAMILY = "bench"
STATE_BYTES = 4 * 64 * 64 * 2  # one SD-1.5 latent at 512 px in float16: 32 KiB
CLUSTER_SIZE = 20  # entries per neighbourhood of near-duplicate prompts
TENANT_SHARE = 0.9  # of the entries, in tenant scopes; the rest in the shared scope
ZIPF_S = 1.0
CHUNK = 20_000  # embeddings generated and inserted at a time
_BATCH = 500  # rows per INSERT


@dataclass(frozen=True, slots=True)
class BenchScope:
    name: str
    entries: int


def scope_sizes(entries: int, scopes: int) -> list[int]:
    """One scope of `entries`; or `scopes` tenant scopes by Zipf's law and a shared one (largest first)."""
    if scopes <= 1:
        return [entries]
    tenants = max(scopes, int(entries * TENANT_SHARE))
    weights = 1.0 / np.arange(1, scopes + 1) ** ZIPF_S
    raw = np.floor(weights / weights.sum() * (tenants - scopes)).astype(int) + 1
    raw[0] += tenants - scopes - int(raw.sum() - scopes)  # the rounding's remainder to the largest
    shared = entries - int(raw.sum())
    return sorted([int(size) for size in raw] + ([shared] if shared > 0 else []), reverse=True)


def bench_scopes(run: str, entries: int, scopes: int) -> list[BenchScope]:
    sizes = scope_sizes(entries, scopes)
    if scopes <= 1:
        return [BenchScope(f"bench:{run}", sizes[0])]
    names = [f"bench:{run}:t{index}" for index in range(len(sizes))]
    return [BenchScope(name, size) for name, size in zip(names, sizes, strict=True)]


def _unit(matrix: npt.NDArray[np.float64]) -> npt.NDArray[np.float32]:
    return np.asarray(matrix / np.linalg.norm(matrix, axis=1, keepdims=True), dtype=np.float32)


def synthetic_embeddings(n: int, dim: int, rng: np.random.Generator) -> npt.NDArray[np.float32]:
    """n unit vectors in clusters of about CLUSTER_SIZE around random centres (cosine ~0.8 within)."""
    centres = _unit(rng.normal(size=(max(1, n // CLUSTER_SIZE), dim)))
    members = centres[rng.integers(0, len(centres), size=n)]
    spread = _unit(rng.normal(size=(n, dim)))
    return _unit(0.9 * members + 0.45 * spread)


def near_duplicates(
    points: npt.NDArray[np.float32], cosine: float, rng: np.random.Generator
) -> npt.NDArray[np.float32]:
    """For each point, a unit vector at `cosine` from it."""
    noise = rng.normal(size=points.shape)
    noise -= (noise * points).sum(axis=1, keepdims=True) * points
    return _unit(cosine * points + np.sqrt(1 - cosine**2) * _unit(noise))


def scope_vectors(size: int, dim: int, rng: np.random.Generator) -> Iterator[npt.NDArray[np.float32]]:
    """A scope's embeddings, CHUNK at a time (each chunk its own clusters)."""
    for start in range(0, size, CHUNK):
        yield synthetic_embeddings(min(CHUNK, size - start), dim, rng)


def fill(settings: Settings, scope: str, vectors: npt.NDArray[np.float32], rng: np.random.Generator) -> None:
    """Insert entries with these embeddings into `scope`, each with one state per capture step."""
    ks = settings.capture_steps
    for start in range(0, len(vectors), _BATCH):
        batch = vectors[start : start + _BATCH]
        ids = [uuid.uuid4() for _ in batch]
        entry_rows = [
            {
                "id": entry_id,
                "scope": scope,
                "model_family": BENCH_FAMILY,
                "prompt": "bench",
                "text_embedding": vector,
                "final_latent_key": keys.final_latent_key(entry_id),
                "bytes": STATE_BYTES,
                "steps": settings.steps,
                "access_count": int(rng.integers(0, 50)),
                "state": EntryState.LIVE.value,
            }
            for entry_id, vector in zip(ids, batch, strict=True)
        ]
        state_rows = [
            {
                "entry_id": entry_id,
                "k": k,
                "blob_key": keys.state_key(entry_id, k),
                "bytes": STATE_BYTES,
                "access_count": int(rng.integers(0, 20)),
            }
            for entry_id in ids
            for k in ks
        ]
        with session_scope(settings) as session:
            cache.bulk_insert(session, entry_rows, state_rows)
