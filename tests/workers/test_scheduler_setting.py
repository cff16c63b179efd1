"""REPRISE_SCHEDULER reaches the runtime: the configured scheduler runs every call, resumes stay exact
with the ones the resume policy accepts, and a pipeline whose own scheduler cannot resume is refused
when it loads."""

from __future__ import annotations

import numpy as np
import pytest

from core.errors import SettingsError
from core.params import GenerationParams
from core.schedulers import SchedulerName
from core.settings import Settings
from core.vocabulary import HitPolicy, Role
from workers.runtime import DiffusionRuntime

PARAMS = GenerationParams(prompt="a red circle", seed=3, steps=10, width=64, height=64)


@pytest.mark.parametrize("name", [SchedulerName.DDIM, SchedulerName.EULER])
def test_the_configured_scheduler_runs_and_resumes_exactly(
    tiny_settings: Settings, name: SchedulerName
) -> None:
    runtime = DiffusionRuntime(tiny_settings.model_copy(update={"scheduler": name}), Role.SMALL)
    full = runtime.generate(PARAMS, capture={4})
    resumed = runtime.resume(PARAMS, full.captured[4], 4, family="tiny-sd")
    assert np.array_equal(resumed.final_latent, full.final_latent)
    other = DiffusionRuntime(
        tiny_settings.model_copy(update={"scheduler": SchedulerName.DPM_PP, "hit_policy": HitPolicy.REFINE}),
        Role.SMALL,
    )
    assert not np.array_equal(other.generate(PARAMS).final_latent, full.final_latent)  # it did change


def test_a_pipeline_scheduler_that_cannot_resume_is_refused_at_load(
    tiny_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tiny pipeline's own scheduler is DDIM: stand in a model shipping DPM-Solver++ (a history-keeping
    solver, like Stable Diffusion 1.5's own PNDM)."""
    from workers.runtime.denoising import scheduler_template

    def shipped(pipeline_scheduler: object, _name: str | None) -> object:
        return scheduler_template(pipeline_scheduler, "DPMSolverMultistepScheduler")

    monkeypatch.setattr("workers.runtime.hosting.scheduler_template", shipped)
    settings = tiny_settings.model_copy(update={"scheduler": SchedulerName.PIPELINE})
    with pytest.raises(SettingsError, match="DPMSolverMultistepScheduler cannot resume"):
        DiffusionRuntime(settings, Role.SMALL).generate(PARAMS)
    refine = settings.model_copy(update={"hit_policy": HitPolicy.REFINE})
    assert DiffusionRuntime(refine, Role.SMALL).generate(PARAMS).steps_run == PARAMS.steps
