"""`reprise models train --only judge-b,discriminator`: the stages after the models (lab.stages) run
again alone into trained weights, as the whole run (lab.build) runs them, and the manifest updated."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from lab.build import digests, pinned_cpu_kernels, retimed
from lab.recipes import CURRENT, recipe_for
from lab.stages import manifest_entries, train_stages
from lab.training import deterministic


def retrain_stages(weights: Path, *, smoke: bool, log: Any = print, recipe: str = CURRENT) -> dict[str, Any]:
    """Run every stage again into `weights` by the recipe of that name, from the judge and models there,
    with the manifest's seed, as the whole run does (lab.build: kernels pinned, deterministic algorithms
    on THREADS threads); update the manifest (these stages' recipe, validation, seconds, hashes, digest)."""
    manifest_path = weights / "manifest.json"
    manifest: dict[str, Any] = json.loads(manifest_path.read_text())
    with pinned_cpu_kernels() as kernels, deterministic():
        chosen = recipe_for(smoke, recipe).stages
        stages = train_stages(weights, seed=manifest["seed"], smoke=smoke, log=log, recipe=chosen)
    manifest |= {"cpu_kernels": kernels, "torch": torch.__version__, **manifest_entries(stages)}
    retimed(manifest, stages["seconds"])
    manifest |= digests(weights)
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest
