"""Pools and monitor: which GPU pool serves hits, how many jobs a GPU worker denoises together, and
MoDM 5.3's global monitor (Algorithm 1 with a PID controller) that moves GPU workers between the large
and small pools."""

from __future__ import annotations

from typing import Self

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings

from core.vocabulary import MonitorMode


class PoolSettings(BaseSettings):
    """Pools and monitor (MoDM 5.3): hit routing, the batch size of a GPU worker, the monitor's mode,
    period, PID gains and pool bounds.

    Under the DiffServe allocator (see the cascade) the monitor solves DiffServe's MILP every period
    instead of running Algorithm 1.
    """

    large_serves_hits: bool = Field(
        True,
        description="Large workers also take cache_hit tasks when cache_miss is empty (DESIGN: 'small pool, "
        "or large when idle'). Off: hits run only on the small pool.",
    )
    max_batch: int = Field(
        8,
        ge=1,
        le=256,
        description="Jobs a GPU worker denoises together, one UNet call per step, each at its own step "
        "(step-level batching, workers.runtime.batching; a guided job is two UNet samples), and reads a "
        "decode node decodes together, one VAE call (workers.runtime.decode_batching). 8 by "
        "measurement: `reprise bench runtime --batch 1,2,4,8,16` found the lab's large model's images/s "
        "growing to 8 jobs (2.6x one job's on a CPU) and no further at 16 (docs/results/simulator.md, "
        "'Step-level batching').",
    )
    cohost: bool = Field(
        True,
        description="A small worker that batches (REPRISE_MAX_BATCH > 1) also hosts the large model and "
        "takes misses (cache_miss, cache_hit_large) when no hit is waiting, under MoDM's allocator: the "
        "split between the pools becomes a choice per job rather than a pool move a monitor period later. "
        "On by measurement (docs/results/throughput.md, 16 clients, each stack against its own vanilla "
        "replay): on 200 prompts with almost no hits it served 0.95x of vanilla where one model per "
        "worker served 0.72x (the small worker idle until the monitor moved it); on a lab trace with 60% "
        "hits 2.61 requests/s against 2.67 without it, the same within this machine's noise. Off: a small "
        "worker runs its own model's queues only.",
    )
    monitor_enabled: bool = Field(
        True, description="Run MoDM 5.3's monitor: it moves GPU workers between the large and small pools."
    )
    monitor_mode: MonitorMode = Field(
        MonitorMode.THROUGHPUT,
        description="throughput (MoDM's default, Appendix Q.9: every hit on the small model) or quality "
        "(MoDM 5.3.1: as many large workers as the request rate allows).",
    )
    monitor_period_s: int = Field(
        60,
        ge=60,
        multiple_of=60,
        description="Seconds between two decisions; the monitor reads the statistics intervals (60 s, "
        "db.stats) of the last period. MoDM 5.3 re-plans once per monitoring period and gives no length.",
    )
    monitor_kp: float = Field(0.6, ge=0, description="PID proportional gain (MoDM 5.3: Kp = 0.6).")
    monitor_ki: float = Field(0.05, ge=0, description="PID integral gain (MoDM 5.3: Ki = 0.05).")
    monitor_kd: float = Field(0.05, ge=0, description="PID derivative gain (MoDM 5.3: Kd = 0.05).")
    monitor_min_large: int = Field(
        1, ge=1, description="Fewest large workers (MoDM Algorithm 1 line 29 keeps at least one)."
    )
    monitor_max_large: int | None = Field(
        None, ge=1, description="Most large workers; unset: no limit (MoDM 5.3 sets none)."
    )
    monitor_min_small: int = Field(
        0, ge=0, description="Fewest small workers (MoDM Algorithm 1 may give every GPU to the large model)."
    )
    monitor_max_small: int | None = Field(
        None, ge=0, description="Most small workers; unset: no limit (MoDM 5.3 sets none)."
    )
    monitor_large_step_ms: float | None = Field(
        None,
        gt=0,
        description="Per-step time of the large model assumed until a large worker has run (MoDM Table 1: "
        "P_large is profiled). Measured service times replace it. Unset: the small model's, if measured.",
    )
    monitor_small_step_ms: float | None = Field(
        None,
        gt=0,
        description="Per-step time of the small model assumed until a small worker has run (MoDM Table 1: "
        "P_small is profiled). Measured service times replace it. Unset: the large model's, if measured.",
    )

    @model_validator(mode="after")
    def _check_pool_bounds(self) -> Self:
        for role in ("large", "small"):
            low, high = getattr(self, f"monitor_min_{role}"), getattr(self, f"monitor_max_{role}")
            if high is not None and high < low:
                raise ValueError(
                    f"monitor_max_{role}={high} is below monitor_min_{role}={low}: raise "
                    f"REPRISE_MONITOR_MAX_{role.upper()} or lower REPRISE_MONITOR_MIN_{role.upper()}"
                )
        return self
