"""The step cache (core.step_cache, workers.runtime.step_cache) in the serving runtime, on the lab's
trained large model: its setting, its schedule of full calls, and a batch that mixes full and reusing
members giving each job what it gets alone with the same step cache."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from core.errors import GenerationCanceled, SettingsError
from core.params import GenerationParams
from core.settings import Settings, load_settings
from core.step_cache import (
    AUTO,
    OFF,
    StepCacheMethod,
    StepCachePlan,
    full_step_due,
    parse_setting,
    parse_step_cache,
    resolve,
)
from core.vocabulary import Role
from workers.runtime import DiffusionRuntime, GenerationResult, unet_parts
from workers.runtime import step_cache as step_cache_module
from workers.runtime.batching import BATCH_ATOL, BatchMember
from workers.runtime.step_cache import full_calls_only

torch.set_num_threads(1)
STEPS = 20
PROMPTS = (
    "a small red circle left of a blue square on a striped yellow background",
    "a big green triangle on a plain white background",
    "a blue square above a red circle on a dotted black background",
)


@pytest.mark.parametrize(
    ("text", "plan"),
    [
        ("off", StepCachePlan()),
        (" OFF ", StepCachePlan()),
        ("deepcache:3", StepCachePlan(StepCacheMethod.DEEPCACHE, interval=3)),
        ("deepcache:4:2", StepCachePlan(StepCacheMethod.DEEPCACHE, interval=4, depth=2)),
        ("teacache:0.2", StepCachePlan(StepCacheMethod.TEACACHE, threshold=0.2)),
        ("Auto", AUTO),
    ],
)
def test_the_setting_parses_and_prints_back(text: str, plan: StepCachePlan) -> None:
    assert parse_step_cache(text) == plan
    assert parse_step_cache(str(plan)) == plan


@pytest.mark.parametrize(
    "text", ["deepcache", "deepcache:1", "deepcache:3:0", "teacache:0", "teacache:2", "x:1"]
)
def test_a_bad_setting_is_refused_naming_the_forms(text: str) -> None:
    with pytest.raises(ValueError, match="deepcache:N"):
        parse_step_cache(text)
    with pytest.raises(SettingsError, match="teacache"):
        load_settings(step_cache=text)


def test_a_setting_per_model_role_and_one_for_all_print_back_as_given() -> None:
    per_role = parse_setting("large=teacache:0.2, small=deepcache:5")
    assert per_role.for_role("large") == parse_step_cache("teacache:0.2")
    assert per_role.for_role("small") == parse_step_cache("deepcache:5")
    assert str(per_role) == "large=teacache:0.2,small=deepcache:5" and per_role.on
    assert str(parse_setting("small=deepcache:5")) == "large=off,small=deepcache:5"
    assert str(parse_setting("large=off,small=off")) == "off" and not parse_setting("off").on
    assert str(parse_setting("deepcache:3")) == "deepcache:3"
    for bad in ("decode=deepcache:3", "large=deepcache:3,large=off", "large=deepcache:1"):
        with pytest.raises(ValueError):
            parse_setting(bad)
    assert load_settings(step_cache="small=deepcache:5").step_cache == "large=off,small=deepcache:5"


def test_deepcache_runs_a_full_call_every_n_steps_and_whenever_forced() -> None:
    plan = parse_step_cache("deepcache:3")
    assert full_step_due(plan, since_full=None, forced=False)  # a run's first step
    assert not full_step_due(plan, since_full=0, forced=False)
    assert not full_step_due(plan, since_full=1, forced=False)
    assert full_step_due(plan, since_full=2, forced=False)
    assert full_step_due(plan, since_full=0, forced=True)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("lab-data")


def _settings(data_dir: Path, step_cache: str, max_batch: int = 4) -> Settings:
    return load_settings(
        data_dir=data_dir,
        device="cpu",
        model_set="lab",
        steps=STEPS,
        capture_steps="5,10",
        step_cache=step_cache,
        max_batch=max_batch,
    )


def _params(index: int) -> GenerationParams:
    prompt = PROMPTS[index % len(PROMPTS)]
    return GenerationParams(prompt=prompt, seed=index, steps=STEPS, width=64, height=64, guidance=7.5)


def _results(outcomes: list[GenerationResult | GenerationCanceled]) -> list[GenerationResult]:
    assert all(isinstance(outcome, GenerationResult) for outcome in outcomes), outcomes
    return [outcome for outcome in outcomes if isinstance(outcome, GenerationResult)]


def _diff(first: Any, second: Any) -> float:
    return float(np.abs(first - second).max())


def test_auto_resolves_to_the_model_s_recorded_choice_or_off() -> None:
    assert resolve(AUTO, "teacache:0.2") == parse_step_cache("teacache:0.2")
    assert resolve(AUTO, None) == OFF  # a model never swept
    assert resolve(parse_step_cache("deepcache:3"), "teacache:0.2") == parse_step_cache("deepcache:3")
    with pytest.raises(ValueError, match="not auto"):
        resolve(AUTO, "auto")
    assert str(parse_setting("large=auto")) == "large=auto,small=off"


def test_the_shipped_defaults_stack_the_step_cache_and_the_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    for pinned in (
        "REPRISE_STEP_CACHE",
        "REPRISE_QUALITY_GUARD",
    ):  # the suite pins both off (tests/conftest.py)
        monkeypatch.delenv(pinned, raising=False)
    shipped = load_settings()
    assert shipped.step_cache == "auto" and shipped.step_cache_setting.for_role("large") == AUTO
    assert shipped.quality_guard  # guarding the total drop, step cache included


def test_auto_hosts_each_lab_model_s_recorded_choice_and_off_for_a_model_without_one(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = DiffusionRuntime(_settings(data_dir, "auto"), Role.LARGE)
    recorded = json.loads(step_cache_module.CHOICES.read_text())
    assert str(runtime.step_plan) == recorded["lab-large"]["setting"] and runtime.step_cache is not None
    runtime.switch_role(Role.SMALL)
    assert str(runtime.step_plan) == recorded["lab-small"]["setting"]
    runtime.release()
    assert runtime.step_plan == OFF
    monkeypatch.setattr(step_cache_module, "CHOICES", tmp_path / "none.json")
    unswept = DiffusionRuntime(_settings(data_dir, "auto"), Role.LARGE)
    assert unswept.step_plan == OFF and unswept.step_cache is None


def test_each_model_role_hosts_its_own_plan(data_dir: Path) -> None:
    runtime = DiffusionRuntime(_settings(data_dir, "small=deepcache:3"), Role.LARGE)
    assert runtime.step_cache is None and str(runtime.step_plan) == "off"
    runtime.switch_role(Role.SMALL)
    assert runtime.step_cache is not None and str(runtime.step_plan) == "deepcache:3"


def test_with_the_step_cache_off_the_runtime_makes_none_and_runs_unbatched_at_max_batch_one(
    data_dir: Path,
) -> None:
    runtime = DiffusionRuntime(_settings(data_dir, "off", max_batch=1), Role.LARGE)
    assert runtime.step_cache is None and not runtime.batching
    assert runtime.new_batch().step_cache is None
    cached = DiffusionRuntime(_settings(data_dir, "deepcache:3", max_batch=1), Role.LARGE)
    assert cached.batching  # a step cache runs in the batch, a batch of one at max_batch 1


@pytest.mark.parametrize("setting", ["deepcache:3", "teacache:0.2"])
def test_a_batch_mixing_full_and_reusing_members_gives_each_job_its_result_alone(
    data_dir: Path, setting: str
) -> None:
    runtime = DiffusionRuntime(_settings(data_dir, setting), Role.LARGE)
    source = DiffusionRuntime(_settings(data_dir, "off"), Role.LARGE).generate(_params(9), capture=[10])

    def members() -> list[BatchMember]:
        made = [runtime.generation_member(_params(i), capture=[5] if i == 0 else ()) for i in range(3)]
        return [*made, runtime.resume_member(_params(9), source.captured[10], 10, family=runtime.family)]

    alone = [_results(runtime.generate_batch([member]))[0] for member in members()]
    together = members()
    batched = _results(runtime.generate_batch(together, max_batch=4))
    for mine, theirs in zip(batched, alone, strict=True):
        assert _diff(mine.final_latent, theirs.final_latent) <= BATCH_ATOL
    assert _diff(batched[0].captured[5], alone[0].captured[5]) <= BATCH_ATOL
    reused = [member.reuse.reused for member in together]
    assert all(count > 0 for count in reused), reused  # every job reused work inside the batch
    # The reuse changes the images: the step cache is no no-op.
    full = DiffusionRuntime(_settings(data_dir, "off"), Role.LARGE).generate(_params(1))
    assert _diff(full.final_latent, batched[1].final_latent) > 10 * BATCH_ATOL


def test_deepcache_s_full_calls_are_each_run_s_first_step_its_captures_its_last_and_every_n(
    data_dir: Path,
) -> None:
    runtime = DiffusionRuntime(_settings(data_dir, "deepcache:3"), Role.LARGE)
    miss = runtime.generation_member(_params(0), capture=[5, 10])
    source = runtime.generate(_params(4), capture=[10])
    hit = runtime.resume_member(_params(4), source.captured[10], 10, family=runtime.family)
    _results(runtime.generate_batch([miss, hit]))
    full = miss.reuse.full_steps
    assert {0, 4, 9, STEPS - 1} <= set(full)  # first, the steps that make latents 5 and 10, the last
    assert all(b - a <= 3 for a, b in itertools.pairwise(full))
    assert len(full) + miss.reuse.reused == STEPS and len(full) < STEPS / 2
    assert hit.reuse.full_steps[0] == 10 and hit.reuse.full_steps[-1] == STEPS - 1


def test_teacache_skips_more_calls_at_a_larger_threshold(data_dir: Path) -> None:
    counts = []
    for threshold in ("0.2", "0.8"):
        runtime = DiffusionRuntime(_settings(data_dir, f"teacache:{threshold}"), Role.LARGE)
        member = runtime.generation_member(_params(2))
        _results(runtime.generate_batch([member]))
        counts.append(len(member.reuse.full_steps))
    assert STEPS > counts[0] > counts[1] >= 2


def test_teacache_on_a_model_without_a_fitted_polynomial_is_refused_with_the_command(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(step_cache_module, "FITS", tmp_path / "none.json")
    with pytest.raises(SettingsError, match="reprise bench step-cache --fit"):
        DiffusionRuntime(_settings(data_dir, "teacache:0.2"), Role.LARGE)


@pytest.mark.parametrize("setting", ["deepcache:3", "teacache:0.4"])
def test_runs_made_with_every_cache_off_are_the_full_model_s_bit_for_bit(
    data_dir: Path, setting: str
) -> None:
    runtime = DiffusionRuntime(_settings(data_dir, setting), Role.LARGE)
    plain = DiffusionRuntime(_settings(data_dir, "off"), Role.LARGE).generate(_params(1), capture=[5])
    with full_calls_only():
        member = runtime.generation_member(_params(1), capture=[5])
    (result,) = _results(runtime.generate_batch([member]))
    assert result.final_latent.tobytes() == plain.final_latent.tobytes()
    assert result.captured[5].tobytes() == plain.captured[5].tobytes()
    assert member.reuse.reused == 0 and len(member.reuse.full_steps) == STEPS
    reusing = runtime.generation_member(_params(1))  # made outside: the step cache applies again
    _results(runtime.generate_batch([reusing]))
    assert reusing.reuse.reused > 0


def test_teacache_reads_no_indicator_for_a_run_with_every_cache_off(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cache-off job (what vanilla sends) costs on a TeaCache runtime what it costs with the step
    cache off: its rows never go through the indicator's extra ResNet."""
    runtime = DiffusionRuntime(_settings(data_dir, "teacache:0.2"), Role.LARGE)
    rows_read: list[int] = []
    modulated_input = unet_parts.modulated_input

    def counting(unet: Any, sample: torch.Tensor, *rest: torch.Tensor) -> torch.Tensor:
        rows_read.append(sample.shape[0])
        return modulated_input(unet, sample, *rest)

    monkeypatch.setattr(unet_parts, "modulated_input", counting)
    with full_calls_only():
        vanilla = runtime.generation_member(_params(1))
    _results(runtime.generate_batch([vanilla]))
    assert rows_read == [] and vanilla.reuse.reused == 0
    with full_calls_only():
        vanilla = runtime.generation_member(_params(1))
    cached = runtime.generation_member(_params(2))
    _results(runtime.generate_batch([vanilla, cached], max_batch=2))
    assert rows_read and set(rows_read) == {cached.samples}  # the guided pair of the cached job alone
    assert cached.reuse.reused > 0 and vanilla.reuse.reused == 0


def test_reused_steps_are_counted_apart_from_full_evaluations(data_dir: Path) -> None:
    """Operators see the step cache at work: reprise_worker_step_cache_reused_steps_total counts the
    steps that reused a call, and the denoiser evaluations count only the full calls."""
    from prometheus_client import REGISTRY

    def sample(name: str) -> float:
        return REGISTRY.get_sample_value(name, {"role": "large", "model": "lab-large"}) or 0.0

    runtime = DiffusionRuntime(_settings(data_dir, "teacache:0.2"), Role.LARGE)
    before = {
        name: sample(f"reprise_worker_{name}")
        for name in ("denoiser_evaluations_total", "step_cache_reused_steps_total")
    }
    member = runtime.generation_member(_params(2))
    _results(runtime.generate_batch([member]))
    full, reused = len(member.reuse.full_steps), member.reuse.reused
    assert reused > 0 and full + reused == STEPS
    assert (
        sample("reprise_worker_step_cache_reused_steps_total") - before["step_cache_reused_steps_total"]
        == reused
    )
    assert sample("reprise_worker_denoiser_evaluations_total") - before["denoiser_evaluations_total"] == full
