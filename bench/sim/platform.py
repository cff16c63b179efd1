"""The platform's per-job cost, from the stages a live replay measured: what a job costs beyond its
denoising steps, charged to the simulated jobs so that the simulated speedup over vanilla is the stack's.

A replay (`bench replay --json`, bench.live) reports each job's time by stage, per route and apart for
its vanilla run (`stages`, `vanilla_stages`: {"hit"|"miss": {STAGE: {median_ms, total_s, jobs}}}), and
every stack process's CPU per request by role (`cpu_ms_per_request`, `vanilla_cpu_ms_per_request`). The
stages fall in three kinds (the design's compute accounting, DESIGN.md):

- device (`DEVICE_STAGES`): the model calls. The simulator prices these itself, from the step costs
  (bench.run.costs), so that a trace with other hits than the replay's costs what its own steps cost;
- the worker's platform work (`WORKER_STAGES`): claiming the job, reading the cached item, scoring,
  storing, filling the cache, completing and announcing it. Charged per job by route: a hit carries a
  hit's, a miss a miss's; the route's cost per job is its stages' total over its jobs (a mean:
  throughput is a sum of costs, so the mean is its per-job share; a replay without job counts gives
  the medians, and says so);
- `queue` is waiting, never cost; `admission` runs in the admit process, whose CPU the shared host
  charges through its role (below). Any other stage, and any route but hit and miss (the cascade's
  heavy runs), is listed as not charged.

Two hosts, two models (`PlatformHost`):

SHARED (the default: every throughput figure of the repository ran the whole stack on 2 CPU cores,
docs/results/throughput.md). The model calls are CPU work too, and every process (API, admit pool, GPU
workers, Postgres, Redis) takes from the same cores, so throughput is the cores' CPU over the CPU a
request costs (2000 ms of CPU a second / CPU ms per request): the issue's measurement, requests/s
followed CPU per request to 1%. So a job is charged, beside its priced steps:
    its route's worker stages, as CPU: their wall time times the workers' CPU per wall millisecond in
    that run (the GPU workers' roles' `cpu_ms_per_request` over their stages' wall time per request:
    under contention a stage's wall time holds waits for the cores, which CPU time does not),
  + the CPU every other process spent per request (the roles outside the GPU pools: API, admit,
    decode, io, beat, Postgres, Redis), the same for both routes (a role's CPU is not split by route).
BESIDE (a GPU host: the platform's work runs on cores beside the accelerators). Only the worker stages
are charged, at their wall time: a worker loop waits for its own platform work, the other processes
run on their own cores.

The scale. The simulator's steps are priced from a runtime bench (one process, its own step times);
the replay's costs are the stack's. One factor converts the replay's milliseconds into the
simulation's, fitted on the replay's own vanilla run: the simulated device time of a vanilla job
(steps at the costs, batched as the simulation batches them) over the device time the replay measured
for its vanilla jobs (as CPU on a shared host). The replay's ratio of platform to device work per job
is so kept, and the level cancels in the speedup as it does for the steps (bench.run.compare). A
replay without a vanilla run is fitted on its own misses, which are vanilla's jobs, and says so.

Vanilla's jobs are charged vanilla's costs (`vanilla_stages`, `vanilla_cpu_ms_per_request`); where the
replay made no vanilla run, the configured run's miss costs, and the description says so. A replay
without `stages` models no platform cost: the simulation runs as before and its report says so.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.run.options import PlatformHost
from jobs.pools.policy import POOL_ROLES

DEVICE_STAGES = ("encode_prompt", "denoise", "vae_decode", "vae_encode")
"""The model calls (the design's device time); priced by the simulator's step costs."""
WORKER_STAGES = ("claim", "read", "score", "store", "cache_fill", "complete", "notify")
"""The GPU worker's platform work on a job (workers.stages: the claim and the read before the model calls,
scoring, storing, the cache fill, the completion and its announcement after them): charged per job on
the worker that runs it."""
NOT_COST = ("queue",)
"""Waiting for a worker: time, not work."""
OTHER_PROCESS = ("admission",)
"""Stages of other processes (the admit pool): charged through their role's CPU on a shared host."""
GPU_ROLES = tuple(str(role) for role in POOL_ROLES)
"""The roles whose CPU is the GPU workers' (jobs.pools.policy.POOL_ROLES: large, small)."""
SUMS = ("total",)
"""Keys of `cpu_ms_per_request` that sum the roles (bench.live.cpu.per_request_ms): no process."""
ROUTES = ("hit", "miss")


@dataclass(frozen=True, slots=True)
class RunCosts:
    """One live run's measured costs per job, in the replay's milliseconds: `platform_ms` by route
    (worker stages, plus the other processes' CPU on a shared host), `device_ms` by route (the model
    calls, as CPU on a shared host), and how the stages were read."""

    platform_ms: Mapping[str, float]
    device_ms: Mapping[str, float]
    cpu_per_wall: float  # the GPU workers' CPU per wall millisecond of their stages (1.0: wall taken as is)
    other_ms: float  # the other processes' CPU per request (0 beside a GPU host)
    uncharged: tuple[str, ...]  # stages neither device, worker, waiting nor another process's
    means: bool  # True: per-job means from total_s and jobs; False: medians (no job counts)

    def as_json(self) -> dict[str, Any]:
        return {
            "platform_ms": {route: round(ms, 3) for route, ms in self.platform_ms.items()},
            "device_ms": {route: round(ms, 3) for route, ms in self.device_ms.items()},
            "cpu_per_wall": round(self.cpu_per_wall, 4),
            "other_ms": round(self.other_ms, 3),
            "uncharged_stages": list(self.uncharged),
            "per_job": "mean (total_s / jobs)" if self.means else "median_ms (no job counts)",
        }


@dataclass(frozen=True, slots=True)
class PlatformCosts:
    """A replay's platform costs: its configured run's, and its vanilla run's (None: it made none)."""

    configured: RunCosts
    vanilla: RunCosts | None
    host: PlatformHost
    source: str

    def vanilla_job(self) -> tuple[float, float, str]:
        """Vanilla's per-job platform and device cost, and whose run they are."""
        if self.vanilla is not None and "miss" in self.vanilla.platform_ms:
            return self.vanilla.platform_ms["miss"], self.vanilla.device_ms["miss"], "the vanilla run's"
        if "miss" not in self.configured.platform_ms:
            raise ValueError(f"{self.source}: its stages have no miss, and it made no vanilla run")
        return (
            self.configured.platform_ms["miss"],
            self.configured.device_ms["miss"],
            "the configured run's misses (the replay made no vanilla run)",
        )

    def charge(self, sim_vanilla_device_ms: float) -> PlatformCharge:
        """The per-job charges in the simulation's milliseconds, scaled by the simulated device time of
        a vanilla job over the replay's (module docstring)."""
        platform, device, whose = self.vanilla_job()
        if device <= 0:
            raise ValueError(f"{self.source}: no device time measured for {whose} jobs: nothing to scale by")
        scale = sim_vanilla_device_ms / device
        configured = {route: ms * scale for route, ms in self.configured.platform_ms.items()}
        miss = configured.get("miss", platform * scale)
        return PlatformCharge(
            hit_ms=configured.get("hit", miss),
            miss_ms=miss,
            vanilla_ms=platform * scale,
            scale=scale,
            describe={
                "source": self.source,
                "host": self.host.value,
                "scale": round(scale, 4),
                "scaled_on": whose,
                "hit_charged": "the replay's hits"
                if "hit" in configured
                else "a miss's (the replay had no hit)",
                "configured": self.configured.as_json(),
                "vanilla": self.vanilla.as_json() if self.vanilla is not None else None,
            },
        )


@dataclass(frozen=True, slots=True)
class PlatformCharge:
    """What each simulated job costs its worker beyond its priced steps, in the simulation's ms: a hit
    `hit_ms`, a miss `miss_ms`, a job of a run that caches nothing (vanilla) `vanilla_ms`."""

    hit_ms: float
    miss_ms: float
    vanilla_ms: float
    scale: float = 1.0
    describe: Mapping[str, Any] | None = None

    def job_ms(self, *, hit: bool, vanilla: bool) -> float:
        if vanilla:
            return self.vanilla_ms
        return self.hit_ms if hit else self.miss_ms

    def as_json(self) -> dict[str, Any]:
        return {
            "modelled": True,
            "charged_ms": {
                "hit": round(self.hit_ms, 3),
                "miss": round(self.miss_ms, 3),
                "vanilla": round(self.vanilla_ms, 3),
            },
            **dict(self.describe or {}),
        }


NOT_MODELLED = {
    "modelled": False,
    "why": "no stages given (a replay with `stages`: --compare or --platform-costs)",
}


def _stage_ms(stage: Mapping[str, Any], route_jobs: int | None) -> float:
    """A stage's cost per job of its route: its total over the route's jobs, else its median."""
    if route_jobs and stage.get("total_s") is not None:
        return float(stage["total_s"]) * 1000.0 / route_jobs
    return float(stage.get("median_ms") or 0.0)


def run_costs(
    stages: Mapping[str, Mapping[str, Mapping[str, Any]]],
    cpu_ms: Mapping[str, float] | None,
    *,
    requests: int,
    host: PlatformHost,
    source: str,
) -> RunCosts:
    """One run's per-job costs from its `stages` and `cpu_ms_per_request` (module docstring)."""
    wall_platform: dict[str, float] = {}
    wall_device: dict[str, float] = {}
    jobs: dict[str, int] = {}
    uncharged: set[str] = set()
    means = True
    for route, by_stage in stages.items():
        if route not in ROUTES:  # e.g. the cascade's heavy runs: its CPU counts, no simulated job carries it
            uncharged.add(f"route {route}")
        counts = [int(s["jobs"]) for s in by_stage.values() if s.get("jobs")]
        route_jobs = max(counts) if counts else None
        means = means and route_jobs is not None
        jobs[route] = route_jobs or 0
        wall_platform[route] = sum(_stage_ms(by_stage[n], route_jobs) for n in WORKER_STAGES if n in by_stage)
        wall_device[route] = sum(_stage_ms(by_stage[n], route_jobs) for n in DEVICE_STAGES if n in by_stage)
        known = {*DEVICE_STAGES, *WORKER_STAGES, *NOT_COST, *OTHER_PROCESS}
        uncharged |= {name for name in by_stage if name not in known}
    cpu_per_wall, other = 1.0, 0.0
    if host is PlatformHost.SHARED:
        if not cpu_ms:
            raise ValueError(
                f"{source}: a shared host's platform cost needs the replay's cpu_ms_per_request "
                "(or pass --platform-host beside to charge the worker stages' wall time)"
            )
        served = sum(jobs.values()) or requests
        worker_wall = sum(
            jobs.get(route, 0) * (wall_platform[route] + wall_device[route]) for route in wall_platform
        ) / max(served, 1)
        worker_cpu = sum(float(cpu_ms.get(role, 0.0)) for role in GPU_ROLES)
        if worker_wall <= 0 or worker_cpu <= 0:
            raise ValueError(f"{source}: no GPU worker stage time or CPU to convert the stages by")
        cpu_per_wall = worker_cpu / worker_wall
        other = sum(float(ms) for role, ms in cpu_ms.items() if role not in (*GPU_ROLES, *SUMS))
    charged = [route for route in wall_platform if route in ROUTES]
    return RunCosts(
        platform_ms={route: cpu_per_wall * wall_platform[route] + other for route in charged},
        device_ms={route: cpu_per_wall * wall_device[route] for route in charged},
        cpu_per_wall=cpu_per_wall,
        other_ms=other,
        uncharged=tuple(sorted(uncharged)),
        means=means,
    )


def platform_costs(report: Mapping[str, Any], *, host: PlatformHost, source: str) -> PlatformCosts | None:
    """The platform costs of a replay's report (one JSON object); None when it has no `stages`."""
    stages = report.get("stages")
    if not stages:
        return None
    requests = int(report.get("requests") or 0)
    configured = run_costs(
        stages, report.get("cpu_ms_per_request"), requests=requests, host=host, source=source
    )
    vanilla = None
    if report.get("vanilla_stages"):
        vanilla = run_costs(
            report["vanilla_stages"],
            report.get("vanilla_cpu_ms_per_request"),
            requests=requests,
            host=host,
            source=f"{source} (vanilla)",
        )
    return PlatformCosts(configured, vanilla, host, source)


def load_platform_costs(path: Path, profile: str, *, host: PlatformHost) -> PlatformCosts | None:
    """The platform costs of `profile`'s replay in a replay JSON (one report, or a list: the report of
    that profile, else the only one); None when that report has no `stages`."""
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"cannot read the replay {path}: {error}") from None
    reports = data if isinstance(data, list) else [data]
    match = next((r for r in reports if r.get("profile") == profile), None)
    if match is None and len(reports) == 1:
        match = reports[0]
    if match is None:
        raise ValueError(f"{path} has no replay of profile {profile}")
    return platform_costs(match, host=host, source=f"{path} ({match.get('profile', '?')})")
