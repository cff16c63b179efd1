"""The lab's recipes by name: what trains each set of weights the lab has committed.

A recipe is the models' (lab.training: the judge, the autoencoders, the UNets) and the stages' after
them (lab.stages: the second judge, the validation, the discriminator). Each is named by the date it
was adopted; the newest (CURRENT) trained lab/weights, and a results page names the one its figures
were measured on (docs/results/README.md, "Lab weights"), which `reprise models train --recipe NAME
--out DIR` trains again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Final

from lab import stages, training


@dataclass(frozen=True, slots=True)
class LabRecipe:
    models: training.Recipe
    stages: stages.StagesRecipe


SMOKE: Final = LabRecipe(training.SMOKE, stages.SMOKE)
RECIPES: Final[Mapping[str, LabRecipe]] = {
    "2026-11-25": LabRecipe(training.FIRST, stages.FIRST),
    "2026-11-27": LabRecipe(training.DEFAULT, stages.DEFAULT),
}
CURRENT: Final[str] = max(RECIPES)  # ISO dates: the newest sorts last


def recipe_for(smoke: bool, name: str = CURRENT) -> LabRecipe:
    """SMOKE, or the recipe of that name; ValueError naming the recipes there are."""
    if smoke:
        return SMOKE
    if name not in RECIPES:
        raise ValueError(f"no lab recipe {name!r}: the recipes are {', '.join(RECIPES)}")
    return RECIPES[name]


def recipe_name(manifest: Mapping[str, Any]) -> str | None:
    """The name of the recipe a weights manifest records (`recipe`, `stages_recipe`); None: none of them."""
    recorded = (manifest.get("recipe"), manifest.get("stages_recipe"))
    return next((name for name, recipe in RECIPES.items() if _as_recorded(recipe) == recorded), None)


def _as_recorded(recipe: LabRecipe) -> tuple[Any, Any]:
    return json.loads(json.dumps(asdict(recipe.models))), json.loads(json.dumps(asdict(recipe.stages)))
