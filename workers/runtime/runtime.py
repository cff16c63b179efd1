"""The diffusion runtime: one process hosts one role's model and runs the operations on it.

    generate  full T-step generation, capturing intermediate latents (a cache miss)
    resume    NIRVANA 4.1: continue a cached intermediate latent from step k for T-k steps
    refine    MoDM 5.1: noise a cached final latent to step k, denoise T-k steps (img2img)
    decode    LatentBox 4.1: a stored latent back to pixels, VAE only

The denoising loop is written here from the pipeline's components (encode_prompt, unet,
scheduler) rather than calling the pipeline, so that capture, evaluation counts and
cancellation are exact: diffusers' img2img picks its start with int(T * strength), which can
run one step more or less than T - k.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from PIL import Image

from core.errors import GenerationCanceled, LatentError, RoleMismatch, StepsError
from core.params import GenerationParams, Limits, check_k, check_params
from core.settings import Settings
from core.vocabulary import GPU_ROLES, Role
from workers.runtime.loading import (
    ModelSources,
    compute_dtype,
    free_device_memory,
    load_pipeline,
    load_vae,
    resolve_device,
    resolve_model_sources,
    vae_latent_channels,
)
from workers.runtime.results import DecodeResult, GenerationResult, Latent

ShouldStop = Callable[[], bool]


@dataclass(slots=True)
class _Run:
    latents: torch.Tensor
    captured: dict[int, Latent]
    step_ms: list[float]


class DiffusionRuntime:
    """Hosts one role's model (Role.LARGE, Role.SMALL or Role.DECODE) in this process.

    The model is loaded once, at construction or on `switch_role`, onto settings.device in
    float16 on CUDA and float32 on a CPU. Inputs are checked before any model work and raise
    core.errors classes. Not thread-safe: a worker runs one job at a time (prefetch 1).

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
        self._scheduler_name = scheduler
        self._limits = Limits(
            max_prompt_chars=settings.max_prompt_chars,
            max_steps=settings.max_steps,
            max_side=settings.max_side,
        )
        self.device = resolve_device(settings.device)
        self.dtype = compute_dtype(self.device)
        self._role: Role | None = None
        self._pipe: Any = None
        self._vae: Any = None  # the hosted role's VAE: the pipeline's own, or the decode model
        self._scheduler_template: Any = None
        self._family_vaes: dict[str, Any] = {}  # other families' VAEs, loaded on first use
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
        self.release()
        if role is Role.DECODE:
            self._vae = load_vae(self._sources.decode, device=self.device, dtype=self.dtype)
        else:
            self._pipe = load_pipeline(self._sources.pipeline(role), device=self.device, dtype=self.dtype)
            self._vae = self._pipe.vae
            self._scheduler_template = self._make_scheduler_template(self._pipe.scheduler)
        self._role = role

    def release(self) -> None:
        """Drop the hosted models and give their memory back (also on CUDA)."""
        self._pipe = self._vae = self._scheduler_template = None
        self._family_vaes.clear()
        self._role = None
        free_device_memory(self.device)

    # --- operations -----------------------------------------------------------------------
    def generate(
        self,
        params: GenerationParams,
        *,
        capture: Collection[int] = (),
        should_stop: ShouldStop | None = None,
    ) -> GenerationResult:
        """Run all T = params.steps steps from seeded noise; capture the latent after each step k
        in `capture` (each in 1..T-1; the final latent is always returned).

        Raises InvalidInput subclasses for bad params or captures, GenerationCanceled when
        should_stop() turns true (checked before every step).
        """
        started = time.perf_counter()
        # 1. Check inputs
        pipe = self._require_pipeline("generate")
        check_params(params, self._limits)
        for k in capture:
            if not 1 <= k <= params.steps - 1:
                raise StepsError(
                    f"capture step {k} must be in 1..{params.steps - 1} for {params.steps} steps",
                    field="capture",
                )
        with torch.inference_mode():
            # 2. Encode the prompt
            embeds, guided = self._encode_prompt(pipe, params)
            # 3. Schedule and initial noise
            scheduler = self._new_scheduler(params.steps, start_step=0)
            noise = self._noise(params, pipe.unet.config.in_channels)
            latents = noise * scheduler.init_noise_sigma
            # 4. Denoise
            run = self._denoise(
                pipe, scheduler, latents, embeds, guided, params, 0, set(capture), should_stop
            )
            # 5. Decode
            image = self._to_image(self._vae, run.latents)
        return self._result(params, run, image, start_step=0, started=started)

    def resume(
        self,
        params: GenerationParams,
        latent: Latent | torch.Tensor,
        k: int,
        *,
        family: str,
        should_stop: ShouldStop | None = None,
    ) -> GenerationResult:
        """NIRVANA: continue from a cached intermediate latent captured after step k, for the
        remaining T - k steps, conditioned on params.prompt.

        The latent must come from this family and a run with the same T and scheduler. With the
        same prompt and seed on a deterministic scheduler (DDIM eta=0) the final latent equals
        the uninterrupted run's bit for bit. Raises StepsError for k outside 1..T-1 and
        LatentError for a latent of the wrong shape, dtype or family.
        """
        started = time.perf_counter()
        # 1. Check inputs
        pipe = self._require_pipeline("resume")
        check_params(params, self._limits)
        check_k(k, params.steps)
        if family != self.family:
            raise LatentError(
                f"a latent of family {family!r} cannot be resumed by {self.model_name} "
                f"(family {self.family!r})",
                field="latent",
            )
        latents = self._checked_latent(latent, pipe.unet.config.in_channels, params)
        with torch.inference_mode():
            # 2. Encode the prompt
            embeds, guided = self._encode_prompt(pipe, params)
            # 3. Schedule: skip the first k steps (multistep/Euler schedulers index sigmas from k)
            scheduler = self._new_scheduler(params.steps, start_step=k)
            # 4. Denoise
            run = self._denoise(pipe, scheduler, latents, embeds, guided, params, k, set(), should_stop)
            # 5. Decode
            image = self._to_image(self._vae, run.latents)
        return self._result(params, run, image, start_step=k, started=started)

    def refine(
        self,
        params: GenerationParams,
        source_latent: Latent | torch.Tensor,
        source_family: str,
        k: int,
        *,
        should_stop: ShouldStop | None = None,
    ) -> GenerationResult:
        """MoDM: noise a cached final latent to the timestep of step k and denoise the remaining
        T - k steps (img2img with strength (T - k) / T), exactly T - k UNet evaluations.

        A latent of another family is decoded with that family's VAE and re-encoded with this
        model's (see workers.runtime.loading for the family -> VAE map). The noise is seeded
        by params.seed. Raises StepsError for k outside 1..T-1 and LatentError for a latent of
        the wrong shape or dtype, or of a family with no known VAE.
        """
        started = time.perf_counter()
        # 1. Check inputs
        pipe = self._require_pipeline("refine")
        check_params(params, self._limits)
        check_k(k, params.steps)
        if source_family == self.family:
            channels = pipe.unet.config.in_channels
        else:
            channels = vae_latent_channels(self._family_vae_source(source_family))
        source = self._checked_latent(source_latent, channels, params)
        with torch.inference_mode():
            # 2. Bring the source into this model's latent space
            if source_family != self.family:
                pixels = self._vae_decode(self._family_vae(source_family), source)
                source = self._vae_encode(self._vae, pixels)
            # 3. Encode the prompt
            embeds, guided = self._encode_prompt(pipe, params)
            # 4. Schedule; noise the source to the timestep of step k (the first one run)
            scheduler = self._new_scheduler(params.steps, start_step=k)
            noise = self._noise(params, channels=source.shape[1])
            latents = scheduler.add_noise(source, noise, scheduler.timesteps[k : k + 1])
            # 5. Denoise
            run = self._denoise(pipe, scheduler, latents, embeds, guided, params, k, set(), should_stop)
            # 6. Decode
            image = self._to_image(self._vae, run.latents)
        return self._result(params, run, image, start_step=k, started=started)

    def decode(self, latent: Latent | torch.Tensor, *, family: str) -> DecodeResult:
        """A stored latent (C, H/8, W/8) of `family` to its image (LatentBox decode-on-read).

        Works on every model role; the decode role hosts the large family's VAE and loads
        another family's VAE on first use. Raises LatentError for a bad latent or unknown family.
        """
        started = time.perf_counter()
        vae = self._vae if family == self.family else None
        if vae is None:
            source = self._family_vae_source(family)
            channels = vae_latent_channels(source)
        else:
            channels = int(vae.config.latent_channels)
        latents = self._checked_latent(latent, channels, None)
        with torch.inference_mode():
            image = self._to_image(vae if vae is not None else self._family_vae(family), latents)
        return DecodeResult(image=image, family=family, wall_s=time.perf_counter() - started)

    # --- steps ----------------------------------------------------------------------------
    def _denoise(
        self,
        pipe: Any,
        scheduler: Any,
        latents: torch.Tensor,
        embeds: torch.Tensor,
        guided: bool,
        params: GenerationParams,
        start_step: int,
        capture: set[int],
        should_stop: ShouldStop | None,
    ) -> _Run:
        """Run schedule steps start_step..T-1: one UNet evaluation each (both halves of a
        guidance batch in one forward pass)."""
        run = _Run(latents=latents, captured={}, step_ms=[])
        step_kwargs = self._step_kwargs(scheduler, params.seed)
        for index in range(start_step, params.steps):
            if should_stop is not None and should_stop():
                raise GenerationCanceled(f"canceled after {index} of {params.steps} steps", step=index)
            step_started = time.perf_counter()
            t = scheduler.timesteps[index]
            model_in = torch.cat([run.latents] * 2) if guided else run.latents
            model_in = scheduler.scale_model_input(model_in, t)
            noise_pred = pipe.unet(model_in, t, encoder_hidden_states=embeds, return_dict=False)[0]
            if guided:
                uncond, cond = noise_pred.chunk(2)
                noise_pred = uncond + params.guidance * (cond - uncond)
            run.latents = scheduler.step(noise_pred, t, run.latents, **step_kwargs, return_dict=False)[0]
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)  # so step_ms is the step's GPU time, not its launch
            run.step_ms.append((time.perf_counter() - step_started) * 1000.0)
            if index + 1 in capture:
                run.captured[index + 1] = _to_numpy(run.latents)
        return run

    def _encode_prompt(self, pipe: Any, params: GenerationParams) -> tuple[torch.Tensor, bool]:
        """Prompt embeddings; with guidance > 1 the negative (or empty) prompt's come first,
        batched with the prompt's, as diffusers' pipelines do."""
        guided = params.guidance > 1.0
        positive, negative = pipe.encode_prompt(
            params.prompt, self.device, 1, guided, negative_prompt=params.negative_prompt
        )
        return (torch.cat([negative, positive]) if guided else positive), guided

    def _noise(self, params: GenerationParams, channels: int) -> torch.Tensor:
        """Seeded Gaussian noise, drawn on the CPU so a seed gives the same noise on every device."""
        generator = torch.Generator("cpu").manual_seed(params.seed)
        scale = self._limits.vae_scale_factor
        shape = (1, channels, params.height // scale, params.width // scale)
        noise = torch.randn(shape, generator=generator, dtype=torch.float32)
        return noise.to(self.device, self.dtype)

    def _new_scheduler(self, steps: int, *, start_step: int) -> Any:
        """A fresh scheduler per call (schedulers keep step state), set to T steps and told where
        the run starts, so schedulers that index sigmas by step count from there."""
        scheduler = type(self._scheduler_template).from_config(self._scheduler_template.config)
        scheduler.set_timesteps(steps, device=self.device)
        if len(scheduler.timesteps) != steps:  # refused at load by `order`; this guards the indexing
            raise RuntimeError(
                f"{type(scheduler).__name__} made {len(scheduler.timesteps)} timesteps for {steps}"
            )
        if hasattr(scheduler, "set_begin_index"):
            scheduler.set_begin_index(start_step)
        return scheduler

    def _step_kwargs(self, scheduler: Any, seed: int) -> dict[str, Any]:
        """DDIM with eta=0 (deterministic, NIRVANA 6); a seeded generator for stochastic ones."""
        accepted = inspect.signature(scheduler.step).parameters
        kwargs: dict[str, Any] = {}
        if "eta" in accepted:
            kwargs["eta"] = 0.0
        if "generator" in accepted:
            kwargs["generator"] = torch.Generator("cpu").manual_seed(seed + 1)
        return kwargs

    def _make_scheduler_template(self, pipeline_scheduler: Any) -> Any:
        """The scheduler each call copies: the pipeline's own, or the one named at construction."""
        template = pipeline_scheduler
        if self._scheduler_name is not None:
            import diffusers

            cls = getattr(diffusers, self._scheduler_name, None)
            if cls is None or not hasattr(cls, "from_config"):
                raise ValueError(f"{self._scheduler_name!r} is not a diffusers scheduler class")
            template = cls.from_config(pipeline_scheduler.config)
        if getattr(template, "order", 1) != 1:
            # Step k of the schedule must be the k-th UNet evaluation for capture, resume and counts.
            raise ValueError(
                f"{type(template).__name__} evaluates the UNet {template.order} times per step; "
                "use a first-order scheduler (DDIM, Euler, DPM-Solver++ multistep, ...)"
            )
        return template

    # --- latents and pixels -------------------------------------------------------------------
    def _checked_latent(
        self, latent: Latent | torch.Tensor, channels: int, params: GenerationParams | None
    ) -> torch.Tensor:
        """Check a caller's latent and put it on the device as (1, C, h, w).

        Accepts (C, h, w) or (1, C, h, w), numpy or torch, any float dtype. With params, h and w
        must be the request's size / 8; without, within the size limits.
        """
        if isinstance(latent, np.ndarray):
            if latent.dtype.kind != "f":
                raise LatentError(f"latent dtype {latent.dtype} is not a float type", field="latent")
            tensor = torch.from_numpy(np.ascontiguousarray(latent))
        elif isinstance(latent, torch.Tensor):
            if not latent.is_floating_point():
                raise LatentError(f"latent dtype {latent.dtype} is not a float type", field="latent")
            tensor = latent.detach()
        else:
            raise LatentError(
                f"a latent must be a numpy array or tensor, got {type(latent).__name__}", field="latent"
            )
        if tensor.ndim == 4 and tensor.shape[0] == 1:
            tensor = tensor[0]
        scale = self._limits.vae_scale_factor
        if params is not None:
            expected = (channels, params.height // scale, params.width // scale)
            if tuple(tensor.shape) != expected:
                raise LatentError(
                    f"latent shape {tuple(tensor.shape)} does not fit a {params.width}x{params.height} "
                    f"image: expected {expected}",
                    field="latent",
                )
        else:
            largest = self._limits.max_side // scale
            if (
                tensor.ndim != 3
                or tensor.shape[0] != channels
                or not (1 <= tensor.shape[1] <= largest and 1 <= tensor.shape[2] <= largest)
            ):
                raise LatentError(
                    f"latent shape {tuple(tensor.shape)} is not ({channels}, h, w) with h, w in 1..{largest}",
                    field="latent",
                )
        if not bool(torch.isfinite(tensor).all()):
            raise LatentError("latent holds NaN or infinite values", field="latent")
        return tensor.unsqueeze(0).to(self.device, self.dtype)

    def _vae_decode(self, vae: Any, latents: torch.Tensor) -> torch.Tensor:
        """Latents to pixels in [-1, 1] (undoing the VAE's latent scaling and shift)."""
        shift = vae.config.shift_factor or 0.0
        scaled = latents / vae.config.scaling_factor + shift
        pixels: torch.Tensor = vae.decode(scaled.to(vae.dtype), return_dict=False)[0]
        return pixels

    def _vae_encode(self, vae: Any, pixels: torch.Tensor) -> torch.Tensor:
        """Pixels in [-1, 1] to this VAE's latents, using the posterior's mode (deterministic)."""
        posterior = vae.encode(pixels.to(vae.dtype)).latent_dist
        latents: torch.Tensor = (
            posterior.mode() - (vae.config.shift_factor or 0.0)
        ) * vae.config.scaling_factor
        return latents.to(self.dtype)

    def _to_image(self, vae: Any, latents: torch.Tensor) -> Image.Image:
        pixels = self._vae_decode(vae, latents)[0].float()
        array = ((pixels / 2 + 0.5).clamp(0, 1).permute(1, 2, 0).cpu().numpy() * 255).round().astype(np.uint8)
        return Image.fromarray(array)

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

    # --- helpers --------------------------------------------------------------------------
    def _require_pipeline(self, operation: str) -> Any:
        if self._pipe is None:
            raise RoleMismatch(
                f"{operation} needs a diffusion model; this worker hosts role {self.role.value}"
            )
        return self._pipe

    def _result(
        self, params: GenerationParams, run: _Run, image: Image.Image, *, start_step: int, started: float
    ) -> GenerationResult:
        return GenerationResult(
            image=image,
            final_latent=_to_numpy(run.latents),
            captured=run.captured,
            family=self.family,
            model=self.model_name,
            role=self.role,
            steps=params.steps,
            start_step=start_step,
            denoiser_evals={self.model_name: len(run.step_ms)},
            step_ms=tuple(run.step_ms),
            wall_s=time.perf_counter() - started,
        )


def _to_numpy(latents: torch.Tensor) -> Latent:
    """(1, C, h, w) device tensor -> (C, h, w) numpy copy in the compute dtype (lossless)."""
    array: Latent = latents[0].detach().to("cpu").numpy().copy()
    return array
