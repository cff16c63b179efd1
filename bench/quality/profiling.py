"""`reprise profile k`: NIRVANA's Algorithm 1 on the configured models, with a judge of quality.

Judges: the lab's (the fraction of the prompt's attributes an image shows) when both models are the
lab's; CLIP score / 100 (open_clip, MoDM 5.2's metric) for any other model. The hit mode follows the
lookup: resume from the cached intermediate latent (text lookup, NIRVANA) or refine from the cached
final latent (image lookup, MoDM). In image mode a pair's similarity is text-to-image: the query's
embedding against the cached image's: open_clip's image tower for real models; on the lab, the lab's
attribute space (lab.attribute_space: the query's parsed attributes against the
second judge's reading of the image), the lab's own text-image alignment.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.quality.profile import Measured, Pair, curve, lab_pairs, measure, nearest_pairs, table_rows
from bench.quality.sampler import Images, Sampler
from core.settings import Settings
from core.vocabulary import BUILTIN_FAMILIES, LAB_ATTRIBUTES, LookupMode
from jobs.policies.k_selection import embedder_tag


@dataclass(frozen=True, slots=True)
class ProfileOptions:
    large: str
    hit: str
    pairs: int
    ks: tuple[int, ...]
    tolerance: float
    mode: LookupMode
    steps: int
    guidance: float
    seed: int
    prompts_file: Path | None = None
    hit_operation: str | None = None  # resume or refine; None: resume for text lookups, refine for image

    @property
    def operation(self) -> str:
        if self.hit_operation is not None:
            return self.hit_operation
        return "refine" if self.mode is LookupMode.TEXT_TO_IMAGE else "resume"


def is_lab(source: str) -> bool:
    return source.startswith("lab:")


def lab_scorer(settings: Settings) -> Callable[[Images, Sequence[str]], list[float]]:
    from lab.judge import Judge
    from lab.models import ensure_lab_models

    judge = Judge.load(ensure_lab_models(settings).judge)

    def score(images: Images, prompts: Sequence[str]) -> list[float]:
        return [0.0 if q is None else q for q in judge.score(images, prompts)]

    return score


def clip_scorer(settings: Settings) -> Callable[[Images, Sequence[str]], list[float]]:
    from PIL import Image

    from workers.runtime.embedders.factory import build_image_embedder
    from workers.runtime.quality import ClipScore

    scorer = ClipScore(build_image_embedder(settings))

    def score(images: Images, prompts: Sequence[str]) -> list[float]:
        return [float(s) / 100.0 for s in scorer.score([Image.fromarray(i) for i in images], prompts)]

    return score


def run_profile(
    settings: Settings, options: ProfileOptions, log: Callable[[str], None] = print
) -> dict[str, Any]:
    """Measure and return the profile report: {table, embedder, models, tolerance, curve, ...}."""
    from workers.runtime.embedders.factory import build_text_embedder
    from workers.runtime.loading import builtin_path

    started = time.perf_counter()
    lab = is_lab(options.large) and is_lab(options.hit)
    embedder = build_text_embedder(settings)
    pairs: list[Pair]
    if options.prompts_file is not None:
        prompts = [line.strip() for line in options.prompts_file.read_text().splitlines() if line.strip()]
        pairs = nearest_pairs(prompts[: options.pairs], embedder.embed_text)
    else:
        pairs = lab_pairs(options.pairs, options.seed, embedder.embed_text)
    large = Sampler(builtin_path(settings, options.large), steps=options.steps, guidance=options.guidance)
    hit = (
        large
        if options.hit == options.large
        else Sampler(builtin_path(settings, options.hit), steps=options.steps, guidance=options.guidance)
    )
    score = lab_scorer(settings) if lab else clip_scorer(settings)
    readings: list[dict[str, Any]] = []
    if options.mode is LookupMode.TEXT_TO_IMAGE:
        pairs, readings = image_similarities(settings, pairs, large, lab=lab)
    measured = measure(pairs, large, hit, score, options.ks, mode=options.operation, log=log)
    data = report(settings, options, measured, lab=lab, seconds=time.perf_counter() - started)
    return data | ({"readings": readings} if readings else {})


def image_similarities(
    settings: Settings, pairs: list[Pair], large: Sampler, *, lab: bool
) -> tuple[list[Pair], list[dict[str, Any]]]:
    """Pairs re-scored text-to-image: the query against the cached prompt's generated image. On the lab
    also each cached image's reading in the lab's attribute space, with the prompt it was made for (the
    simulator draws its cached images' keys from them: bench.workload.lab_space)."""
    from PIL import Image

    from bench.quality.profile import seed_of
    from workers.runtime.embedders.factory import build_image_embedder

    images: Images = []
    for start in range(0, len(pairs), 32):
        chunk = pairs[start : start + 32]
        batch = large.generate([p.cached for p in chunk], [seed_of(p.cached) for p in chunk])
        images += large.images(batch.latents)
    queries = [pair.query for pair in pairs]
    space = build_image_embedder(
        settings.model_copy(update={"open_clip_model": LAB_ATTRIBUTES}) if lab else settings
    )
    image_vectors = space.embed_image([Image.fromarray(i) for i in images])
    query_vectors = space.embed_text(queries)
    sims = np.einsum("ij,ij->i", query_vectors, image_vectors)
    scored = [Pair(p.query, p.cached, float(s), p.kind) for p, s in zip(pairs, sims, strict=True)]
    if not lab:
        return scored, []
    from bench.workload.lab_space import reading_record

    return scored, [reading_record(p.cached, v) for p, v in zip(pairs, image_vectors, strict=True)]


def report(
    settings: Settings, options: ProfileOptions, measured: Measured, *, lab: bool, seconds: float
) -> dict[str, Any]:
    kinds = sorted({pair.kind for pair in measured.pairs})
    similarity = np.array([pair.similarity for pair in measured.pairs])
    embedder = embedder_tag(settings.text_embedder, settings.open_clip_model, options.mode)
    if lab and options.mode is LookupMode.TEXT_TO_IMAGE:  # image_similarities: the lab's attribute space
        embedder = LAB_ATTRIBUTES
    return {
        "table": table_rows(measured, options.tolerance),
        "embedder": embedder,
        "models": {"large": options.large, "hit": options.hit},
        "tolerance": options.tolerance,
        "mode": options.mode.value,
        "hit_operation": options.operation,
        "judge": "lab judge (attribute fraction)" if lab else "CLIP score / 100 (open_clip)",
        "families": {name: BUILTIN_FAMILIES.get(name) for name in (options.large, options.hit)},
        "ks": list(options.ks),
        "steps": options.steps,
        "guidance": options.guidance,
        "pairs": len(measured.pairs),
        "pair_kinds": {kind: sum(p.kind == kind for p in measured.pairs) for kind in kinds},
        "similarity_range": [float(similarity.min()), float(similarity.max())],
        "fresh_quality": float(measured.fresh.mean()),
        "curve": curve(measured),
        "measurements": measurements(measured),
        "seconds": round(seconds, 1),
    }


def measurements(measured: Measured) -> list[dict[str, Any]]:
    """Every pair's similarity, fresh quality and hit quality per K: enough to recompute the table at
    another tolerance without generating again (`reprise profile k --from`)."""
    return [
        {
            "kind": pair.kind,
            "similarity": round(pair.similarity, 5),
            "fresh": float(measured.fresh[i]),
            "hits": {str(k): float(hits[i]) for k, hits in measured.hits.items()},
        }
        for i, pair in enumerate(measured.pairs)
    ]


def retabled(report: dict[str, Any], tolerance: float) -> dict[str, Any]:
    """A profile report with its table recomputed at `tolerance` from its measurements."""
    rows = report.get("measurements")
    if not rows:
        raise ValueError("this profile holds no measurements: profile again (`reprise profile k`)")
    pairs = [Pair("", "", float(row["similarity"]), str(row["kind"])) for row in rows]
    ks = sorted({int(k) for row in rows for k in row["hits"]})
    measured = Measured(
        pairs,
        np.array([float(row["fresh"]) for row in rows]),
        {k: np.array([float(row["hits"][str(k)]) for row in rows]) for k in ks},
    )
    return report | {"tolerance": tolerance, "table": table_rows(measured, tolerance)}


def write_report(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
