"""The step cache setting: reuse of work inside one request's denoising, on top of the approximate
cache's reuse across requests.

    off              every step is a full model call (the runtime as it was, bit for bit)
    deepcache:N      DeepCache (Ma et al., CVPR'24, its "uniform 1:N"): a full UNet call every
    deepcache:N:D    N steps; in between only the shallow branch (the outermost D down and up blocks)
                     runs, on the high-level features the last full call left. D defaults to 1, the
                     paper's shallowest skip branch.
    teacache:δ       TeaCache (Liu et al., CVPR'25): skip a step's model call while the
                     accumulated, rescaled relative change of the timestep-modulated input stays below
                     δ, and reuse the last call's output (its polynomial rescaling, fitted on
                     the model by `reprise bench step-cache --fit`).
    auto             the setting the lab's sweep chose for the model hosted (the fastest within its
                     judged-drop budget, recorded by `reprise bench step-cache --choose`), off for a
                     model never swept: resolved when a worker loads the model (resolve).

One value applies to every model; `large=teacache:0.2,small=deepcache:5` gives each model role its own
(a role not named runs off). Pure: the parse and the plan. The mechanisms are workers.runtime.step_cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class StepCacheMethod(StrEnum):
    OFF = "off"
    DEEPCACHE = "deepcache"
    TEACACHE = "teacache"
    AUTO = "auto"  # the model's recorded choice, resolved at load (resolve)


@dataclass(frozen=True, slots=True)
class StepCachePlan:
    """A parsed REPRISE_STEP_CACHE: the method and its parameters."""

    method: StepCacheMethod = StepCacheMethod.OFF
    interval: int = 1  # deepcache: a full call every `interval` steps
    depth: int = 1  # deepcache: the shallow branch's down/up blocks
    threshold: float = 0.0  # teacache: δ, the accumulated change below which a call is skipped

    @property
    def on(self) -> bool:
        return self.method is not StepCacheMethod.OFF

    def __str__(self) -> str:
        if self.method is StepCacheMethod.DEEPCACHE:
            return f"deepcache:{self.interval}" + (f":{self.depth}" if self.depth != 1 else "")
        if self.method is StepCacheMethod.TEACACHE:
            return f"teacache:{self.threshold:g}"
        return self.method.value


OFF = StepCachePlan()
AUTO = StepCachePlan(StepCacheMethod.AUTO)
ROLES = ("large", "small")  # the model roles a GPU worker hosts (core.vocabulary.Role's model roles)


@dataclass(frozen=True, slots=True)
class StepCacheSetting:
    """REPRISE_STEP_CACHE as a whole: one plan for every model, or a plan per model role (`large=...,
    small=...`, a role not named runs off), since each model tolerates reuse to its own degree."""

    plans: tuple[tuple[str, StepCachePlan], ...]

    def for_role(self, role: str) -> StepCachePlan:
        return dict(self.plans).get(role, OFF)

    @property
    def on(self) -> bool:
        return any(plan.on for _, plan in self.plans)

    def __str__(self) -> str:
        distinct = {plan for _, plan in self.plans}
        if len(distinct) == 1 and len(self.plans) == len(ROLES):
            return str(next(iter(distinct)))
        return ",".join(f"{role}={plan}" for role, plan in self.plans)


def parse_setting(value: str) -> StepCacheSetting:
    """A REPRISE_STEP_CACHE value: a plan for every model, or `role=plan` pairs joined by commas."""
    if "=" not in value:
        plan = parse_step_cache(value)
        return StepCacheSetting(tuple((role, plan) for role in ROLES))
    plans: dict[str, StepCachePlan] = {}
    for part in value.split(","):
        role, _, text = part.partition("=")
        role = role.strip().lower()
        if role not in ROLES or role in plans:
            raise ValueError(
                f"step cache {value!r}: name each of {', '.join(ROLES)} once, e.g. large=teacache:0.2"
            )
        plans[role] = parse_step_cache(text)
    return StepCacheSetting(tuple((role, plans.get(role, OFF)) for role in ROLES))


FORMS = "off, auto, deepcache:N (N >= 2), deepcache:N:D (D >= 1 blocks), or teacache:δ (0 < δ < 1)"


def parse_step_cache(value: str) -> StepCachePlan:
    """A REPRISE_STEP_CACHE value as a plan; ValueError naming the accepted forms."""
    text = value.strip().lower()
    if text in ("", "off", "none"):
        return OFF
    if text == StepCacheMethod.AUTO:
        return AUTO
    method, _, rest = text.partition(":")
    parts = rest.split(":") if rest else []
    try:
        if method == StepCacheMethod.DEEPCACHE and len(parts) in (1, 2):
            interval, depth = int(parts[0]), int(parts[1]) if len(parts) == 2 else 1
            if interval >= 2 and depth >= 1:
                return StepCachePlan(StepCacheMethod.DEEPCACHE, interval=interval, depth=depth)
        if method == StepCacheMethod.TEACACHE and len(parts) == 1:
            threshold = float(parts[0])
            if 0.0 < threshold < 1.0:
                return StepCachePlan(StepCacheMethod.TEACACHE, threshold=threshold)
    except ValueError:
        pass
    raise ValueError(f"step cache {value!r} is not one of: {FORMS}")


def resolve(plan: StepCachePlan, chosen: str | None) -> StepCachePlan:
    """The plan a model runs: `auto` becomes the model's recorded choice (`chosen`, a setting) or off
    when it has none; any other plan stays as configured."""
    if plan.method is not StepCacheMethod.AUTO:
        return plan
    resolved = OFF if chosen is None else parse_step_cache(chosen)
    if resolved.method is StepCacheMethod.AUTO:
        raise ValueError("a recorded step cache choice names a setting, not auto")
    return resolved


def full_step_due(plan: StepCachePlan, *, since_full: int | None, forced: bool) -> bool:
    """DeepCache's uniform schedule for one run: whether its next step must be a full call. The first
    step a run takes (since_full None: a miss's step 0, a resumed hit's step k) is full, and so is every
    interval-th after the last full one and every step the caller forces (workers.runtime.step_cache:
    the schedule's last step, and each step whose latent is captured, so a cached state is always the
    output of a full call)."""
    if since_full is None or forced:
        return True
    return since_full + 1 >= plan.interval
