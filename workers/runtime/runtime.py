"""The diffusion runtime: one process hosts one role's model (workers.runtime.hosting) and runs on it:

    generate  full T-step generation, capturing intermediate latents (a cache miss)
    resume    NIRVANA 4.1: continue a cached intermediate latent from step k for T-k steps
    refine    MoDM 5.1: noise a cached final latent to step k, denoise T-k steps (img2img)
    decode    LatentBox 4.1: a stored latent back to pixels, VAE only
and batches several generate and resume runs in one UNet call per step (workers.runtime.batching):
generation_member / resume_member prepare a job as a batch member, new_batch makes the batch a
worker loop admits them to between steps, batch_result turns a retired member into its result, and
generate_batch runs a list of members to the end.

Each operation checks its inputs, then runs the denoising loop of workers.runtime.denoising
(capture, evaluation counts, cancellation) and the VAE of workers.runtime.latents. generate, resume
and refine return the final latent and decode it to an image only when asked (decode=True):
LatentBox stores latents and decodes on read. `vae_decodes` counts every VAE decoder pass. The time
each takes of a job's run is its stage (workers.stages): encode_prompt, denoise, vae_decode, vae_encode.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection, Sequence
from typing import Any

import torch
from PIL import Image

from core.errors import GenerationCanceled, LatentError, RoleMismatch, StepsError
from core.params import GenerationParams, check_k, check_params
from core.vocabulary import Role
from workers import metrics, stages
from workers.runtime.batch_loop import BatchLoop
from workers.runtime.batching import BatchMember, DenoisingBatch
from workers.runtime.decode_batching import DecodeBatcher
from workers.runtime.denoising import (
    DenoiseRun,
    OnStep,
    ShouldStop,
    denoise,
    new_scheduler,
    seeded_noise,
)
from workers.runtime.hosting import ModelHost
from workers.runtime.latents import checked_latent, to_image, to_images, to_numpy, vae_decode, vae_encode
from workers.runtime.loading import vae_latent_channels
from workers.runtime.prompts import PromptEmbeddings
from workers.runtime.results import DecodeResult, GenerationResult, Latent


class DiffusionRuntime(ModelHost):
    """Runs the operations on the model it hosts (workers.runtime.hosting.ModelHost: the role,
    its loading and switching, the scheduler setting).

    Inputs are checked before any model work and raise core.errors classes. With max_batch
    (settings.max_batch) above 1, generate, resume and refine may be called from several threads at
    once: each prepares its job in its own thread and runs its steps in the shared BatchLoop; with
    max_batch 1 one thread drives it, one job at a time. switch_role only between batches.
    """

    _loop: BatchLoop | None = None  # the worker's batch, made on the first batched run
    _encoding = threading.Lock()  # prompt encoding, one thread at a time (_encode_prompt)
    _prompts = PromptEmbeddings()  # the process's prompt embeddings, kept per text encoder
    _decodes: DecodeBatcher | None = None  # a decode node's batched decodes, made on first use
    _decodes_made = threading.Lock()

    # --- operations -----------------------------------------------------------------------
    def generate(
        self,
        params: GenerationParams,
        *,
        capture: Collection[int] = (),
        should_stop: ShouldStop | None = None,
        decode: bool = False,
        on_step: OnStep | None = None,
    ) -> GenerationResult:
        """Run all T = params.steps steps from seeded noise; capture the latent after each step k
        in `capture` (each in 1..T-1; the final latent is always returned, the image with decode).

        Raises InvalidInput subclasses for bad params or captures, GenerationCanceled when
        should_stop() turns true (checked before every step).
        """
        started = time.perf_counter()
        if self.batching:  # the same run as a member of the worker's batch (workers.runtime.batch_loop)
            member = self.generation_member(params, capture=capture, should_stop=should_stop, on_step=on_step)
            return self._batched(member, decode=decode, started=started)
        # 1. Check inputs
        pipe = self._require_pipeline("generate")
        check_params(params, self._limits)
        _check_capture(capture, params.steps)
        with torch.inference_mode():
            # 2. Encode the prompt
            embeds, guided = self._encode_prompt(pipe, params)
            # 3. Schedule and initial noise
            scheduler = self._new_scheduler(params.steps, start_step=0)
            noise = self._noise(params, pipe.unet.config.in_channels)
            latents = noise * scheduler.init_noise_sigma
            # 4. Denoise
            run = denoise(
                pipe,
                scheduler,
                latents,
                embeds,
                guided,
                params,
                0,
                set(capture),
                should_stop,
                device=self.device,
                on_step=on_step,
            )
            # 5. Decode, when pixels are asked for
            image = self._to_image(self._vae, run.latents) if decode else None
        return self._result(params.steps, run, image, start_step=0, started=started, decodes=int(decode))

    def resume(
        self,
        params: GenerationParams,
        latent: Latent | torch.Tensor,
        k: int,
        *,
        family: str,
        should_stop: ShouldStop | None = None,
        decode: bool = False,
        on_step: OnStep | None = None,
    ) -> GenerationResult:
        """NIRVANA: continue from a cached intermediate latent captured after step k, for the
        remaining T - k steps, conditioned on params.prompt.

        The latent must come from this family and a run with the same T and scheduler. With the
        same prompt and seed on a deterministic scheduler (DDIM eta=0) the final latent equals
        the uninterrupted run's bit for bit. Raises StepsError for k outside 1..T-1 and
        LatentError for a latent of the wrong shape, dtype or family.
        """
        started = time.perf_counter()
        if self.batching:
            member = self.resume_member(
                params, latent, k, family=family, should_stop=should_stop, on_step=on_step
            )
            return self._batched(member, decode=decode, started=started)
        # 1. Check inputs
        pipe = self._require_pipeline("resume")
        latents = self._resumable_latent(pipe, params, latent, k, family)
        with torch.inference_mode():
            # 2. Encode the prompt
            embeds, guided = self._encode_prompt(pipe, params)
            # 3. Schedule: skip the first k steps (multistep/Euler schedulers index sigmas from k)
            scheduler = self._new_scheduler(params.steps, start_step=k)
            # 4. Denoise
            run = denoise(
                pipe,
                scheduler,
                latents,
                embeds,
                guided,
                params,
                k,
                set(),
                should_stop,
                device=self.device,
                on_step=on_step,
            )
            # 5. Decode, when pixels are asked for
            image = self._to_image(self._vae, run.latents) if decode else None
        return self._result(params.steps, run, image, start_step=k, started=started, decodes=int(decode))

    def refine(
        self,
        params: GenerationParams,
        source_latent: Latent | torch.Tensor,
        source_family: str,
        k: int,
        *,
        should_stop: ShouldStop | None = None,
        decode: bool = False,
        on_step: OnStep | None = None,
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
            crossing = source_family != self.family
            if crossing:
                pixels = vae_decode(self._family_vae(source_family), source)
                self.vae_decodes += 1
                source = vae_encode(self._vae, pixels, self.dtype)
            # 3. Encode the prompt
            embeds, guided = self._encode_prompt(pipe, params)
            # 4. Schedule; noise the source to the timestep of step k (the first one run)
            scheduler = self._new_scheduler(params.steps, start_step=k)
            noise = self._noise(params, channels=source.shape[1])
            latents = scheduler.add_noise(source, noise, scheduler.timesteps[k : k + 1])
        if self.batching:  # 5. Denoise, in the worker's batch from step k
            member = self._member(params, latents, embeds, scheduler, k, (), should_stop, on_step)
            return self._batched(member, decode=decode, started=started, decodes=int(crossing))
        with torch.inference_mode():
            # 5. Denoise
            run = denoise(
                pipe,
                scheduler,
                latents,
                embeds,
                guided,
                params,
                k,
                set(),
                should_stop,
                device=self.device,
                on_step=on_step,
            )
            # 6. Decode, when pixels are asked for
            image = self._to_image(self._vae, run.latents) if decode else None
        decodes = int(crossing) + int(decode)
        return self._result(params.steps, run, image, start_step=k, started=started, decodes=decodes)

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
        if vae is not None and self.role is Role.DECODE and self.max_batch > 1:  # a decode node's threads
            image = self._decode_batcher().decode(latents, family)
        else:
            with torch.inference_mode():
                image = self._to_image(vae if vae is not None else self._family_vae(family), latents)
        return DecodeResult(image=image, family=family, wall_s=time.perf_counter() - started)

    def _decode_batcher(self) -> DecodeBatcher:
        """The decode node's batcher (workers.runtime.decode_batching), made on first use."""
        with self._decodes_made:
            if self._decodes is None:
                self._decodes = DecodeBatcher(self.decode_many, max_batch=self.max_batch)
            return self._decodes

    def decode_many(self, latents: Sequence[torch.Tensor], family: str) -> list[Image.Image]:
        """One VAE call over checked (1, C, h, w) latents of the hosted family, stacked: their images."""
        self.vae_decodes += len(latents)
        with torch.inference_mode(), metrics.timed(metrics.DECODE_SECONDS, role=self.role.value):
            return to_images(self._vae, torch.cat(list(latents)))

    # --- step-level batching (workers.runtime.batching) ------------------------------------
    @property
    def batching(self) -> bool:
        """Whether generate, resume and refine run in the worker's shared batch (max_batch > 1, or a step
        cache on, which runs in the batch): the callers' threads each hand their job to one BatchLoop."""
        return self.max_batch > 1 or self.step_cache is not None

    def switch_role(self, role: Role) -> None:
        """ModelHost.switch_role, refused while a batch runs (a worker switches between batches)."""
        loop = getattr(self, "_loop", None)
        if role is not getattr(self, "_role", None) and loop is not None and loop.busy:
            raise RoleMismatch(f"cannot host {role.value} while a batch of jobs runs on the current model")
        super().switch_role(role)

    def _batched(
        self, member: BatchMember, *, decode: bool, started: float, decodes: int = 0
    ) -> GenerationResult:
        """Run `member` in the worker's batch, then decode it when asked (in the caller's thread)."""
        if self._loop is None:
            self._loop = BatchLoop(self.new_batch, role=self.role.value)
        run = self._loop.run(member)
        with torch.inference_mode():
            image = self._to_image(self._vae, run.latents) if decode else None
        return self._result(
            member.steps,
            run,
            image,
            start_step=member.start_step,
            started=started,
            decodes=decodes + int(decode),
        )

    def new_batch(self, max_batch: int | None = None) -> DenoisingBatch:
        """An empty batch on the hosted model's UNet, of max_batch members (default: settings)."""
        pipe = self._require_pipeline("a batch")
        size = self.max_batch if max_batch is None else max_batch
        return DenoisingBatch(pipe.unet, max_batch=size, device=self.device, step_cache=self.step_cache)

    def generation_member(
        self,
        params: GenerationParams,
        *,
        capture: Collection[int] = (),
        should_stop: ShouldStop | None = None,
        on_step: OnStep | None = None,
    ) -> BatchMember:
        """generate's run as a batch member: the same checks, prompt encoding and seeded noise;
        the member starts at step 0. Raises what generate raises for bad params or captures."""
        pipe = self._require_pipeline("generate")
        check_params(params, self._limits)
        _check_capture(capture, params.steps)
        with torch.inference_mode():
            embeds, _ = self._encode_prompt(pipe, params)
            scheduler = self._new_scheduler(params.steps, start_step=0)
            latents = self._noise(params, pipe.unet.config.in_channels) * scheduler.init_noise_sigma
        return self._member(params, latents, embeds, scheduler, 0, capture, should_stop, on_step)

    def resume_member(
        self,
        params: GenerationParams,
        latent: Latent | torch.Tensor,
        k: int,
        *,
        family: str,
        should_stop: ShouldStop | None = None,
        on_step: OnStep | None = None,
    ) -> BatchMember:
        """resume's run as a batch member: it joins at step k with the latent captured after k
        steps. Raises what resume raises for a bad k, latent or family."""
        pipe = self._require_pipeline("resume")
        latents = self._resumable_latent(pipe, params, latent, k, family)
        with torch.inference_mode():
            embeds, _ = self._encode_prompt(pipe, params)
            scheduler = self._new_scheduler(params.steps, start_step=k)
        return self._member(params, latents, embeds, scheduler, k, (), should_stop, on_step)

    def batch_result(self, member: BatchMember, *, decode: bool = False) -> GenerationResult:
        """A retired member's result, as generate or resume returns it (wall_s from the member's
        making; step_ms: the batch steps it took part in). Raises its GenerationCanceled."""
        run = member.result()
        with torch.inference_mode():
            image = self._to_image(self._vae, run.latents) if decode else None
        return self._result(
            member.steps,
            run,
            image,
            start_step=member.start_step,
            started=member.created,
            decodes=int(decode),
        )

    def generate_batch(
        self,
        members: Sequence[BatchMember],
        *,
        max_batch: int | None = None,
        decode: bool = False,
    ) -> list[GenerationResult | GenerationCanceled]:
        """Run members to the end in one batch, admitting the next as a slot frees (continuous
        batching); results in the order given, a canceled member's GenerationCanceled in its place."""
        batch = self.new_batch(max_batch)
        waiting = list(members)
        outcomes: dict[int, GenerationResult | GenerationCanceled] = {}
        while waiting or len(batch):
            while waiting and batch.free_slots:
                batch.admit(waiting.pop(0))
            for member in batch.step().retired:
                outcomes[id(member)] = self._outcome(member, decode=decode)
        return [outcomes[id(member)] for member in members]

    # --- helpers --------------------------------------------------------------------------
    def _member(
        self,
        params: GenerationParams,
        latents: torch.Tensor,
        embeds: torch.Tensor,
        scheduler: Any,
        start_step: int,
        capture: Collection[int],
        should_stop: ShouldStop | None,
        on_step: OnStep | None,
    ) -> BatchMember:
        return BatchMember(
            latents=latents,
            scheduler=scheduler,
            embeds=embeds,
            guidance=params.guidance,
            steps=params.steps,
            step=start_step,
            seed=params.seed,
            capture=capture,
            should_stop=should_stop,
            on_step=on_step,
        )

    def _outcome(self, member: BatchMember, *, decode: bool) -> GenerationResult | GenerationCanceled:
        try:
            return self.batch_result(member, decode=decode)
        except GenerationCanceled as canceled:
            return canceled

    def _resumable_latent(
        self, pipe: Any, params: GenerationParams, latent: Latent | torch.Tensor, k: int, family: str
    ) -> torch.Tensor:
        """resume's input checks: params, k, the latent's family, shape and values."""
        check_params(params, self._limits)
        check_k(k, params.steps)
        if family != self.family:
            raise LatentError(
                f"a latent of family {family!r} cannot be resumed by {self.model_name} "
                f"(family {self.family!r})",
                field="latent",
            )
        return self._checked_latent(latent, pipe.unet.config.in_channels, params)

    def _encode_prompt(self, pipe: Any, params: GenerationParams) -> tuple[torch.Tensor, bool]:
        """encode_prompt, one thread at a time: a tokenizer shared by threads is not safe. Measured with
        four batching threads encoding at once on the lab's model: about one run in five came out with
        another prompt's embedding (a final latent off by up to 2.6); with this lock, none in 20."""
        with self._encoding, stages.stage("encode_prompt"):  # the wait for the lock is no model call
            return self._prompts.encode(pipe, params, self.device)

    def _to_image(self, vae: Any, latents: torch.Tensor) -> Image.Image:
        self.vae_decodes += 1
        with metrics.timed(metrics.DECODE_SECONDS, role=self.role.value):
            return to_image(vae, latents)

    def _new_scheduler(self, steps: int, *, start_step: int) -> Any:
        return new_scheduler(self._scheduler_template, steps, start_step=start_step, device=self.device)

    def _noise(self, params: GenerationParams, channels: int) -> torch.Tensor:
        scale = self._limits.vae_scale_factor
        return seeded_noise(params, channels, scale=scale, device=self.device, dtype=self.dtype)

    def _checked_latent(
        self, latent: Latent | torch.Tensor, channels: int, params: GenerationParams | None
    ) -> torch.Tensor:
        return checked_latent(
            latent, channels, params, limits=self._limits, device=self.device, dtype=self.dtype
        )

    def _result(
        self,
        steps: int,
        run: DenoiseRun,
        image: Image.Image | None,
        *,
        start_step: int,
        started: float,
        decodes: int,
    ) -> GenerationResult:
        metrics.observe_steps(
            self.role.value, self.model_name, run.step_ms, device=self.device, reused=run.reused_steps
        )
        stages.add("denoise", sum(run.step_ms) - run.shared_ms)  # its rows' share of each batched call
        return GenerationResult(
            image=image,
            final_latent=to_numpy(run.latents),
            captured=run.captured,
            family=self.family,
            model=self.model_name,
            role=self.role,
            steps=steps,
            start_step=start_step,
            denoiser_evals={self.model_name: len(run.step_ms)},
            step_ms=tuple(run.step_ms),
            wall_s=time.perf_counter() - started,
            vae_decodes=decodes,
            shared_s=run.shared_ms / 1000.0,
        )


def _check_capture(capture: Collection[int], steps: int) -> None:
    for k in capture:
        if not 1 <= k <= steps - 1:
            raise StepsError(f"capture step {k} must be in 1..{steps - 1} for {steps} steps", field="capture")
