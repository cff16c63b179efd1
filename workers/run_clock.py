"""A GPU run's clock: its deadline, and whether a step has hung.

A run is told to this clock by its own callbacks (workers.operation.run_denoising): a step begins when
the run is asked whether to stop (before each step, by the batch loop's thread or by denoise()), and ends
when its progress is told (after it). The lease's heartbeat reads the clock (workers.lease): the lease is
renewed only while the run keeps to its deadline and no step has hung, so a run that stopped making
progress loses its job to another worker.

The deadline, from the run's start (its claim):

    deadline_s = min(cap_s, max(floor_s, slack x steps x step_s))

steps: the steps the run has to make (T - k for a hit resumed at k); step_s: the mean of its own steps so
far (the batch it shares included: what a step costs this run on this worker now). Before its first step
ends the cost is unknown and the deadline is the cap (the task time limit); a first step that hangs is
caught by the stall instead. The floor holds what is not a step (the prompt, the cached latent, the decode
and the store), the slack a step that slows as the batch fills; both are settings (core.settings,
reliability).
"""

from __future__ import annotations

from dataclasses import dataclass

from core.settings import Settings


@dataclass(frozen=True)
class DeadlinePolicy:
    """How long a run may take (floor_s, slack, cap_s) and how long one step may (stall_s)."""

    floor_s: float
    slack: float
    cap_s: float
    stall_s: float

    @classmethod
    def from_settings(cls, settings: Settings) -> DeadlinePolicy:
        return cls(
            floor_s=settings.run_deadline_floor_s,
            slack=settings.run_deadline_slack,
            cap_s=float(settings.task_time_limit_s),
            stall_s=settings.run_stall_s,
        )

    def budget_s(self, steps: int | None, step_s: float | None) -> float:
        """The run's time from its start: the cap while its step cost is unknown."""
        if steps is None or step_s is None:
            return self.cap_s
        return min(self.cap_s, max(self.floor_s, self.slack * steps * step_s))


class RunClock:
    """One run's steps as its callbacks tell them (any thread), and its fault as its lease reads it."""

    def __init__(self, policy: DeadlinePolicy, *, now: float) -> None:
        self.policy = policy
        self.started = now
        self.open_since: float | None = None  # the step begun and not yet ended
        self.steps_timed = 0
        self.step_seconds = 0.0
        self.steps: int | None = None  # what the run has to make: total - its first step

    def step_begins(self, now: float) -> None:
        if self.open_since is None:
            self.open_since = now

    def step_ended(self, step: int, total: int, now: float) -> None:
        """Step `step` of `total` is done (counted from 1; a hit resumed at k tells k + 1 first)."""
        if self.steps is None:
            self.steps = total - (step - 1)
        if self.open_since is not None:
            self.step_seconds += now - self.open_since
            self.steps_timed += 1
        self.open_since = None

    def run_ended(self) -> None:
        """The denoising ended (finished, canceled or failed): no step is open any more."""
        self.open_since = None

    @property
    def step_s(self) -> float | None:
        return self.step_seconds / self.steps_timed if self.steps_timed else None

    @property
    def deadline(self) -> float:
        return self.started + self.policy.budget_s(self.steps, self.step_s)

    def overdue(self, now: float) -> str | None:
        """Why the run is past its deadline, or None."""
        if now < self.deadline:
            return None
        cost = f"{self.step_s * 1e3:.0f} ms a step" if self.step_s is not None else "no step timed"
        return f"past its deadline: {now - self.started:.0f}s for {self.steps or '?'} steps ({cost})"

    def stalled(self, now: float) -> str | None:
        """Why a step has hung (it began stall_s ago and has not ended), or None."""
        since = self.open_since
        if since is None or now - since < self.policy.stall_s:
            return None
        return f"a denoising step has not returned for {now - since:.0f}s (a hung model call)"

    def fault(self, now: float) -> str | None:
        """The stall, else the deadline: why the run's lease must not be renewed, or None."""
        return self.stalled(now) or self.overdue(now)
