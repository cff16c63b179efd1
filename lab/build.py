"""`reprise models train`: the judge and the models, trained in order, with a manifest.

The manifest (weights/manifest.json) records the command, seed, recipe, seconds per component,
the judge's held-out accuracy and the sha256 of every weight file; its `digest` (a hash of those
hashes) names the assembled set, and comparing two manifests' digests says whether a rerun
reproduced the committed weights.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Final

import torch

from lab.judge import Judge, heldout_accuracy, train_judge
from lab.models import LAB_MODELS, LabPaths, assemble
from lab.training import DEFAULT, SMOKE, THREADS, Log, Recipe, train_models

SEED: Final = 20261125
HELDOUT_IMAGES: Final = 2000


def recipe_for(smoke: bool) -> Recipe:
    return SMOKE if smoke else DEFAULT


def train_lab(weights: Path, *, smoke: bool, seed: int = SEED, log: Log = print) -> dict[str, Any]:
    """Train everything into `weights` (replaced) and write its manifest; returns the manifest."""
    recipe = recipe_for(smoke)
    threads = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    torch.use_deterministic_algorithms(True)
    try:
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
        manifest = {
            "command": "reprise models train" + (" --smoke" if smoke else ""),
            "seed": seed,
            "torch": torch.__version__,
            "threads": THREADS,
            "recipe": asdict(recipe),
            "judge_heldout_accuracy": accuracy,
            "seconds": {name: round(value, 1) for name, value in seconds.items()},
            "total_seconds": round(time.perf_counter() - started, 1),
        } | digests(staging)
        (staging / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        shutil.rmtree(weights, ignore_errors=True)
        staging.rename(weights)
        return manifest
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(False)


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
