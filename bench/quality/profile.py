"""NIRVANA's cache-selector profiling (Algorithm 1): which k each similarity allows.

For a set of (query prompt, cached prompt) pairs with their embedding similarity, generate the
cached prompt with the large model capturing its latents at every K, then for each K serve the
query as a hit from the cached latent (resume, NIRVANA 4.1; or refine from the cached final
latent, MoDM 5.2), and score every hit and a fresh generation of the query (same seed) with the
judge. Algorithm 1 line 3 keeps, per K, the minimum similarity above which the hits' quality holds;
here "holds" is: the mean quality drop against the fresh generations of the pairs at or above that
similarity stays within `tolerance` (per-image quality on the lab is a fraction of attributes, too
coarse for the paper's every-image rule). The rows are then made a valid table: a larger k needs
a strictly higher similarity; a K that no similarity allows is left out.

Pairs (lab): a caption of a scene against a paraphrase, a near-miss (one attribute changed), a
two-attribute change and an unrelated scene, so that similarities span 0.3-1.0. Real models: each
prompt of a file against its nearest neighbour in the file.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from bench.quality.sampler import Images, Sampler

Embed = Callable[[Sequence[str]], np.ndarray]
Score = Callable[[Images, Sequence[str]], list[float]]
# Pairs a row must stand on. A pair's quality moves in steps of 1/6 or 1/9 (the attributes of one
# prompt), so a mean over fewer pairs cannot tell a drop of 0.02 from noise.
MIN_SUPPORT: Final = 16
BINS: Final = (0.0, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 1.01)


@dataclass(frozen=True, slots=True)
class Pair:
    query: str
    cached: str
    similarity: float
    kind: str


def lab_pairs(count: int, seed: int, embed: Embed) -> list[Pair]:
    """`count` pairs from the lab's world: paraphrase, one-off, two-off and unrelated, in turn."""
    from lab.captions import caption
    from lab.world import near_miss, sample_scene

    rng = np.random.default_rng(seed)
    raw: list[tuple[str, str, str]] = []
    kinds = ("paraphrase", "one-off", "two-off", "unrelated")
    for index in range(count):
        scene, kind = sample_scene(rng), kinds[index % len(kinds)]
        if kind == "paraphrase":
            other = scene
        elif kind == "one-off":
            other = near_miss(scene, rng)
        elif kind == "two-off":
            other = near_miss(near_miss(scene, rng), rng)
        else:
            other = sample_scene(rng)
        raw.append((caption(other, rng), caption(scene, rng), kind))
    return _with_similarity(raw, embed)


def nearest_pairs(prompts: Sequence[str], embed: Embed) -> list[Pair]:
    """Each prompt against its nearest other prompt of the list (real models' profiling)."""
    vectors = embed(list(prompts))
    similarity = vectors @ vectors.T
    np.fill_diagonal(similarity, -np.inf)
    nearest = similarity.argmax(axis=1)
    return [
        Pair(prompts[i], prompts[int(j)], float(similarity[i, j]), "nearest") for i, j in enumerate(nearest)
    ]


def _with_similarity(raw: list[tuple[str, str, str]], embed: Embed) -> list[Pair]:
    queries, cached = embed([q for q, _, _ in raw]), embed([c for _, c, _ in raw])
    sims = np.einsum("ij,ij->i", queries, cached)
    return [Pair(q, c, float(s), kind) for (q, c, kind), s in zip(raw, sims, strict=True)]


def seed_of(text: str) -> int:
    """A request's seed, from its prompt (crc32): fixed across runs and machines."""
    return zlib.crc32(text.encode())


@dataclass(frozen=True, slots=True)
class Measured:
    """Per pair: the fresh generation's quality, and each K's hit quality."""

    pairs: list[Pair]
    fresh: np.ndarray  # (n,)
    hits: dict[int, np.ndarray]  # K -> (n,)


def measure(
    pairs: Sequence[Pair],
    large: Sampler,
    hit: Sampler,
    score: Score,
    ks: Sequence[int],
    *,
    mode: str = "resume",
    batch: int = 32,
    log: Callable[[str], None] = print,
) -> Measured:
    """Generate and score, `batch` pairs at a time (see the module doc)."""
    fresh: list[float] = []
    hits: dict[int, list[float]] = {k: [] for k in ks}
    for start in range(0, len(pairs), batch):
        chunk = pairs[start : start + batch]
        queries = [pair.query for pair in chunk]
        seeds = [seed_of(pair.query) for pair in chunk]
        cached = large.generate([p.cached for p in chunk], [seed_of(p.cached) for p in chunk], capture=ks)
        fresh += score(large.images(large.generate(queries, seeds).latents), queries)
        for k in ks:
            if mode == "resume":
                served = hit.resume(queries, cached.captured[k], k)
            else:
                served = hit.refine(queries, seeds, cached.latents, k)
            hits[k] += score(hit.images(served.latents), queries)
        log(f"profiled {min(start + batch, len(pairs))}/{len(pairs)} pairs")
    return Measured(list(pairs), np.array(fresh), {k: np.array(v) for k, v in hits.items()})


def min_similarity(similarity: np.ndarray, drop: np.ndarray, tolerance: float) -> float | None:
    """Algorithm 1 line 3: scanning from the most similar pair down, the lowest similarity s such that
    for every s' >= s the mean drop of the pairs at or above s' is within `tolerance`, judged from the
    MIN_SUPPORT-th pair on (None: even the top MIN_SUPPORT pairs do not hold)."""
    order = np.argsort(-similarity)
    running = np.cumsum(drop[order]) / np.arange(1, len(order) + 1)
    lowest = None
    for position in range(MIN_SUPPORT - 1, len(order)):
        if running[position] > tolerance:
            break
        lowest = float(similarity[order[position]])
    return lowest


def table_rows(measured: Measured, tolerance: float) -> list[dict[str, Any]]:
    """The profiled table, highest similarity first, as [{min_similarity, k}] (a valid ThresholdTable)."""
    similarity = np.array([pair.similarity for pair in measured.pairs])
    found = {
        k: min_similarity(similarity, measured.fresh - hits, tolerance) for k, hits in measured.hits.items()
    }
    rows: list[dict[str, Any]] = []
    floor = -1.0
    for k in sorted(found):  # smallest k first: each larger k needs a strictly higher similarity
        threshold = found[k]
        if threshold is None:
            continue
        threshold = round(max(threshold, floor + 0.005) if rows else threshold, 3)
        if threshold > 0.99:
            continue
        rows.append({"min_similarity": threshold, "k": k})
        floor = threshold
    return sorted(rows, key=lambda row: -row["min_similarity"])


def curve(measured: Measured) -> list[dict[str, Any]]:
    """Mean quality drop of hits per K and similarity bin (the quality-vs-similarity plot, NIRVANA Fig. 9)."""
    similarity = np.array([pair.similarity for pair in measured.pairs])
    points = []
    for k, hits in sorted(measured.hits.items()):
        for low, high in itertools.pairwise(BINS):
            inside = (similarity >= low) & (similarity < high)
            if inside.any():
                points.append(
                    {
                        "k": k,
                        "similarity_low": low,
                        "similarity_high": min(high, 1.0),
                        "pairs": int(inside.sum()),
                        "hit_quality": float(hits[inside].mean()),
                        "fresh_quality": float(measured.fresh[inside].mean()),
                        "drop": float((measured.fresh[inside] - hits[inside]).mean()),
                    }
                )
    return points
