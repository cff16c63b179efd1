"""The stages `reprise models train` runs after the models: the second judge, the judges' validation
and the discriminator. They need the trained models (validation and the discriminator read the
models' own images), so they come last, and `--only judge-b,discriminator` runs them again alone
from the weights already there, with the manifest's seed: the same bytes as the whole run's.

1. judge-b: lab.judge_b.JudgeNetB trained by lab.judge.train_judge from seed + its SEED_OFFSET.
2. generated images: lab:large's and lab:small's images of `captions` held-out captions
   (lab.generation, lab.validation.AGREEMENT_SEED), at `generation_steps` DDIM steps.
3. validation (lab.validation.validate) of both judges, written into each judge.json: lab.judge.Judge
   refuses to load a judge without one or below its floors (lab.judge_floors).
4. discriminator: lab.discriminator trained on true renders against those generated images.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Final

from lab import judge_b
from lab.discriminator import SEED_OFFSET as DISCRIMINATOR_OFFSET
from lab.discriminator import LabDiscriminator, train_discriminator
from lab.generation import GENERATORS, captioned_scenes, generate
from lab.judge import Judge, heldout_accuracy, train_judge
from lab.validation import AGREEMENT_SEED, validate

STAGES: Final = ("judge-b", "discriminator")


@dataclass(frozen=True, slots=True)
class StagesRecipe:
    judge_b_steps: int
    captions: int  # held-out captions each generator draws: agreement and the discriminator's "generated"
    generation_steps: int  # fewer than the service's 50: CPU time on 2 cores (our choice)
    discriminator_steps: int
    heldout: int  # held-out renders of each accuracy


# The second judge trained as long as the first, 500 steps (at 160 it read 0.75 of held-out attributes,
# too few to agree).
FIRST: Final = StagesRecipe(
    judge_b_steps=500, captions=32, generation_steps=20, discriminator_steps=150, heldout=1000
)
# 2026-11-27: the second judge trained until its held-out accuracy matched the first's (0.942 at 500
# steps with its loss still falling; 0.996 at 1500).
DEFAULT: Final = replace(FIRST, judge_b_steps=1500)
SMOKE: Final = StagesRecipe(
    judge_b_steps=5, captions=4, generation_steps=2, discriminator_steps=5, heldout=50
)


def train_stages(
    weights: Path, *, seed: int, smoke: bool, log: Any = print, recipe: StagesRecipe = DEFAULT
) -> dict[str, Any]:
    """Run every stage into `weights` (trained judge and models there) by `recipe` (SMOKE with `smoke`);
    {seconds, recipe, validation}."""
    from lab.models import assemble

    recipe = SMOKE if smoke else recipe
    seconds: dict[str, float] = {}
    started = time.perf_counter()
    second = Judge(
        train_judge(recipe.judge_b_steps, seed=seed + judge_b.SEED_OFFSET, log=log, network=judge_b.JudgeNetB)
    )
    seconds["judge-b"] = time.perf_counter() - started
    started = time.perf_counter()
    scenes, captions, _ = captioned_scenes(recipe.captions, AGREEMENT_SEED)
    root = Path(tempfile.mkdtemp(prefix="lab-stages-"))
    try:
        assemble(root / "pipelines", weights)
        images = {
            name: generate(root / "pipelines" / name, captions, steps=recipe.generation_steps, log=log)
            for name in GENERATORS
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)
    seconds["generated"] = time.perf_counter() - started
    started = time.perf_counter()
    first = Judge.load(weights / "judge", validated=False)
    validations = {
        "judge": validate(first, second, scenes, images, heldout=recipe.heldout, accuracy=heldout_accuracy),
        "judge-b": validate(second, first, scenes, images, heldout=recipe.heldout, accuracy=heldout_accuracy),
    }
    second.save(weights / "judge-b")
    for name, validation in validations.items():
        _record(weights / name / "judge.json", validation)
    seconds["validation"] = time.perf_counter() - started
    started = time.perf_counter()
    generated = [image for name in GENERATORS for image in images[name]]
    net = train_discriminator(
        generated, recipe.discriminator_steps, seed=seed + DISCRIMINATOR_OFFSET, log=log
    )
    LabDiscriminator(net).save(weights / "discriminator", generated_images=len(generated))
    seconds["discriminator"] = time.perf_counter() - started
    return {"seconds": seconds, "recipe": asdict(recipe), "validation": validations}


def manifest_entries(stages: dict[str, Any]) -> dict[str, Any]:
    """The manifest's record of these stages: their recipe and each judge's validation figures."""
    figures = ("heldout_accuracy", "blurred_accuracy", "noisy_accuracy", "generated_agreement")
    validation = {
        judge: {name: record[name] for name in figures} for judge, record in stages["validation"].items()
    }
    return {"stages_recipe": stages["recipe"], "judge_validation": validation}


def _record(path: Path, validation: dict[str, Any]) -> None:
    """The judge's validation written into its judge.json (its held-out accuracy kept beside it)."""
    meta = json.loads(path.read_text())
    meta |= {"heldout_accuracy": validation["heldout_accuracy"], "validation": validation}
    path.write_text(json.dumps(meta, indent=2) + "\n")
