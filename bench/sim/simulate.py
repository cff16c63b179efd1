"""A discrete-event simulation of the serving stack, for scales one machine cannot hold.

It replays a workload (bench.workload.trace) through the same policy code the service runs (the admit
worker's decision, jobs.admission.decide; the match predictor and eviction planner of jobs.policies,
driven by bench.sim.cache) with profiled per-step costs per model (bench.run.costs) instead of GPUs, N
workers per role (bench.sim.pools) and a cache budget. No image is generated; prompt embeddings are real
(the configured text embedder, cached by bench.workload.embeddings); on a lab trace each request's quality is
predicted from a profile (bench.quality.model).

The model of one request:
  1. arrival; admission at once against the cache as it is then (the identical prompt's entry, else
     embed, predictor, exact nearest neighbour; jobs.admission.decide: k from the table, scaled to T,
     over holes); queued `admit_s` later (the embedding time a prompt; no admit pool bottleneck here).
  2. a miss waits for a large worker (or a co-hosting small one, no hit waiting, which batches it apart
     from its hits: `Worker.take`); a hit for a small one when hits go to the small pool, or a large one.
  3. a hit whose entry (or, under resume, state) was evicted since admission runs as a miss, on the
     large pool (workers.generation.reuse_job). Service time: denoiser evaluations x the model's
     step cost + one VAE decode. A worker runs up to `SimConfig.batch_capacity` jobs at once (step-level
     batching, workers.runtime.batch_loop: REPRISE_MAX_BATCH where the costs carry the runtime bench's
     batch table, else one): while n share its steps each progresses 1 / slowdown(n) as fast as alone
     (StepCosts.slowdown), so a job's end moves whenever another joins or leaves. With measured
     platform costs (`SimConfig.platform`, bench.sim.platform) each job then does its route's platform
     work on the same worker, which no batch shares: a hit a hit's, a miss a miss's, a job of a run
     that caches nothing vanilla's.
  4. at completion a hit counts one use of its entry and state (as reuse_job does); a miss, and with
     cache_all any hit, inserts an entry (captured states under resume, a final latent under refine),
     evicting first what the budget needs (jobs.passes.eviction.ensure_room's rule, batched:
     bench.sim.cache.EVICT_SLACK); the predictor is refit every beat period under NIRVANA's 5% rule.

Lookups: bench.sim.lookup. The allocation is fixed, moved by MoDM's monitor (bench.sim.monitor), or
follows a replayed stack's (`allocation_schedule`, bench.live.stack).
"""

from __future__ import annotations

import heapq
from collections import Counter, deque
from dataclasses import replace

from bench.run.outcomes import RequestOutcome, step_ms_by_model
from bench.run.progress import ProgressBar
from bench.sim.autoscale import Autoscaler
from bench.sim.cache import SimCache
from bench.sim.cascade import apply_batches, cascade_summary, escalate, start_controller
from bench.sim.config import SimConfig, SimResult
from bench.sim.events import Event, SimJob
from bench.sim.lookup import simulated_lookup
from bench.sim.monitor import AllocationPoint, SimulatedMonitor
from bench.sim.pools import PeriodDemand, PoolMonitor, Pools, PoolTargets, Worker
from bench.sim.report import judged_report
from bench.workload.embeddings import TraceEmbeddings
from bench.workload.trace import Workload
from core.settings import Settings
from core.vocabulary import Allocator, HitPolicy, Role


class _Simulation:
    """One run: the event loop and its state. Use `run_simulation`."""

    def __init__(
        self,
        workload: Workload,
        config: SimConfig,
        *,
        cache: SimCache | None,
        admit_s: float,
        embed_ms: float,
        monitor: PoolMonitor | None,
        progress: ProgressBar | None,
    ) -> None:
        self.workload = workload
        self.config = config
        self.profile = config.profile
        self.costs = config.costs
        self.cache = cache
        self.admit_s = admit_s
        self.embed_ms = embed_ms
        self.monitor = monitor
        self.progress = progress
        self.pools = Pools(config.targets(), switch_s=config.switch_s, capacity=config.batch_capacity)
        self.large_name = config.costs.large_model or "large"
        self.small_name = config.costs.small_model or "small"
        self.step_ms = {self.large_name: self.costs.large_step_ms, self.small_name: self.costs.small_step_ms}
        self.events: list[tuple[float, int, int, int]] = []
        self._order = 0
        self.large_queue: deque[SimJob] = deque()
        self.small_queue: deque[SimJob] = deque()
        self.jobs: dict[int, SimJob] = {}
        self.outcomes: list[RequestOutcome] = []
        self.next_closed = 0
        self.demand = PeriodDemand()  # what the allocators read each period
        self.requests = workload.requests
        self.query_rows = [r.prompt_idx for r in self.requests]
        self.timeline = [AllocationPoint(0.0, self.pools.targets.large, self.pools.targets.small)]
        self.schedule = deque(config.allocation_schedule)
        self.requeued = False  # a hit went back to the miss queue during a dispatch pass
        self.light_queue: deque[SimJob] = deque()  # DiffServe's light stages (cascade_light)
        self.controller = start_controller(config.cascade, workload, self.pools) if config.cascade else None
        self.stages = Counter[str]()  # light stages run, and escalated
        spec = config.autoscaler  # the ScaledObjects' target, a pod's batch of jobs: a worker's batch here
        self.autoscaler = Autoscaler(replace(spec, jobs_per_worker=config.batch_capacity)) if spec else None

    # --- events ----------------------------------------------------------------------------
    def push(self, time_s: float, kind: Event, ref: int) -> None:
        self._order += 1
        heapq.heappush(self.events, (time_s, int(kind), self._order, ref))

    def run(self) -> list[RequestOutcome]:
        total = len(self.requests)
        if total == 0:
            return []
        closed = any(r.arrival_s is None for r in self.requests)
        if closed:
            for _ in range(min(self.workload.spec.concurrency, total)):
                self._submit_next_closed(0.0)
        else:
            for seq, request in enumerate(self.requests):
                assert request.arrival_s is not None
                self.push(request.arrival_s, Event.ARRIVAL, seq)
        if self.cache is not None:
            self.push(0.0, Event.MAINTAIN, 0)
        if self.monitor is not None or self.controller is not None:
            self.push(self._period_s(), Event.MONITOR, 0)
        if self.autoscaler is not None:
            self.push(self.autoscaler.spec.polling_s, Event.AUTOSCALE, 0)
        while self.events and len(self.outcomes) < total:
            now, kind, _, ref = heapq.heappop(self.events)
            self._handle(now, Event(kind), ref)
        return self.outcomes

    def _handle(self, now: float, kind: Event, ref: int) -> None:
        if kind is Event.ARRIVAL:
            self._arrive(now, ref)
        elif kind is Event.READY:
            job = self.jobs[ref]
            queue = self.small_queue if job.role is Role.SMALL else self.large_queue
            (self.light_queue if job.stage == "light" else queue).append(job)
            self._dispatch(now)
        elif kind is Event.DONE:
            self._finish(now, ref)
        elif kind is Event.WAKE:
            self._dispatch(now)
        elif kind is Event.MAINTAIN:
            assert self.cache is not None
            self.cache.maintain_predictor()
            self.push(now + self.config.maintenance_period_s, Event.MAINTAIN, 0)
        elif kind is Event.MONITOR:
            self._allocate(now) if self.controller is not None else self._monitor(now)
        elif kind is Event.AUTOSCALE:
            self._autoscale(now)

    def _submit_next_closed(self, now: float) -> None:
        if self.next_closed < len(self.requests):
            self.push(now, Event.ARRIVAL, self.next_closed)
            self.next_closed += 1

    # --- admission -------------------------------------------------------------------------
    def _arrive(self, now: float, seq: int) -> None:
        self._follow_schedule(now, seq)
        request = self.requests[seq]
        k: int | None = None
        admission_ms: float | None = None
        entry_row: int | None = None
        similarity: float | None = None
        if self.cache is not None:
            upcoming = self.query_rows[seq + 1 : seq + 256]
            lookup = self.cache.lookup(request.prompt_idx, now, upcoming=upcoming)
            k, entry_row, similarity = lookup.k, lookup.entry_row, lookup.similarity
            k = self.controller.kept_hit(k, self.profile, self.costs) if self.controller else k
            admission_ms = self.embed_ms + lookup.wall_ms
        job = SimJob(request, now, k, admission_ms, entry_row, similarity if k is not None else None)
        job.role = Role.SMALL if k is not None and self.profile.hits_on_small else Role.LARGE
        if self.config.cascade is not None and k is None:  # a miss goes light-first (DiffServe 3.1)
            job.role, job.stage = Role.SMALL, "light"
            job.draw = self.config.cascade.profile.draw(request.prompt_idx)
            self.demand.light_work_s += self.config.cascade.light_stage_ms / 1e3
        elif job.role is Role.SMALL:
            self.demand.light_work_s += (self.profile.steps - (k or 0)) * self.costs.small_step_ms / 1e3
        self.jobs[seq] = job
        self.demand.admit(k)
        self.push(now + self.admit_s, Event.READY, seq)

    # --- workers ---------------------------------------------------------------------------
    def _dispatch(self, now: float) -> None:
        """Hand queued jobs to workers with a free slot, the least busy first (Celery's consumers each
        take from the broker as their threads free up, so work spreads over the pool before any worker
        batches), one job at a time."""
        ready = [worker for worker in self.pools.workers if worker.has_slot(now)]
        while ready:
            worker = min(ready, key=lambda candidate: (len(candidate.jobs), candidate.worker_id))
            if worker.role is Role.LARGE:
                takes_hits = self.config.large_serves_hits or self.pools.hosting(Role.SMALL) == 0
                queue = self.small_queue if takes_hits and not self.large_queue else self.large_queue
            else:  # a co-hosting small worker takes misses on its large model when no hit waits
                queue = self.small_queue if self.small_queue or not self.light_queue else self.light_queue
                queue = self.large_queue if not queue and self.config.cohosting else queue
            job = self._next_job(queue)
            if job is None:
                ready.remove(worker)
                continue
            worker.advance(now, self.costs.slowdown)
            work_ms = self._service_s(job, on_small=worker.role is Role.SMALL) * 1000.0
            model = next(reversed(job.evals))
            worker.take(job.request.seq, work_ms, model, self.step_ms, self._platform_ms(job))
            self._schedule(worker, now)
            if not worker.has_slot(now):
                ready.remove(worker)
        if self.requeued:  # a worker passed over earlier in the loop may take the rerouted job
            self.requeued = False
            self._dispatch(now)

    def _schedule(self, worker: Worker, now: float) -> None:
        """The worker's next DONE event, when its jobs (batched: sharing each step) let the next end."""
        worker.done_s = worker.next_done(now, self.costs.slowdown)
        if worker.done_s is not None:
            self.push(worker.done_s, Event.DONE, worker.worker_id)

    def _service_s(self, job: SimJob, *, on_small: bool) -> float:
        """The job's time on the worker and its evaluations (a light stage: light model + discriminator)."""
        cascade = self.config.cascade
        if job.stage == "light" and cascade is not None:
            job.evals = {self.small_name: cascade.pair.light_steps}
            return cascade.light_stage_ms / 1000.0
        steps = self.profile.steps - (job.k or 0)
        on_small = on_small and job.k is not None  # a small worker runs a miss on the large model it hosts
        model = self.small_name if on_small else self.large_name
        step_ms = self.costs.small_step_ms if on_small else self.costs.large_step_ms
        job.evals = {**job.evals, model: steps} if job.stage == "heavy" else {model: steps}
        return (steps * step_ms + self.costs.decode_ms) / 1000.0

    def _platform_ms(self, job: SimJob) -> float:
        """The job's platform work on its worker (bench.sim.platform): its route's, vanilla's in a run
        that caches nothing; none without measured costs."""
        charge = self.config.platform
        if charge is None:
            return 0.0
        vanilla = not self.profile.caches and self.config.cascade is None
        return charge.job_ms(hit=job.k is not None, vanilla=vanilla)

    def device_ms_per_job(self) -> float | None:
        """The workers' time on model calls over the jobs completed (a batch's time shared by its jobs)."""
        if not self.outcomes:
            return None
        return sum(worker.device_ms for worker in self.pools.workers) / len(self.outcomes)

    def _next_job(self, queue: deque[SimJob]) -> SimJob | None:
        """The next job of `queue` a worker can run. A hit whose source was evicted since admission
        goes to the large pool's queue as a miss instead (workers.generation.reuse_job)."""
        while queue:
            job = queue.popleft()
            if job.k is None or self.cache is None or job.entry_row is None:
                return job
            if self.cache.serves(job.entry_row, job.k):
                return job
            job.k, job.entry_row, job.role = None, None, Role.LARGE
            self.large_queue.append(job)
            self.requeued = True
        return None

    def _finish(self, now: float, worker_id: int) -> None:
        """A DONE event: the worker's jobs that ended now complete; an event a later join or leave of
        the worker's batch moved is stale and ignored."""
        worker = self.pools.workers[worker_id]
        if worker.done_s != now:
            return
        worker.advance(now, self.costs.slowdown)
        for seq in worker.finished():
            self._complete(now, self.jobs.pop(seq))
        self._schedule(worker, now)
        self._rebalance(now)
        self._dispatch(now)

    def _complete(self, now: float, job: SimJob) -> None:
        """A job's run ended: escalated (queued for the heavy model), or its outcome recorded."""
        if self._escalated(job):
            self.jobs[job.request.seq] = job
            return
        hit = job.k is not None
        if self.cache is not None and job.k is not None and job.entry_row is not None:
            self.cache.record_use(job.entry_row, job.k, now)  # as reuse_job does, once the run is done
        if self.cache is not None and (not hit or self.profile.cache_all):
            self.cache.insert(job.request.prompt_idx, now)
        self.outcomes.append(job.outcome(now, self.profile.steps))
        if self.progress is not None and (
            len(self.outcomes) % 50 == 0 or len(self.outcomes) == len(self.requests)
        ):
            hits = sum(o.hit for o in self.outcomes)
            self.progress.update(len(self.outcomes), note=f"hit rate {hits / len(self.outcomes):.3f}")
        if job.request.arrival_s is None:
            self._submit_next_closed(now)

    # --- DiffServe's cascade (bench.sim.cascade) --------------------------------------------
    def _escalated(self, job: SimJob) -> bool:
        """At the end of a light stage: True when the discriminator sends the job on to the heavy
        model (then queued on the large pool, its light evaluations kept)."""
        if job.stage != "light" or self.controller is None or job.draw is None:
            return False
        if escalate(self.controller, job.draw[0], self.stages):
            job.stage, job.role = "heavy", Role.LARGE
            self.large_queue.append(job)
            return True
        return False

    def _period_s(self) -> float:
        if self.controller is not None:
            return self.controller.spec.period_s
        assert self.monitor is not None
        return self.monitor.period_s

    def _allocate(self, now: float) -> None:
        """A period of DiffServe's controller: the MILP on the period's demand and queues."""
        assert self.controller is not None
        period = self.controller.spec.period_s
        if self.controller.spec.allocator is Allocator.DIFFSERVE:
            queued = (len(self.light_queue) + len(self.small_queue), len(self.large_queue))
            plan = self.controller.decide(
                now, self.demand.counts["misses"] / period, self.demand.light_work_s / period, queued
            )
            self.pools.set_targets(PoolTargets(large=plan.heavy_workers, small=plan.light_workers))
            apply_batches(self.pools, plan)
            self._rebalance(now)
            self._dispatch(now)
        self.demand.clear()
        self.push(now + period, Event.MONITOR, 0)

    def followed(self, monitor: PoolMonitor | None) -> bool:
        """Whether the pools moved during the run: a monitor, a replayed schedule or the autoscaler."""
        return monitor is not None or bool(self.config.allocation_schedule) or self.autoscaler is not None

    def _autoscale(self, now: float) -> None:
        """KEDA's poll (bench.sim.autoscale): a new worker hosts the model whose queue is longer."""
        assert self.autoscaler is not None
        small = self.profile.hits_on_small and len(self.small_queue) > len(self.large_queue)
        if self.autoscaler.poll(now, len(self.jobs), self.pools, grow=Role.SMALL if small else Role.LARGE):
            self.timeline.append(AllocationPoint(now, self.pools.targets.large, self.pools.targets.small))
            self.push(now + self.autoscaler.spec.start_s, Event.WAKE, 0)
        self.push(now + self.autoscaler.spec.polling_s, Event.AUTOSCALE, 0)

    def _rebalance(self, now: float) -> None:
        for worker in self.pools.rebalance(now):
            if worker.available_s > now:
                self.push(worker.available_s, Event.WAKE, worker.worker_id)

    def _follow_schedule(self, now: float, seq: int) -> None:
        """Apply the replayed stack's moves due by the arrival of request `seq` (bench.live.stack)."""
        moved = False
        while self.schedule and self.schedule[0].after_requests <= seq:
            due = self.schedule.popleft()
            self.pools.set_targets(self.config.targets(due.large, due.small))
            moved = True
        if moved:
            self._rebalance(now)
            self._dispatch(now)
            self.timeline.append(AllocationPoint(now, self.pools.targets.large, self.pools.targets.small))

    def _monitor(self, now: float) -> None:
        assert self.monitor is not None
        queued = {Role.LARGE: len(self.large_queue), Role.SMALL: len(self.small_queue)}
        snapshot = self.demand.snapshot(now, self.monitor.period_s, queued, self.pools.targets)
        self.demand.clear()  # the light pool's seconds too: only DiffServe's controller reads them
        targets = self.monitor(snapshot)
        if targets is not None:
            self.pools.set_targets(targets)
            self._rebalance(now)
            self._dispatch(now)
        self.timeline.append(AllocationPoint(now, self.pools.targets.large, self.pools.targets.small))
        self.push(now + self.monitor.period_s, Event.MONITOR, 0)


def run_simulation(
    workload: Workload,
    config: SimConfig,
    *,
    settings: Settings,
    embeddings: TraceEmbeddings | None,
    vanilla_throughput_rps: float | None = None,
    monitor: PoolMonitor | None = None,
    show_progress: bool = False,
) -> SimResult:
    """Simulate `workload` under `config` and report it like a replay would be reported.

    `embeddings` are required unless the profile caches nothing (vanilla). Without
    `vanilla_throughput_rps` a vanilla run of the same workload on the same GPUs gives it.
    `monitor` overrides the config's: without either the allocation stays as configured. MoDM's
    monitor (config.monitor) runs only where hits go to a small pool: otherwise there is no choice.
    """
    profile = config.profile
    if monitor is None and config.monitor is not None and profile.hits_on_small:
        monitor = SimulatedMonitor(config.monitor, config.costs, profile.steps)
    lookup = simulated_lookup(
        profile,
        k_table=config.k_table,
        costs=config.costs,
        cache_bytes=config.cache_bytes,
        capacity=len(workload.requests),
        settings=settings,
        embeddings=embeddings,
        prompts=workload.prompts.lines,
    )
    label = f"simulate {profile.name}"
    embed_ms = embeddings.embed_ms_per_prompt if embeddings is not None else 0.0
    progress = ProgressBar(len(workload.requests), label=label) if show_progress else None
    simulation = _Simulation(
        workload,
        config,
        cache=lookup.cache,
        admit_s=embed_ms / 1000.0 if lookup.cache is not None else 0.0,
        embed_ms=embed_ms,
        monitor=monitor,
        progress=progress,
    )
    outcomes = simulation.run()
    if progress is not None:
        progress.close()
    if vanilla_throughput_rps is None and (profile.caches or config.cascade is not None):
        vanilla_throughput_rps = vanilla_throughput(workload, config, settings)
    report = judged_report(outcomes, workload, config, vanilla_throughput_rps, lookup.embedder)
    if simulation.controller is not None:
        report = cascade_summary(report, simulation.controller, simulation.stages)
    return SimResult(
        report=report,
        outcomes=tuple(outcomes),
        prices=step_ms_by_model(config.costs, outcomes) if outcomes else {},
        counters=lookup.cache.counters if lookup.cache is not None else None,
        table=lookup.table,
        allocation_timeline=tuple(simulation.timeline) if simulation.followed(monitor) else None,
        device_ms_per_job=simulation.device_ms_per_job(),
    )


def vanilla_throughput(workload: Workload, config: SimConfig, settings: Settings) -> float | None:
    """The same workload with no cache and no cascade: every GPU on the large model."""
    profile = replace(config.profile, caches=False, hit_policy=HitPolicy.RESUME, cascade=False)
    vanilla = replace(config, profile=profile, monitor=None, allocation_schedule=(), cascade=None)
    return run_simulation(workload, vanilla, settings=settings, embeddings=None).report.throughput_rps
