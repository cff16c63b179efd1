"""`reprise bench step-cache`: each step cache setting's speed against the judge's drop, on the lab.

Per model, every setting generates the same lab prompts (each prompt's own seed, all T steps, guidance
7.5) through the serving runtime itself (DiffusionRuntime.generate_batch: the step-level batch with the
step cache inside it, what a GPU worker runs), decodes and is judged. A prompt's drop is the judged
quality of its image with the cache off minus with the setting (paired, same prompt and seed); the
setting's drop is their mean with a 95% percentile-bootstrap interval. images_per_s is the prompts over
the CPU seconds of the batched denoising and decoding (one torch thread, so a shared machine's other
work does not count); speedup is against `off` on the same model in the
same run. The default is, per model, the fastest setting whose drop and its interval's upper bound are
both within DROP_BUDGET (`off` when none is): one value when the models agree, else `large=...,small=...`.

`--fit MODEL` fits TeaCache's rescaling polynomial (TeaCache's rescaling): full runs of lab prompts record, at
every step, the relative L1 change of the timestep-modulated input and of the model's output; a
degree-4 least-squares polynomial maps the first to the second, written to
workers/runtime/teacache_fits.json under the model's name.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np
import torch

from bench.quality.compare import lab_prompts
from bench.quality.profile import seed_of
from core.params import GenerationParams
from core.settings import Settings
from core.step_cache import parse_setting
from core.vocabulary import Role

DROP_BUDGET: Final = 0.01  # the step cache's own share of the 0.02 quality target (its issue's choice)
GUIDANCE: Final = 7.5  # Stable Diffusion's default, as the replays request
BATCH: Final = 8  # settings.max_batch's default: the batch a GPU worker steps
RESAMPLES: Final = 2000
FIT_DEGREE: Final = 4  # TeaCache's released fits are 4th-order polynomials
ROLES: Final = {"lab:large": Role.LARGE, "lab:small": Role.SMALL}
ROLE_NAMES: Final = {model: role.value for model, role in ROLES.items()}


def _runtime(settings: Settings, model: str, setting: str) -> Any:
    from workers.runtime import DiffusionRuntime

    if model not in ROLES:
        raise ValueError(f"the sweep runs the lab's models: {', '.join(ROLES)}; got {model!r}")
    update = {"model_set": "lab", "step_cache": setting, "max_batch": BATCH, "device": "cpu"}
    return DiffusionRuntime(settings.model_copy(update=update), ROLES[model])


def _params(texts: Sequence[str], steps: int) -> list[GenerationParams]:
    return [
        GenerationParams(prompt=text, seed=seed_of(text), steps=steps, width=64, height=64, guidance=GUIDANCE)
        for text in texts
    ]


def _generate(runtime: Any, params: list[GenerationParams]) -> tuple[list[Any], float]:
    """Every prompt's image through the runtime's batch, and the CPU time of it (this process, one
    thread: what the work costs whatever else the machine runs meanwhile)."""
    started = time.process_time()
    members = [runtime.generation_member(p) for p in params]
    results = runtime.generate_batch(members, decode=True)
    return [result.image for result in results], time.process_time() - started


def bootstrap(drops: Sequence[float], seed: int = 0) -> tuple[float, float]:
    """The 95% percentile-bootstrap interval of the mean of paired drops."""
    values = np.asarray(drops, dtype=np.float64)
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), size=(RESAMPLES, len(values)))].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def sweep(
    settings: Settings,
    setups: Sequence[str],
    models: Sequence[str],
    *,
    prompts: int,
    seed: int,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """The contract: {"default": SETTING, "runs": [{model, setting, images_per_s, speedup, drop,
    drop_ci95, prompts}]}, `off` first per model."""
    from lab.judge import Judge
    from lab.models import ensure_lab_models

    torch.set_num_threads(1)  # one core per worker process, as the stack runs
    judge = Judge.load(ensure_lab_models(settings).judge)
    texts, _ = lab_prompts(prompts, seed)
    params = _params(texts, settings.steps)
    runs: list[dict[str, Any]] = []
    for model in models:
        base_scores: list[float] = []
        base_rate = 0.0
        for setup in ["off", *[s for s in setups if s != "off"]]:
            runtime = _runtime(settings, model, setup)
            images, seconds = _generate(runtime, params)
            scores = [q or 0.0 for q in judge.score(images, texts)]
            rate = len(params) / seconds
            if setup == "off":
                base_scores, base_rate = scores, rate
            drops = [b - s for b, s in zip(base_scores, scores, strict=True)]
            low, high = bootstrap(drops, seed)
            row = {"model": model, "setting": str(runtime.step_plan), "images_per_s": round(rate, 3)}
            row |= {"speedup": round(rate / base_rate, 3), "drop": round(float(np.mean(drops)), 4)}
            runs.append(row | {"drop_ci95": [round(low, 4), round(high, 4)], "prompts": len(params)})
            log(f"{model} {runs[-1]['setting']}: {rate:.2f} images/s, drop {runs[-1]['drop']:+.4f}")
    return {"default": choose_default(runs), "runs": runs, "steps": settings.steps, "seed": seed}


def sweep_models(
    settings: Settings,
    setups: Sequence[str],
    models: Sequence[str],
    *,
    prompts: int,
    seed: int,
    jobs: int = 1,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """`sweep`, each model in its own process when jobs > 1 (its figures are CPU seconds, so models
    measured side by side do not slow each other's); the default chosen over them all."""
    if jobs <= 1 or len(models) == 1:
        return sweep(settings, setups, models, prompts=prompts, seed=seed, log=log)
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    with ProcessPoolExecutor(min(jobs, len(models)), mp_context=get_context("spawn")) as pool:
        parts = [pool.submit(sweep, settings, setups, [m], prompts=prompts, seed=seed) for m in models]
        runs = [run for part in parts for run in part.result()["runs"]]
    for run in runs:
        log(f"{run['model']} {run['setting']}: {run['images_per_s']:.2f} images/s, drop {run['drop']:+.4f}")
    return {"default": choose_default(runs), "runs": runs, "steps": settings.steps, "seed": seed}


def choose_per_model(runs: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any] | None]:
    """Per model, its fastest run whose drop and interval's upper bound are within DROP_BUDGET (None
    when only `off` or nothing is)."""
    chosen: dict[str, dict[str, Any] | None] = {}
    for model in dict.fromkeys(run["model"] for run in runs):
        eligible = [
            run
            for run in runs
            if run["model"] == model and run["drop"] <= DROP_BUDGET and run["drop_ci95"][1] <= DROP_BUDGET
        ]
        best = max(eligible, key=lambda run: (run["speedup"], run["setting"] == "off"), default=None)
        chosen[model] = None if best is None or best["setting"] == "off" else best
    return chosen


def choose_default(runs: Sequence[dict[str, Any]]) -> str:
    """Per model, the fastest setting whose drop and interval's upper bound are within DROP_BUDGET (`off`
    when none is): one REPRISE_STEP_CACHE value when every model chose the same, else one per role."""
    chosen = {
        ROLE_NAMES[model]: "off" if run is None else run["setting"]
        for model, run in choose_per_model(runs).items()
    }
    return str(parse_setting(",".join(f"{role}={setting}" for role, setting in chosen.items())))


def record_choices(report: dict[str, Any], source: str, choices: Path | None = None) -> dict[str, Any]:
    """Write each swept model's choice where the runtime's `auto` reads it (workers/runtime/
    step_cache_choices.json, keyed by the model's name in compute accounting, 'lab-large' for
    'lab:large'), with its speedup, drop and the sweep it came from; a model with no choice runs off."""
    from workers.runtime.loading import model_name
    from workers.runtime.step_cache import CHOICES

    path = choices or CHOICES
    recorded: dict[str, Any] = {}
    for model, run in choose_per_model(report["runs"]).items():
        if run is not None:
            recorded[model_name(model)] = {
                "setting": run["setting"],
                "speedup": run["speedup"],
                "drop": run["drop"],
                "drop_ci95": run["drop_ci95"],
                "prompts": run["prompts"],
                "source": source,
            }
    path.write_text(json.dumps(recorded, indent=2, sort_keys=True) + "\n")
    return recorded


class _Recorder:
    """A step cache that runs every call in full and records TeaCache's two distances per step."""

    def __init__(self) -> None:
        from core.step_cache import StepCacheMethod, StepCachePlan

        self.plan = StepCachePlan(StepCacheMethod.TEACACHE, threshold=0.5)
        self.pairs: list[tuple[float, float]] = []
        self._last: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def predict(
        self, unet: Any, members: list[Any], model_in: torch.Tensor, t: torch.Tensor, embeds: torch.Tensor
    ) -> torch.Tensor:
        from workers.runtime import unet_parts
        from workers.runtime.step_cache import relative_l1

        rows = [m.samples for m in members]
        indicators = torch.split(unet_parts.modulated_input(unet, model_in, t, embeds), rows)
        out: torch.Tensor = unet(model_in, t, encoder_hidden_states=embeds, return_dict=False)[0]
        for member, indicator, output in zip(members, indicators, torch.split(out, rows), strict=True):
            before = self._last.get(id(member))
            if before is not None:
                self.pairs.append((relative_l1(indicator, before[0]), relative_l1(output, before[1])))
            self._last[id(member)] = (indicator, output)
        return out


def fit_teacache(
    settings: Settings, model: str, *, prompts: int, seed: int, fits: Path | None = None
) -> dict[str, Any]:
    """Fit and store the model's rescaling polynomial; the fit's record."""
    from workers.runtime.step_cache import FITS

    torch.set_num_threads(1)
    runtime = _runtime(settings, model, "off")
    texts, _ = lab_prompts(prompts, seed)
    recorder = _Recorder()
    batch = runtime.new_batch()
    batch.step_cache = recorder
    members = [runtime.generation_member(p) for p in _params(texts, settings.steps)]
    with torch.inference_mode():
        while members or len(batch):
            while members and batch.free_slots:
                batch.admit(members.pop(0))
            batch.step()
    x, y = np.array(recorder.pairs).T
    coefficients = np.polyfit(x, y, FIT_DEGREE)
    residual = float(np.sqrt(np.mean((np.polyval(coefficients, x) - y) ** 2)))
    record = {
        "coefficients": [float(c) for c in coefficients],
        "pairs": len(x),
        "rms_residual": residual,
        "command": f"reprise bench step-cache --fit {model} --prompts {prompts} --seed {seed}",
    }
    path = fits or FITS
    known = json.loads(path.read_text()) if path.is_file() else {}
    known[runtime.model_name] = record
    path.write_text(json.dumps(known, indent=2, sort_keys=True) + "\n")
    return record
