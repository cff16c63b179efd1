"""Hosting one role's model in a process: loading it onto the device (float16 on CUDA, float32 on a
CPU), switching roles (MoDM 5.3's pool moves), giving its memory back, and the VAEs of other latent
families. The diffusion runtime (workers.runtime.runtime) runs its operations on the model hosted here.
"""

from __future__ import annotations

import time
from typing import Any

from core.errors import LatentError, RoleMismatch, SettingsError
from core.params import Limits
from core.schedulers import DIFFUSERS_CLASS, resume_refusal
from core.settings import Settings
from core.step_cache import OFF, resolve
from core.vocabulary import GPU_ROLES, HitPolicy, Role
from workers import metrics
from workers.runtime.denoising import scheduler_template
from workers.runtime.loading import (
    ModelSources,
    compute_dtype,
    free_device_memory,
    load_pipeline,
    load_vae,
    resolve_device,
    resolve_model_sources,
)
from workers.runtime.step_cache import StepCache, chosen_setting, make_step_cache


class ModelHost:
    """Hosts one role's model (Role.LARGE, Role.SMALL or Role.DECODE) in this process.

    The model is loaded once, at construction or on `switch_role`, onto settings.device in
    float16 on CUDA and float32 on a CPU.

    scheduler: the name of a diffusers scheduler class (e.g. "EulerDiscreteScheduler") built
    from the pipeline's scheduler config; None keeps the pipeline's own (DDIM for the tiny
    models). Resume is exact only for deterministic single-step schedulers (DDIM with eta=0,
    Euler): a multistep scheduler restarts its history at k, and a stochastic one draws
    different noise. Schedulers must take one UNet evaluation per step (Heun and other
    second-order ones are refused).
    """

    def __init__(
        self,
        settings: Settings,
        role: Role,
        *,
        scheduler: str | None = None,
    ) -> None:
        self._sources: ModelSources = resolve_model_sources(settings)
        # Explicit class name (tests, benchmarks) or the configured one (REPRISE_SCHEDULER).
        self._scheduler_name = scheduler if scheduler is not None else DIFFUSERS_CLASS[settings.scheduler]
        self._refuse_inexact_resume = settings.hit_policy is HitPolicy.RESUME and scheduler is None
        self._limits = Limits(
            max_prompt_chars=settings.max_prompt_chars,
            max_steps=settings.max_steps,
            max_side=settings.max_side,
        )
        self.max_batch = settings.max_batch
        self._step_setting = settings.step_cache_setting
        self.step_plan = OFF  # the hosted model's plan, set by switch_role
        self.step_cache: StepCache | None = None  # made for each model hosted (workers.runtime.step_cache)
        self.device = resolve_device(settings.device)
        self.dtype = compute_dtype(self.device)
        self._role: Role | None = None
        self._pipe: Any = None
        self._vae: Any = None  # the hosted role's VAE: the pipeline's own, or the decode model
        self._scheduler_template: Any = None
        self._family_vaes: dict[str, Any] = {}  # other families' VAEs, loaded on first use
        self.vae_decodes = 0  # VAE decoder passes run by this runtime, every operation together
        self.switch_role(role)

    # --- hosting ------------------------------------------------------------------------
    @property
    def role(self) -> Role:
        if self._role is None:
            raise RoleMismatch("the runtime was released and hosts no model")
        return self._role

    @property
    def family(self) -> str:
        """The latent family of the hosted model."""
        return self._sources.family(self.role)

    @property
    def model_name(self) -> str:
        """The hosted model's name, the key of denoiser_evals."""
        return self._sources.name(self.role)

    @property
    def native_size(self) -> int:
        """The side in pixels the hosted model was trained at (SD 1.5: 512; tiny: 64)."""
        if self.role is not Role.DECODE:
            return int(self._pipe.unet.config.sample_size) * self._limits.vae_scale_factor
        return int(self._vae.config.sample_size)

    def switch_role(self, role: Role) -> None:
        """Host `role`'s model, releasing the current one's memory first. No-op for the same role."""
        if role not in GPU_ROLES:
            raise ValueError(f"role {role.value} hosts no model; model roles: large, small, decode")
        if role is self._role:
            return
        previous = self._role
        started = time.perf_counter()
        self.release()
        with metrics.timed(metrics.MODEL_LOAD_SECONDS, role=role.value):
            if role is Role.DECODE:
                self._vae = load_vae(self._sources.decode, device=self.device, dtype=self.dtype)
            else:
                self._pipe = load_pipeline(self._sources.pipeline(role), device=self.device, dtype=self.dtype)
        if role is not Role.DECODE:
            self._vae = self._pipe.vae
            self._scheduler_template = scheduler_template(self._pipe.scheduler, self._scheduler_name)
            refusal = resume_refusal(type(self._scheduler_template).__name__)
            if self._refuse_inexact_resume and refusal is not None:
                raise SettingsError(refusal)  # REPRISE_SCHEDULER=pipeline on a model whose own cannot resume
            name, configured = self._sources.name(role), self._step_setting.for_role(role.value)
            try:  # auto: the plan the lab's sweep chose for this model (core.step_cache.resolve)
                self.step_plan = resolve(configured, chosen_setting(name))
                self.step_cache = make_step_cache(self.step_plan, self._pipe.unet, name)
            except ValueError as error:
                raise SettingsError(f"REPRISE_STEP_CACHE={configured} on {name}: {error}") from error
        self._role = role
        if previous is not None:  # a pool move (MoDM 5.3): the old model out, the new one in
            metrics.ROLE_SWITCH_SECONDS.labels(from_role=previous.value, to_role=role.value).observe(
                time.perf_counter() - started
            )

    def release(self) -> None:
        """Drop the hosted models and give their memory back (also on CUDA)."""
        self._pipe = self._vae = self._scheduler_template = self.step_cache = None
        self.step_plan = OFF
        self._family_vaes.clear()
        self._role = None
        free_device_memory(self.device)

    # --- the hosted models ---------------------------------------------------------------
    def _family_vae_source(self, family: str) -> Any:
        source = self._sources.vae_for_family(family)
        if source is None:
            known = sorted({self._sources.large_family, self._sources.small_family})
            raise LatentError(
                f"latent family {family!r} is unknown here; known families: {known}", field="family"
            )
        return source

    def _family_vae(self, family: str) -> Any:
        """Another family's VAE, loaded on first use and kept until the role changes."""
        if family not in self._family_vaes:
            source = self._family_vae_source(family)
            self._family_vaes[family] = load_vae(source, device=self.device, dtype=self.dtype)
        return self._family_vaes[family]

    def _require_pipeline(self, operation: str) -> Any:
        if self._pipe is None:
            raise RoleMismatch(
                f"{operation} needs a diffusion model; this worker hosts role {self.role.value}"
            )
        return self._pipe
