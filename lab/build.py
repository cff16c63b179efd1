"""`reprise models train`: the judge and the models, trained in order, with a manifest.

The manifest (weights/manifest.json) records the command, seed, recipe, seconds per component,
the judge's held-out accuracy and the sha256 of every weight file; its `digest` (a hash of those
hashes) names the assembled set, and comparing two manifests' digests says whether a rerun
reproduced the committed weights.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any, Final

import torch

from lab.judge import Judge, heldout_accuracy, train_judge
from lab.models import LAB_MODELS, LabPaths, assemble
from lab.recipes import CURRENT, LabRecipe, recipe_for
from lab.stages import manifest_entries, train_stages
from lab.training import (
    THREADS,
    Log,
    deterministic,
    load_vae,
    train_models,
    train_unets,
)
from lab.video.build import manifest_entries as video_entries
from lab.video.build import train_video

SEED: Final = 20261125
HELDOUT_IMAGES: Final = 2000


PINNED_KERNELS: Final = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
"""The vector instruction set torch's CPU kernels (ATen) and oneDNN's convolutions may use while
training: AVX2, which every x86-64 server CPU of the last decade has. Left alone they take the widest
the CPU offers, and rounding differs between them: on an AMD EPYC with AVX-512 the same seed trained
other weights from the first component on (digest 3e80f8fc... against the committed 03fedb91...);
pinned, it trains the committed ones (README, "Training"). Both are read once per process, when the
first kernel runs: `reprise models train` runs none before it pins them."""


@contextmanager
def pinned_cpu_kernels() -> Iterator[dict[str, str]]:
    """PINNED_KERNELS in the environment on x86-64 (an operator's own setting wins), yielding the
    settings in force; the environment is restored after, so that processes started later (a test's
    stack) run the CPU's own kernels again."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        yield {}
        return
    before = {name: os.environ.get(name) for name in PINNED_KERNELS}
    for name, value in PINNED_KERNELS.items():
        os.environ.setdefault(name, value)
    try:
        yield {name: os.environ[name] for name in PINNED_KERNELS}
    finally:
        for name, previous in before.items():
            if previous is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = previous


def train_lab(
    weights: Path, *, smoke: bool, seed: int = SEED, log: Log = print, recipe: str = CURRENT
) -> dict[str, Any]:
    """Train everything into `weights` (replaced) with the recipe of that name and write its manifest;
    returns the manifest."""
    chosen = recipe_for(smoke, recipe)
    command = "reprise models train" + (" --smoke" if smoke else "")
    command += "" if smoke or recipe == CURRENT else f" --recipe {recipe}"
    with pinned_cpu_kernels() as kernels, deterministic():
        return _train(weights, chosen, command, seed=seed, smoke=smoke, log=log, kernels=kernels)


def _train(
    weights: Path, lab: LabRecipe, command: str, *, seed: int, smoke: bool, log: Log, kernels: dict[str, str]
) -> dict[str, Any]:
    recipe = lab.models
    started = time.perf_counter()
    staging = weights.with_name(weights.name + ".training")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    judge_started = time.perf_counter()
    judge = Judge(train_judge(recipe.judge_steps, seed=seed, log=log))
    accuracy = heldout_accuracy(judge, 200 if smoke else HELDOUT_IMAGES)
    judge.save(staging / "judge", heldout_accuracy=accuracy)
    seconds = {"judge": time.perf_counter() - judge_started}
    seconds |= train_models(staging, recipe, seed=seed, log=log)
    stages = train_stages(staging, seed=seed, smoke=smoke, log=log, recipe=lab.stages)
    seconds |= stages["seconds"]
    video = train_video(staging, seed=seed, smoke=smoke, log=log)  # last: the image parts' bytes stand
    seconds |= video["seconds"]
    manifest = {
        "command": command,
        "seed": seed,
        "torch": torch.__version__,
        "threads": THREADS,
        "cpu_kernels": kernels,
        "recipe": asdict(recipe),
        "judge_heldout_accuracy": accuracy,
        **manifest_entries(stages),
        **video_entries(video),
        "seconds": {name: round(value, 1) for name, value in seconds.items()},
        "total_seconds": round(time.perf_counter() - started, 1),
    } | digests(staging)
    (staging / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    shutil.rmtree(weights, ignore_errors=True)
    staging.rename(weights)
    return manifest


def retrain_unet(
    weights: Path, name: str, *, smoke: bool, log: Log = print, recipe_name: str = CURRENT
) -> dict[str, Any]:
    """Train one UNet of the recipe again into `weights`, from the VAE (and teacher) already there,
    with the manifest's seed, and update the manifest (recipe, its seconds, hashes, digest): the
    same bytes as the whole run's, in minutes (its inputs are rebuilt as that run builds them)."""
    manifest_path = weights / "manifest.json"
    manifest: dict[str, Any] = json.loads(manifest_path.read_text())
    recipe = recipe_for(smoke, recipe_name).models
    chosen = tuple(unet for unet in recipe.unets if unet.name == name)
    if not chosen:
        raise ValueError(f"no UNet {name!r} in the recipe: {[unet.name for unet in recipe.unets]}")
    with pinned_cpu_kernels() as kernels, deterministic():
        vaes = {chosen[0].vae: load_vae(weights / chosen[0].vae)}
        seconds = train_unets(weights, recipe, vaes, seed=manifest["seed"], log=log, only=chosen)
    manifest |= {"recipe": asdict(recipe), "cpu_kernels": kernels, "torch": torch.__version__}
    retimed(manifest, {name: seconds[name]})
    manifest |= digests(weights)
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def retrain_video(weights: Path, names: tuple[str, ...], *, smoke: bool, log: Log = print) -> dict[str, Any]:
    """`--only video-judge,unet-video`: those parts again from the image weights there, with the
    manifest's seed; the manifest's recipe, seconds, hashes and digest updated."""
    manifest_path = weights / "manifest.json"
    manifest: dict[str, Any] = json.loads(manifest_path.read_text())
    with pinned_cpu_kernels():
        video = train_video(weights, seed=manifest["seed"], smoke=smoke, log=log, only=names)
    manifest |= video_entries(video, manifest)
    retimed(manifest, video["seconds"])
    manifest |= digests(weights)
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def retimed(manifest: dict[str, Any], seconds: dict[str, float]) -> None:
    """Record the seconds of the parts trained again, and the whole run's total with them in place of
    what those parts took before (the manifest's `total_seconds` stays the time of a whole run)."""
    before = sum(manifest["seconds"].get(name, 0.0) for name in seconds)
    manifest["seconds"] |= {name: round(value, 1) for name, value in seconds.items()}
    manifest["total_seconds"] = round(manifest["total_seconds"] - before + sum(seconds.values()), 1)


def digests(weights: Path) -> dict[str, Any]:
    """sha256 of every weight file under `weights` (configs included) and one digest over them."""
    files = {
        str(path.relative_to(weights)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(weights.rglob("*"))
        if path.is_file() and path.name != "manifest.json"
    }
    digest = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()
    return {"files": files, "digest": digest}


def assemble_into(root: Path, weights: Path) -> LabPaths:
    """Assemble pipelines for `weights` into `root` (replaced): for a freshly trained set."""
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    assemble(root, weights)
    return LabPaths(root=root, weights=weights)


def model_dirs(paths: LabPaths) -> dict[str, str]:
    return {model.name: str(paths.pipeline(model.name)) for model in LAB_MODELS}
