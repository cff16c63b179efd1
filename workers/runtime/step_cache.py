"""The step cache: reuse inside one request's denoising, in the step-level batch (workers.runtime.batching).

Each member of a batch carries its own reuse state (`BatchMember.reuse`), so jobs at different steps
share a batch: per step the members due a full call run as one sub-batch, and the members reusing
features as another (DeepCache) or run no model call at all (TeaCache). A member's first step (a
miss's step 0, a resumed hit's step k), its last step, and every step whose latent is captured are
full calls: the cache's stored states (NIRVANA 4.1) and the final latent are each the output of a full
call on this run's trajectory. The methods and their settings: core.step_cache.

With the setting off no StepCache is made and the batch calls the UNet as before, bit for bit.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from core.step_cache import StepCacheMethod, StepCachePlan, full_step_due
from workers.runtime import unet_parts

FITS = Path(__file__).with_name("teacache_fits.json")
"""TeaCache's rescaling polynomials per model, written by `reprise bench step-cache --fit`."""
CHOICES = Path(__file__).with_name("step_cache_choices.json")
"""Each swept model's chosen setting (what `auto` runs), written by `reprise bench step-cache --choose`."""


Rows = tuple[torch.Tensor, ...]
"""A call's tensor split by member: each member's rows."""


class Member(Protocol):
    """What a step cache reads of a batch member (workers.runtime.batching.BatchMember)."""

    step: int
    steps: int
    capture: Any
    reuse: Any


@dataclass(slots=True)
class Reuse:
    """One run's reuse state: steps since its last full call, what that call left, TeaCache's sums."""

    since_full: int | None = None
    deep: torch.Tensor | None = None  # DeepCache: the features entering the shallow up blocks
    output: torch.Tensor | None = None  # TeaCache: the last call's output
    indicator: torch.Tensor | None = None  # TeaCache: the last step's modulated input
    accumulated: float = 0.0  # TeaCache: the rescaled change since the last full call
    full_only: bool = False  # a run with every cache off (full_calls_only): no reuse at any step
    full_steps: list[int] = field(default_factory=list)  # the schedule steps run as full calls
    reused: int = 0  # steps that reused what a full call left


def _state(member: Member) -> Reuse:
    if member.reuse is None:
        member.reuse = Reuse()
    state: Reuse = member.reuse
    return state


def _forced(member: Member) -> bool:
    """The schedule's last step, and a step whose latent is captured, are full calls; every step of a
    run made under full_calls_only."""
    if _state(member).full_only:
        return True
    return member.step + 1 == member.steps or member.step + 1 in member.capture


_FULL_ONLY: ContextVar[bool] = ContextVar("step_cache_full_only", default=False)


@contextmanager
def full_calls_only(active: bool = True) -> Iterator[None]:
    """Runs made inside (their batch members, made in the caller's thread) take every step as a full
    call: a request with every cache off (`cache: off`, what the replay's vanilla sends) and the quality
    guard's fresh generation, which must be what the full large model alone makes."""
    token = _FULL_ONLY.set(active or _FULL_ONLY.get())
    try:
        yield
    finally:
        _FULL_ONLY.reset(token)


def new_reuse() -> Reuse | None:
    """A new member's reuse state: full-only under full_calls_only, else made on its first step."""
    return Reuse(full_only=True) if _FULL_ONLY.get() else None


class StepCache(Protocol):
    plan: StepCachePlan

    def predict(
        self, unet: Any, members: list[Any], model_in: torch.Tensor, t: torch.Tensor, embeds: torch.Tensor
    ) -> torch.Tensor:
        """The prediction for every member's rows, in order, as one UNet call over them would give."""
        ...


class DeepCache:
    """DeepCache (Ma et al., CVPR'24): a full call every N steps keeps the deep features; the steps in
    between run the shallow branch on them (the paper's uniform 1:N)."""

    def __init__(self, plan: StepCachePlan, unet: Any) -> None:
        unet_parts.check_supported(unet, plan.depth)
        self.plan = plan

    def predict(
        self, unet: Any, members: list[Any], model_in: torch.Tensor, t: torch.Tensor, embeds: torch.Tensor
    ) -> torch.Tensor:
        rows = [m.samples for m in members]
        inputs, steps, states = _split(model_in, rows), _split(t, rows), _split(embeds, rows)
        due = [full_step_due(self.plan, since_full=_state(m).since_full, forced=_forced(m)) for m in members]
        outputs: list[torch.Tensor | None] = [None] * len(members)
        full = [i for i, d in enumerate(due) if d]
        if full:
            out, deep = unet_parts.forward(
                unet, *_gather(full, inputs, steps, states), keep_depth=self.plan.depth
            )
            assert deep is not None
            taken = [rows[i] for i in full]
            for i, o, f in zip(full, _split(out, taken), _split(deep, taken), strict=True):
                outputs[i] = o
                state = _state(members[i])
                state.deep, state.since_full = f, 0
                state.full_steps.append(members[i].step)
        cached = [i for i, d in enumerate(due) if not d]
        if cached:
            deep = torch.cat([_state(members[i]).deep for i in cached])  # type: ignore[misc]
            out = unet_parts.shallow(unet, *_gather(cached, inputs, steps, states), deep, self.plan.depth)
            for i, o in zip(cached, _split(out, [rows[i] for i in cached]), strict=True):
                outputs[i] = o
                state = _state(members[i])
                state.since_full, state.reused = (state.since_full or 0) + 1, state.reused + 1
        return torch.cat(outputs)  # type: ignore[arg-type]


class TeaCache:
    """TeaCache (Liu et al., CVPR'25): skip a step's model call while the accumulated change of the
    timestep-modulated input, rescaled by the model's fitted polynomial, stays below δ;
    the skipped step reuses the last call's output. In a UNet, whose output is not a residual of its
    input, the reused quantity is the noise prediction itself."""

    def __init__(self, plan: StepCachePlan, unet: Any, coefficients: list[float]) -> None:
        unet_parts.check_supported(unet, 1)
        self.plan = plan
        self.coefficients = coefficients

    def predict(
        self, unet: Any, members: list[Any], model_in: torch.Tensor, t: torch.Tensor, embeds: torch.Tensor
    ) -> torch.Tensor:
        rows = [m.samples for m in members]
        inputs, steps, states = _split(model_in, rows), _split(t, rows), _split(embeds, rows)
        indicators = self._indicators(unet, members, inputs, steps, states)
        full = [i for i, m in enumerate(members) if self._due(m, indicators[i])]
        outputs = [_state(m).output for m in members]
        if full:
            x, ts, ehs = _gather(full, inputs, steps, states)
            out = unet(x, ts, encoder_hidden_states=ehs, return_dict=False)[0]
            for i, o in zip(full, _split(out, [rows[i] for i in full]), strict=True):
                outputs[i] = o
                state = _state(members[i])
                state.output, state.accumulated = o, 0.0
                state.full_steps.append(members[i].step)
        for i in set(range(len(members))) - set(full):
            _state(members[i]).reused += 1
        return torch.cat(outputs)  # type: ignore[arg-type]

    @staticmethod
    def _indicators(
        unet: Any, members: list[Any], inputs: Rows, steps: Rows, states: Rows
    ) -> list[torch.Tensor | None]:
        """Each member's modulated input; None for a run under full_calls_only, which never reuses, so
        that a cache-off job (vanilla's) costs on this runtime what it costs with the step cache off."""
        watched = [i for i, m in enumerate(members) if not _state(m).full_only]
        found: list[torch.Tensor | None] = [None] * len(members)
        if watched:
            computed = unet_parts.modulated_input(unet, *_gather(watched, inputs, steps, states))
            for i, indicator in zip(
                watched, _split(computed, [members[i].samples for i in watched]), strict=True
            ):
                found[i] = indicator
        return found

    def _due(self, member: Member, indicator: torch.Tensor | None) -> bool:
        state = _state(member)
        if indicator is None:
            return True
        previous, state.indicator = state.indicator, indicator
        if previous is None or state.output is None or _forced(member):
            return True
        state.accumulated += max(0.0, float(np.polyval(self.coefficients, relative_l1(indicator, previous))))
        return state.accumulated >= self.plan.threshold


def relative_l1(now: torch.Tensor, before: torch.Tensor) -> float:
    """TeaCache's distance, relative L1: mean |now - before| over mean |before|."""
    return float((now - before).abs().mean() / before.abs().mean().clamp_min(1e-12))


def _gather(
    chosen: list[int], inputs: Rows, steps: Rows, states: Rows
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The chosen members' rows of the call's inputs, timesteps and prompt states."""
    return tuple(torch.cat([part[i] for i in chosen]) for part in (inputs, steps, states))  # type: ignore[return-value]


def _split(tensor: torch.Tensor, rows: list[int]) -> Rows:
    return tuple(torch.split(tensor, rows))


def teacache_fit(model: str, fits: Path | None = None) -> list[float]:
    """The model's fitted rescaling polynomial; ValueError with the command that fits one."""
    path = FITS if fits is None else fits
    known = json.loads(path.read_text()) if path.is_file() else {}
    if model not in known:
        raise ValueError(
            f"teacache needs its rescaling polynomial fitted on {model}: run `reprise bench step-cache "
            f"--fit SOURCE` with the model's source (e.g. lab:large); fitted: {sorted(known) or 'none'}"
        )
    coefficients: list[float] = known[model]["coefficients"]
    return coefficients


def chosen_setting(model: str, choices: Path | None = None) -> str | None:
    """The setting the lab's sweep chose for `model` (its name in compute accounting), None if never swept."""
    path = CHOICES if choices is None else choices
    known: dict[str, dict[str, Any]] = json.loads(path.read_text()) if path.is_file() else {}
    record = known.get(model)
    return None if record is None else str(record["setting"])


def make_step_cache(plan: StepCachePlan, unet: Any, model: str) -> StepCache | None:
    """The step cache of `plan` on a loaded UNet, None when off. ValueError for a UNet it cannot run."""
    if plan.method is StepCacheMethod.DEEPCACHE:
        return DeepCache(plan, unet)
    if plan.method is StepCacheMethod.TEACACHE:
        return TeaCache(plan, unet, teacache_fit(model))
    return None
