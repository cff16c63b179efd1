"""Replay a workload through a running stack's HTTP API and report what it measured.

Each request is POSTed to /v1/generations when the arrival process says (bench.workload.trace), then
polled at GET /v1/generations/{id} until it ends: long-polled (`Prefer: wait`) in a closed loop, whose
client sends its next request only once it has seen the end, so that it sees the end when it comes.
What each job object says (bench.live.records: route, k, denoiser_evaluations, created_at,
completed_at; latency from the server's timestamps, which polling does not blur) feeds the same
`summarize` as the simulator (bench.run.outcomes), so the two reports compare field by field.

The stack's policies are its own configuration: `--profile` selects the cache mode of the
submissions ("off" for vanilla) and is checked against the settings this process reads; a
mismatch is reported on stderr, and the report names the profile asked for. It polls /v1/stats for the
stack's pools and monitor (bench.live.stack.StackWatch), so a simulation compared with it runs the same
allocation. Under DiffServe's cascade: `escalation_rate` (`metrics.cascade`), `costlier_hits`
(`metrics.admission`) and the allocator's decisions, `threshold_timeline` (/v1/stats).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from bench.live.audit import audit_hits
from bench.live.cpu import StackCpu, per_request_ms, read_stack_cpu
from bench.live.decodes import decode_figures, stack_decode_counters
from bench.live.judging import judge_records
from bench.live.pngs import fetch_png_sizes
from bench.live.records import (
    TERMINAL,
    JobRecord,
    costlier_hits,
    escalation_rate,
    estimated_vanilla_rps,
    measured_full_generation_ms,
    outcome_from_record,
)
from bench.live.stack import StackRecord, StackWatch
from bench.run.costs import StepCosts
from bench.run.outcomes import ReportContext, summarize
from bench.run.profiles import Profile
from bench.run.progress import ProgressBar
from bench.run.replayed import replay_quality
from bench.run.report import BenchReport
from bench.workload.trace import ArrivalKind, Request, Workload
from core.scoring import Scorer

RETRY_STATUSES = frozenset({429, 503})  # in-flight limit, backpressure: both send Retry-After
MAX_POLL_INTERVAL_S = 5.0  # open loop: polls back off to this; latency comes from server timestamps
# Closed loop: answered at the job's end (api/waiting.py), else after 5 s, so a stop waits no longer.
LONG_POLL = {"Prefer": "wait=5"}


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    """How to reach the stack and how patiently to wait. `seed_from_index` gives a request the
    seed of its prompt's index, so a repeated prompt asks for the same image."""

    base_url: str
    api_key: str
    poll_interval_s: float = 0.25
    job_timeout_s: float = 3600.0  # from submission, queueing included: an overloaded stack queues long
    http_timeout_s: float = 30.0
    max_connections: int = 16
    steps: int | None = None
    seed_from_index: bool = True
    fetch_images: int = 0
    quality_sample: int = 0  # judged hits audited (generated afresh, cache off) for their drop; 0: none
    step_cache: bool = False  # the stack runs a step cache: its cached requests' misses are audited too
    video_frames: int | None = None  # video jobs of this many frames (FlexCache); None: images
    video_fps: int = 8


def replay_report(
    records: Sequence[JobRecord],
    *,
    profile: Profile,
    workload: Workload,
    costs: StepCosts,
    costs_measured: bool,
    embedder: Mapping[str, Any],
    gpu_workers: int | None,
    png_bytes: float | None,
    audits: Mapping[int, float | None] | None = None,
    step_cache: bool = False,
) -> BenchReport:
    """The report of a replay. The SLO base is T x large_step_ms + decode_ms from a measured costs
    file, else the median run time of this replay's misses. The judged quality of every job, and the
    drop of the hits `audits` scored afresh (record index -> score: bench.run.replayed)."""
    outcomes, quality_source = replay_quality(
        [outcome_from_record(r, step_cache=step_cache) for r in records],
        [r.job for r in records],
        audits=audits or {},
    )
    measured_full = measured_full_generation_ms(records)
    slo_base = (
        costs.full_generation_ms(profile.steps) if costs_measured or measured_full is None else measured_full
    )
    arrivals = workload.describe_arrivals()
    report = summarize(
        outcomes,
        ReportContext(
            profile=profile.name,
            costs=costs,
            slo_base_ms=slo_base,
            vanilla_throughput_rps=estimated_vanilla_rps(
                gpu_workers=gpu_workers,
                full_generation_ms=measured_full or slo_base,
                offered_rps=arrivals.get("offered_rps"),
            ),
            embedder=embedder,
            trace=workload.describe_trace(),
            arrivals=arrivals,
            entry_bytes=float(costs.entry_bytes)
            if costs_measured and costs.entry_bytes is not None
            else None,
            png_bytes=png_bytes,
            quality_source=quality_source,
        ),
    )
    if not profile.caches:  # the run itself is the vanilla baseline
        report = replace(report, vanilla_throughput_rps=report.throughput_rps)
    return replace(report, escalation_rate=escalation_rate(records), costlier_hits=costlier_hits(records))


class _Replayer:
    def __init__(
        self,
        workload: Workload,
        options: ReplayOptions,
        *,
        cache_mode: str,
        progress: ProgressBar | None,
        should_stop: Callable[[], bool],
        watch: StackWatch | None = None,
    ) -> None:
        self.workload = workload
        self.options = options
        self.cache_mode = cache_mode
        self.progress = progress
        self.should_stop = should_stop
        self.watch = watch
        self.started = 0.0
        self.finished: list[JobRecord] = []
        self.hits = 0
        self.submitted = 0  # requests the stack accepted so far

    def clock(self) -> float:
        return time.monotonic() - self.started

    async def run(self) -> list[JobRecord]:
        connections = self.options.max_connections
        if self.workload.spec.kind is ArrivalKind.CLOSED:  # a long poll a client, and /v1/stats
            connections = max(connections, self.workload.spec.concurrency + 1)
        limits = httpx.Limits(max_connections=connections)
        headers = {"Authorization": f"Bearer {self.options.api_key}"}
        async with httpx.AsyncClient(
            base_url=self.options.base_url,
            headers=headers,
            timeout=self.options.http_timeout_s,
            limits=limits,
        ) as client:
            self.started = time.monotonic()
            stop = asyncio.Event()
            watching = (
                asyncio.create_task(
                    self.watch.run(client, stop, clock=self.clock, submitted=lambda: self.submitted)
                )
                if self.watch is not None
                else None
            )
            tasks: list[asyncio.Task[JobRecord]] = []
            closed = self.workload.spec.kind is ArrivalKind.CLOSED
            slots = asyncio.Semaphore(self.workload.spec.concurrency)
            for request in self.workload.requests:
                if self.should_stop():
                    break
                if closed:
                    await slots.acquire()
                else:
                    assert request.arrival_s is not None
                    await self._sleep_until(request.arrival_s)
                if self.should_stop():
                    if closed:
                        slots.release()
                    break
                tasks.append(
                    asyncio.create_task(self._one(client, request, self.clock(), slots if closed else None))
                )
            records = await asyncio.gather(*tasks)
            stop.set()
            if watching is not None:
                await watching
        return list(records)

    async def _sleep_until(self, at_s: float) -> None:
        while (delay := at_s - self.clock()) > 0 and not self.should_stop():
            await asyncio.sleep(min(delay, 0.5))

    async def _one(
        self, client: httpx.AsyncClient, request: Request, intended_s: float, slots: asyncio.Semaphore | None
    ) -> JobRecord:
        try:
            record = await self._submit_and_wait(client, request, intended_s)
        finally:
            if slots is not None:
                slots.release()
        self.finished.append(record)
        if record.job is not None and (record.job.get("metrics") or {}).get("route") == "hit":
            self.hits += 1
        if self.progress is not None:
            done = len(self.finished)
            self.progress.update(done, note=f"hits {self.hits} misses {done - self.hits}")
        return record

    def _body(self, request: Request) -> dict[str, Any]:
        body: dict[str, Any] = {"prompt": request.prompt, "cache": self.cache_mode}
        if self.options.seed_from_index:
            body["seed"] = request.prompt_idx
        if self.options.steps is not None:
            body["steps"] = self.options.steps
        if self.options.video_frames is not None:
            body |= {"kind": "video", "frames": self.options.video_frames, "fps": self.options.video_fps}
        return body

    async def _submit_and_wait(
        self, client: httpx.AsyncClient, request: Request, intended_s: float
    ) -> JobRecord:
        # 1. Submit, waiting out 429/503 as the server asks.
        job: dict[str, Any] | None = None
        post_started: float | None = None
        while job is None:
            if self.should_stop():
                return JobRecord(request, intended_s, None, None, "stopped before submission")
            post_started = self.clock()
            try:
                response = await client.post("/v1/generations", json=self._body(request))
            except httpx.HTTPError as error:
                return JobRecord(request, intended_s, post_started, None, f"POST failed: {error!r}")
            if response.status_code in RETRY_STATUSES:
                await asyncio.sleep(float(response.headers.get("Retry-After", "1")))
                continue
            if response.status_code not in (200, 202):
                return JobRecord(
                    request,
                    intended_s,
                    post_started,
                    None,
                    f"POST {response.status_code}: {response.text[:200]}",
                )
            job = response.json()
            self.submitted += 1
        # 2. Poll until the job ends: long polls in a closed loop, else polls backing off.
        closed = self.workload.spec.kind is ArrivalKind.CLOSED
        interval = self.options.poll_interval_s
        deadline = self.clock() + self.options.job_timeout_s
        while job.get("status") not in TERMINAL and self.clock() < deadline and not self.should_stop():
            if not closed:
                await asyncio.sleep(interval)
                interval = min(interval * 1.5, MAX_POLL_INTERVAL_S)
            try:
                response = await client.get(
                    f"/v1/generations/{job['id']}", headers=LONG_POLL if closed else None
                )
            except httpx.HTTPError:
                continue  # a transient failure: the next poll retries
            if response.status_code == 200:
                job = response.json()
        return JobRecord(request, intended_s, post_started, job)


def replay_workload(
    workload: Workload,
    options: ReplayOptions,
    *,
    profile: Profile,
    show_progress: bool = True,
    should_stop: Callable[[], bool] = lambda: False,
    watch: StackWatch | None = None,
) -> list[JobRecord]:
    """Send every request of `workload` and wait for each to end (or time out, or `should_stop`);
    `watch` follows the stack's pools meanwhile."""
    progress = ProgressBar(len(workload.requests), label=f"replay {profile.name}") if show_progress else None
    replayer = _Replayer(
        workload,
        options,
        cache_mode="auto" if profile.caches else "off",
        progress=progress,
        should_stop=should_stop,
        watch=watch,
    )
    records = asyncio.run(replayer.run())
    if progress is not None:
        progress.close()
    return sorted(records, key=lambda r: r.request.seq)


WARMUP_PREFIX = "warm-up {index}: "  # a warm-up's prompt: no request of the replay repeats it


def warm_up(workload: Workload, options: ReplayOptions, requests: int) -> int:
    """Send `requests` requests with the cache off before the counted runs, as many clients at once as
    the workload's, so that the counted runs all find the stack warm (models loaded, connections open,
    the first batches made): none caches, none is looked up, and each prompt is marked as a warm-up's
    so that no request of the replay finds its prompt embedding kept. Returns those that succeeded."""
    if requests <= 0 or not workload.requests:
        return 0
    shown = [workload.requests[i % len(workload.requests)] for i in range(requests)]
    warmups = tuple(
        replace(r, seq=i, prompt=WARMUP_PREFIX.format(index=i) + r.prompt, arrival_s=None)
        for i, r in enumerate(shown)
    )
    closed = replace(workload.spec, kind=ArrivalKind.CLOSED, concurrency=max(workload.spec.concurrency, 1))
    records = asyncio.run(
        _Replayer(
            replace(workload, spec=closed, requests=warmups),
            options,
            cache_mode="off",
            progress=None,
            should_stop=lambda: False,
        ).run()
    )
    return sum(r.job is not None and r.job.get("status") == "succeeded" for r in records)


def _cpu_per_request(
    stack_dir: Path | None, before: StackCpu | None, records: Sequence[JobRecord]
) -> dict[str, float] | None:
    """The local stack's CPU per succeeded request by role since `before` (bench.live.cpu)."""
    after = read_stack_cpu(stack_dir) if stack_dir is not None else None
    if before is None or after is None:
        return None
    succeeded = sum(r.job is not None and r.job.get("status") == "succeeded" for r in records)
    return per_request_ms(after.since(before), succeeded)


def _png_sizes(options: ReplayOptions, records: Sequence[JobRecord]) -> list[int]:
    """The sizes of `options.fetch_images` of the replay's images as PNG (png_bytes)."""
    if not options.fetch_images:
        return []
    read = fetch_png_sizes(
        options.base_url, options.api_key, options.http_timeout_s, records, options.fetch_images
    )
    return asyncio.run(read)


def _say_failures(records: Sequence[JobRecord]) -> None:
    failed = [r for r in records if r.job is None or r.job.get("status") != "succeeded"]
    if failed:
        first = failed[0]
        why = first.error or f"status {first.job.get('status') if first.job else '?'}"
        print(
            f"replay: {len(failed)} of {len(records)} requests did not succeed (first: {why})",
            file=sys.stderr,
        )


def run_replay(
    workload: Workload,
    options: ReplayOptions,
    *,
    profile: Profile,
    costs: StepCosts,
    costs_measured: bool,
    embedder: Mapping[str, Any],
    gpu_workers: int | None = None,
    show_progress: bool = True,
    stack_dir: Path | None = None,
    scorer: Scorer | None = None,
) -> tuple[BenchReport, list[JobRecord], StackRecord | None, dict[str, float] | None]:
    """Replay, fetch a few images for png_bytes, audit `options.quality_sample` judged hits, and
    report, with what the stack ran (None when /v1/stats could not be read) and the CPU milliseconds
    per request its processes spent by role during the replay alone (bench.live.cpu; None where no
    stack runs under `stack_dir`, the data directory of a local `reprise run`). `gpu_workers` (large +
    small) prices the vanilla estimate; None: the pools the stack started the replay with. `scorer`: the
    workers' scorer, which reads the images they did not judge themselves (bench.live.judging)."""
    watch = StackWatch(started_at=datetime.now(UTC))
    cpu_before = read_stack_cpu(stack_dir) if stack_dir is not None else None
    records = replay_workload(workload, options, profile=profile, show_progress=show_progress, watch=watch)
    cpu_ms = _cpu_per_request(stack_dir, cpu_before, records)
    stack = watch.record(profile, options.steps) if watch.points else None
    if gpu_workers is None and stack is not None:
        gpu_workers = (stack.start.large + stack.start.small) or None
    _say_failures(records)
    sizes = _png_sizes(options, records)
    records = judge_records(records, base_url=options.base_url, api_key=options.api_key, scorer=scorer)
    audits = audit_hits(
        options.base_url,
        options.api_key,
        [(outcome_from_record(r, step_cache=options.step_cache), r.job) for r in records],
        options.quality_sample,
        scorer=scorer,
    )
    records = [replace(record, fresh_quality=audits.get(index)) for index, record in enumerate(records)]
    report = replay_report(
        records,
        profile=profile,
        workload=workload,
        costs=costs,
        costs_measured=costs_measured,
        embedder=watch.embedder(embedder),
        gpu_workers=gpu_workers,
        png_bytes=statistics.mean(sizes) if sizes else (float(costs.png_bytes) if costs_measured else None),
        audits=audits,
        step_cache=options.step_cache,
    )
    elapsed_s = (datetime.now(UTC) - watch.started_at).total_seconds()
    counters = stack_decode_counters(
        options.base_url, options.api_key, window_s=elapsed_s, timeout_s=options.http_timeout_s
    )
    report = replace(
        report,
        decodes=decode_figures((r.job for r in records), counters),
        threshold_timeline=tuple(watch.thresholds) if watch.thresholds else None,
    )
    return report, records, stack, cpu_ms
