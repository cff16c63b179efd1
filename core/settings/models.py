"""Models and generation: which diffusion pipelines the GPU pools load and on what device, and the
denoising schedule every image job follows (T, the captured steps K, the scheduler)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Self

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode

from core.schedulers import SchedulerName
from core.step_cache import StepCacheSetting, parse_setting
from core.vocabulary import BUILTIN_FAMILIES, CUSTOM_FAMILY, ModelSet


class ModelSettings(BaseSettings):
    """Models and generation: model sources, latent families, device and the denoising schedule.

    A model is a Hugging Face id or a local path loaded with `from_pretrained`, or a model the project
    builds itself (lab:large, lab:small, tiny:large...: `reprise models lab`, `reprise models tiny`).
    Misses run on the large model for T steps and leave their latents at every step in K; hits resume
    or refine on the small one.
    """

    model_set: ModelSet = Field(ModelSet.LAB, description="Built models used for unset models: lab or tiny.")
    large_model: str | None = Field(None, description="Large pipeline: HF id, path, lab:large. Unset: built.")
    small_model: str | None = Field(None, description="Small pipeline for hits. Unset: <model_set>:small.")
    decode_model: str | None = Field(
        None, description="VAE for the decode pool. Unset: the large model's `vae` subfolder."
    )
    large_family: str = Field("", description="Latent family of the large model. Unset: a built model's own.")
    small_family: str = Field("", description="Latent family of the small model. Unset: a built model's own.")
    device: str = Field("auto", description="auto (cuda when present, else cpu), cpu, or cuda[:N].")
    lab_weights: Path | None = Field(
        None,
        description="The quality lab's trained weights: a `reprise models train --out` directory (its "
        "manifest.json beside them). Unset: the committed lab/weights.",
    )

    steps: int = Field(50, ge=1, le=1000, description="Default T (NIRVANA 6: N = 50 DDIM steps).")
    capture_steps: Annotated[list[int], NoDecode] = Field(
        default_factory=lambda: [5, 10, 15, 20, 25],
        description="Steps K whose latents are cached (NIRVANA 5.3: K = {5,10,15,20,25}). Comma list.",
    )
    default_size: int | None = Field(
        None, ge=8, description="Side of a request that gives none. Unset: 512 (SD 1.5), 64 for built models."
    )
    scheduler: SchedulerName = Field(
        SchedulerName.DDIM,
        description="Denoising scheduler: ddim (NIRVANA 6), euler, euler-a, dpm++, pndm, lms, or pipeline "
        "(the model's own). Under the resume hit policy only ddim and euler resume exactly.",
    )

    step_cache: str = Field(
        "auto",
        description="Reuse inside a request's denoising (core.step_cache): off, deepcache:N[:D] "
        "(DeepCache, CVPR'24: a full UNet call every N steps, the outer D blocks between), teacache:δ "
        "(TeaCache, CVPR'25: skip a call while the rescaled input change stays below δ), or auto (the "
        "setting the lab's sweep chose for the model hosted, workers/runtime/step_cache_choices.json; off "
        "for a model never swept); one for every model, or large=...,small=... per model role. auto by "
        "default: the sweep (docs/results/step-cache.md, 500 prompts a setting) chose teacache:0.2 for "
        "lab:large and deepcache:5 for lab:small within 0.01 of judged drop, and stacked on the approximate "
        "cache the default stack served 1.84x vanilla's requests/s at a judged drop of -0.025 on an unseen "
        "lab trace (1.25x without it, docs/results/step-cache.md#on-the-live-stack). Requests with "
        "cache: off run every step in full.",
    )

    @field_validator("step_cache")
    @classmethod
    def _check_step_cache(cls, value: str) -> str:
        return str(parse_setting(value))

    @property
    def step_cache_setting(self) -> StepCacheSetting:
        return parse_setting(self.step_cache)

    @field_validator("capture_steps", mode="before")
    @classmethod
    def _parse_capture_steps(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [int(part) for part in value.replace(" ", "").split(",") if part]
        return value

    @field_validator("capture_steps")
    @classmethod
    def _check_capture_steps(cls, value: list[int]) -> list[int]:
        if any(k <= 0 for k in value):
            raise ValueError("every capture step must be a positive integer, e.g. 5,10,15,20,25")
        return sorted(set(value))

    @field_validator("lab_weights")
    @classmethod
    def _check_lab_weights(cls, value: Path | None) -> Path | None:
        if value is not None and not (value / "manifest.json").is_file():
            raise ValueError(
                f"{value} holds no trained lab weights (no manifest.json): point it at the --out "
                "directory of `reprise models train`, or unset it for the committed lab/weights"
            )
        return value

    @model_validator(mode="after")
    def _check_models(self) -> Self:
        if any(k >= self.steps for k in self.capture_steps):
            raise ValueError(
                f"capture_steps {self.capture_steps} must all be below steps={self.steps}: "
                "set REPRISE_CAPTURE_STEPS to steps inside 1..T-1"
            )
        for role in ("large", "small"):
            source = self.model_source(role)
            if source.startswith(("lab:", "tiny:")) and source not in BUILTIN_FAMILIES:
                raise ValueError(
                    f"{role}_model={source!r} is no built model; built: {', '.join(BUILTIN_FAMILIES)}"
                )
            if not getattr(self, f"{role}_family"):
                setattr(self, f"{role}_family", BUILTIN_FAMILIES.get(source, CUSTOM_FAMILY))
        return self

    def model_source(self, role: str) -> str:
        """The large or small model in use: the configured one, or '<model_set>:<role>'."""
        configured: str | None = getattr(self, f"{role}_model")
        return configured if configured is not None else f"{self.model_set}:{role}"

    @property
    def effective_default_size(self) -> int:
        builtin = 64 if self.model_source("large") in BUILTIN_FAMILIES else 512
        return self.default_size if self.default_size is not None else builtin
