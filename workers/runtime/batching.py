"""Step-level (continuous) batching: several jobs' denoising runs on one loaded pipeline share one
UNet forward pass per step, each sample at its own timestep.

A cache hit resumed at step k (NIRVANA 4.1) and a miss at step 0 run the same UNet at different
timesteps; UNet2DConditionModel takes one timestep per sample, so a GPU worker can run both in one
call. A `DenoisingBatch` holds the runs of one model at one latent shape. A worker loop admits jobs
between steps (`admit`), runs one step over every active member (`step`), and collects the members
that step retired, finished or canceled; so a job joins at its own step and leaves at its last,
without waiting for the others: continuous batching as LLM servers do it, one denoising step per
iteration.

Each member keeps what `denoise()` keeps for one job: its latents, its own scheduler instance and
step kwargs (schedulers hold step state), its prompt embeddings (guided: the unconditional and
conditional pair as `encode_prompt` returns it, two samples; unguided: one), its guidance, its
capture set and its callbacks. Per step, the member's rows of the shared prediction get its own
guidance and its own scheduler's step at its own timestep: the operations `denoise()` runs, on the
same values, so only the UNet's kernels see the batch. These per-member steps are a Python loop:
on the lab's large model on a CPU everything but the UNet call costs 1.5 ms of a 62 ms step at batch
8 and 3.6 ms of 130 at batch 16 (`reprise bench runtime --batch`: step_ms against unet_ms), so the
DDIM step is not vectorized across members (3% at most to win), and any first-order scheduler works.

Exactness. A batch of one runs the same kernels on the same shapes as `denoise()` and equals it bit
for bit. With several members the UNet's CPU kernels (oneDNN convolutions, blocked matmuls) change
their blocking with the batch dimension, so a sample's prediction can differ from its prediction
alone in the last bits (up to 1e-6 in one call of the lab's UNet), and the job's own dynamics carry
the difference through the remaining steps. Measured in float32 on a CPU, 50 DDIM steps, batches of
2 to 32 mixing misses, resumed hits and guidances, the largest difference of a final latent from the
same job run alone (`DiffusionRuntime.generate` / `resume`):
    lab prompts, guidance 1 to 20, large and small models         6.6e-5  (latents up to 19)
    other prompts (the models' world is shapes), guidance <= 20   9.3e-4  (small model, guidance 20)
The stated tolerance, BATCH_ATOL = 5e-3, holds for guidance up to 20. Above it no tolerance holds:
at guidance 30 to 50 a job's trajectory is unstable, so that a 1e-6 change of its starting noise
alone moves its final latent by up to 0.4 (the large model, guidance 50), and a batched run moved
one by 2.5; there only a batch of one gives the unbatched bits. A member canceled mid-batch leaves
the others' results within the tolerance of a batch run without it, and bit for bit when it leaves
before the batch's first step with it. float16 on CUDA has kernels of its own; `reprise bench runtime
--batch ...` measures batch_max_abs_diff on the card. There a latent is stored in float16, whose
spacing at the lab's magnitudes (8 to 16) is 2**-7 = 0.0078, above BATCH_ATOL: a batched job that
rounds one element the other way is one unit in the last place off. Measured on an H100 (`reprise
bench gpu`, worker_loop: 8 jobs of T = 50 at once), 6 of 7 equal their runs alone bit for bit and one
differs by one unit in the last place (on the retrained lab, 4 of 7, the others 0.0059 to 0.0078 off,
docs/results/gpu.md). The unit is the latent's, not each element's: a scheduler step
computes a small element from large ones (DDIM's predicted x0 divides by sqrt(alpha_bar), then the
step takes most of it away again), so a rounding at the latent's magnitude lands on elements far
smaller (on the retrained lab, 0.0078 off on elements below 2, where their own unit is 0.001).
`within_batch_tolerance` states the tolerance for every dtype: BATCH_ATOL plus BATCH_ULPS units in
the last place of the stored dtype at the latent's largest magnitude.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from core.errors import BatchFull, GenerationCanceled
from workers.runtime.denoising import DenoiseRun, OnStep, ShouldStop, step_kwargs
from workers.runtime.latents import to_numpy
from workers.runtime.results import Latent
from workers.runtime.step_cache import StepCache, new_reuse

BATCH_ATOL = 5e-3
"""Largest absolute difference allowed between a batched member's final latent and the same job run
alone, in float32 on a CPU, for guidance up to 20 (measured: 9.3e-4 at most; see the module doc)."""
BATCH_ULPS = 2  # a rounding the other way on each side: batched and alone


def within_batch_tolerance(batched: npt.NDArray[Any], alone: npt.NDArray[Any]) -> bool:
    """Whether a batched job's latent is within the stated tolerance of the same job run alone,
    element by element: BATCH_ATOL plus BATCH_ULPS units in the last place of the stored dtype at the
    latent's largest magnitude (the scale its arithmetic rounds at)."""
    spacing = float(np.spacing(np.abs(alone).max(initial=0)))  # in the stored dtype
    delta = np.abs(batched.astype(np.float64) - alone.astype(np.float64))
    return bool((delta <= BATCH_ATOL + BATCH_ULPS * spacing).all())


@dataclass(kw_only=True, eq=False, slots=True)
class BatchMember:
    """One job's denoising run inside a DenoisingBatch: schedule steps `step`..steps-1 to run.

    latents: (1, C, h, w), the input of schedule step `step` (noise for a miss; for a hit resumed at
    k, the latent captured after k steps). scheduler: a fresh instance for this job
    (denoising.new_scheduler with start_step=step). embeds: (2, L, D) [unconditional, conditional]
    when guidance > 1, else (1, L, D). capture: steps k after which the latent is kept (as in
    denoise()). should_stop is asked before each step; on_step is told (steps done, steps) after it.
    A member that a callback fails is retired with the error recorded; the others go on.
    """

    latents: torch.Tensor
    scheduler: Any
    embeds: torch.Tensor
    guidance: float
    steps: int
    step: int
    seed: int
    capture: Collection[int] = ()
    should_stop: ShouldStop | None = None
    on_step: OnStep | None = None
    captured: dict[int, Latent] = field(init=False, default_factory=dict)
    step_ms: list[float] = field(init=False, default_factory=list)
    shared_ms: float = field(init=False, default=0.0)  # of step_ms, what ran the other members' samples
    start_step: int = field(init=False)
    error: Exception | None = field(init=False, default=None)
    step_options: dict[str, Any] = field(init=False)
    created: float = field(init=False, default_factory=time.perf_counter)  # for a job's wall time
    reuse: Any = field(init=False, default=None)  # the step cache's state for this run (step_cache.Reuse)

    def __post_init__(self) -> None:
        if self.latents.ndim != 4 or self.latents.shape[0] != 1:
            raise ValueError(f"a member's latents are (1, C, h, w), got {tuple(self.latents.shape)}")
        if self.embeds.ndim != 3 or self.embeds.shape[0] != self.samples:
            given = tuple(self.embeds.shape)
            raise ValueError(f"guidance {self.guidance} takes {self.samples} prompt embeddings, got {given}")
        if not 0 <= self.step < self.steps:
            raise ValueError(f"start step {self.step} is outside 0..{self.steps - 1}")
        if len(self.scheduler.timesteps) != self.steps:
            made = len(self.scheduler.timesteps)
            raise ValueError(f"the scheduler is set to {made} steps, not {self.steps}")
        self.capture = frozenset(self.capture)
        self.start_step = self.step
        self.step_options = step_kwargs(self.scheduler, self.seed)  # made once, as denoise() does
        self.reuse = new_reuse()  # full calls only when made under step_cache.full_calls_only

    @property
    def guided(self) -> bool:
        return self.guidance > 1.0

    @property
    def samples(self) -> int:
        """Rows this member takes in the UNet's batch: the guidance pair, or one."""
        return 2 if self.guided else 1

    @property
    def done(self) -> bool:
        """Retired: every step run, or stopped by an error."""
        return self.error is not None or self.step == self.steps

    @property
    def timestep(self) -> Any:
        """The timestep of the step this member runs next."""
        return self.scheduler.timesteps[self.step]

    def result(self) -> DenoiseRun:
        """The run, as denoise() returns it; raises the recorded error (GenerationCanceled) instead."""
        if self.error is not None:
            raise self.error
        if self.step < self.steps:
            raise RuntimeError(f"the member is at step {self.step} of {self.steps}: not finished")
        return DenoiseRun(
            latents=self.latents,
            captured=self.captured,
            step_ms=self.step_ms,
            shared_ms=self.shared_ms,
            reused_steps=0 if self.reuse is None else self.reuse.reused,
        )

    def model_input(self) -> torch.Tensor:
        """This member's rows of the UNet's input, scaled by its own scheduler."""
        model_in = torch.cat([self.latents] * 2) if self.guided else self.latents
        scaled: torch.Tensor = self.scheduler.scale_model_input(model_in, self.timestep)
        return scaled

    def take_step(self, noise_pred: torch.Tensor) -> None:
        """Apply this member's guidance to its rows of the prediction and its scheduler's step."""
        if self.guided:
            uncond, cond = noise_pred.chunk(2)
            noise_pred = uncond + self.guidance * (cond - uncond)
        self.latents = self.scheduler.step(
            noise_pred, self.timestep, self.latents, **self.step_options, return_dict=False
        )[0]

    def stopped(self) -> bool:
        """Ask should_stop; a cancel or a failing callback is recorded, and the member retires."""
        try:
            if self.should_stop is not None and self.should_stop():
                message = f"canceled after {self.step} of {self.steps} steps"
                raise GenerationCanceled(message, step=self.step)
        except Exception as error:
            self.error = error
        return self.error is not None

    def finish_step(self, ms: float, share: float = 1.0) -> None:
        """Book the step just taken: its time (of which `share` ran this member's samples), the capture,
        progress; then move to the next step."""
        self.step += 1
        self.step_ms.append(ms)
        self.shared_ms += ms * (1.0 - share)
        if self.step in self.capture:
            self.captured[self.step] = to_numpy(self.latents)
        try:
            if self.on_step is not None:
                self.on_step(self.step, self.steps)
        except Exception as error:
            self.error = error


@dataclass(frozen=True, slots=True)
class BatchStep:
    """What one DenoisingBatch.step() did: how many members its UNet call ran (0: none was left),
    its wall time and the UNet call's within it, and the members it retired (finished or failed)."""

    size: int
    ms: float
    unet_ms: float
    retired: tuple[BatchMember, ...]


class DenoisingBatch:
    """The denoising runs of one pipeline's UNet at one latent shape, stepped together.

    Up to max_batch members (jobs; a guided one is two UNet samples). admit() between steps; step()
    asks each member's should_stop, runs one UNet call over every active member, each at its own
    timestep, and retires the members that finished or failed. Not thread-safe: one worker loop
    drives it.
    """

    def __init__(
        self, unet: Any, *, max_batch: int, device: torch.device, step_cache: StepCache | None = None
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {max_batch}")
        self.unet = unet
        self.step_cache = step_cache  # None: every step one full UNet call over every member
        self.max_batch = max_batch
        self.device = device
        self._members: list[BatchMember] = []

    def __len__(self) -> int:
        return len(self._members)

    @property
    def members(self) -> tuple[BatchMember, ...]:
        """The active members, in admission order."""
        return tuple(self._members)

    @property
    def free_slots(self) -> int:
        return self.max_batch - len(self._members)

    def fits(self, member: BatchMember) -> bool:
        """Whether `member` can share this batch's UNet call: an empty batch takes any member; otherwise
        its latents and prompt embeddings must have the members' sample shape, dtype and device."""
        if not self._members:
            return True
        first = self._members[0]
        return all(
            _layout(getattr(member, name)) == _layout(getattr(first, name)) for name in ("latents", "embeds")
        )

    def admit(self, member: BatchMember) -> None:
        """Add a member; it runs from its own step at the next step(). Raises BatchFull when full and
        ValueError for a member that cannot share the UNet call (another shape, dtype or device)."""
        if any(member is other for other in self._members):
            raise ValueError("the member is already in the batch")
        if member.done:
            raise ValueError("the member has already finished")
        if not self.free_slots:
            raise BatchFull(f"the batch holds its max_batch={self.max_batch} members")
        if self._members:
            first = self._members[0]
            for name in ("latents", "embeds"):
                mine, theirs = _layout(getattr(member, name)), _layout(getattr(first, name))
                if mine != theirs:
                    raise ValueError(f"{name} {mine} cannot share a UNet call with {name} {theirs}")
        self._members.append(member)

    def step(self) -> BatchStep:
        """One schedule step of every active member in one UNet call; the members it retired."""
        with torch.inference_mode():
            return self._step()

    def _step(self) -> BatchStep:
        started = time.perf_counter()
        # 1. Ask each member whether to stop: a canceled one leaves before the UNet call
        stopped = [member for member in self._members if member.stopped()]
        active = [member for member in self._members if member.error is None]
        if not active:
            self._members = []
            return BatchStep(size=0, ms=0.0, unet_ms=0.0, retired=tuple(stopped))
        # 2. One UNet call: each member's rows at its own timestep
        rows = [member.samples for member in active]
        model_in = torch.cat([member.model_input() for member in active])
        timesteps = [member.timestep.reshape(1).expand(n) for member, n in zip(active, rows, strict=True)]
        embeds = torch.cat([member.embeds for member in active])
        unet_started = time.perf_counter()
        t = torch.cat(timesteps).to(self.device)
        if self.step_cache is None:
            noise_pred = self.unet(model_in, t, encoder_hidden_states=embeds, return_dict=False)[0]
        else:  # full and reusing members as sub-batches (workers.runtime.step_cache)
            noise_pred = self.step_cache.predict(self.unet, active, model_in, t, embeds)
        self._synchronize()
        unet_ms = (time.perf_counter() - unet_started) * 1000.0
        # 3. Each member's guidance and scheduler step on its own rows
        for member, prediction in zip(active, noise_pred.split(rows), strict=True):
            member.take_step(prediction)
        self._synchronize()  # so step_ms is the step's device time, not its launch
        ms = (time.perf_counter() - started) * 1000.0
        # 4. Capture, progress; retire the finished
        samples = sum(rows)
        for member, n in zip(active, rows, strict=True):
            member.finish_step(ms, share=n / samples)  # its rows' part of the call
        self._members = [member for member in active if not member.done]
        retired = tuple(stopped) + tuple(member for member in active if member.done)
        return BatchStep(size=len(active), ms=ms, unet_ms=unet_ms, retired=retired)

    def _synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def _layout(tensor: torch.Tensor) -> str:
    """What members must share to be one UNet call: a sample's shape, the dtype and the device."""
    return f"{tuple(tensor.shape[1:])} {str(tensor.dtype).removeprefix('torch.')} on {tensor.device}"
