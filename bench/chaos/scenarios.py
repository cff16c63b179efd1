"""The chaos scenarios. Each submits a bounded batch of jobs with a webhook to the bench's receiver,
breaks one thing while they are in flight, ends the fault, and waits (bounded) until every accepted
job is terminal and every completed event was delivered; then it accounts (bench.chaos.accounting).

- redis, postgres: the embedded server is SIGKILLed for `outage_s`, then `reprise services up`.
- redis-empty, network, disk-full, node-loss: bench.chaos.faults (Redis back without its data; a lossy
  network between the workers and their services; the workers' disk full; a second node lost).
- kill-<role>: the pool's worker process group is SIGKILLed; `reprise run` restarts it.
- worker-freeze: the large worker's group is SIGSTOPped mid-run, hung but alive (bench.chaos.faults.freeze):
  its jobs finish elsewhere once their leases lapse, and the supervisor replaces it by its stale liveness.
- webhook-outage: the receiver answers 503 for `outage_s`; retries carry the same webhook-id.
- webhook-slow, webhook-hang, webhook-huge: another tenant's receiver trickles its answer, never answers,
  or answers 100 MB for `outage_s` (bench.chaos.faults.webhooks); the bench tenant's deliveries must not
  wait on it.
- load: intake only, many submissions from concurrent clients through the stack's API (the `intake`
  figures); then canceled.
- cancel-storm: a batch submitted and at once canceled, concurrently; every job must end.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx

from bench.chaos.accounting import duplicate_runs, duplicated_entries, job_ends, tally
from bench.chaos.faults import disk, node
from bench.chaos.faults.broker import redis_empty
from bench.chaos.faults.freeze import worker_freeze
from bench.chaos.faults.network import network
from bench.chaos.faults.webhooks import MODES as WEBHOOK_FAULTS
from bench.chaos.faults.webhooks import account_noisy, noisy_webhook
from bench.chaos.load import LoadResult
from bench.chaos.probe import Probe
from bench.chaos.run import Run

ROLES = ("large", "small", "admit", "decode", "io")
# The scenarios whose fault lasts: each runs once per outage length (--outage-s).
OUTAGES = ("redis", "redis-empty", "postgres", "webhook-outage", *WEBHOOK_FAULTS, "network", "disk-full")
SCENARIOS = (
    "redis",
    "redis-empty",
    "postgres",
    *(f"kill-{role}" for role in ROLES),
    "worker-freeze",
    "webhook-outage",
    *WEBHOOK_FAULTS,
    "network",
    "disk-full",
    "node-loss",
    "load",
    "cancel-storm",
)


def _service_outage(run: Run, name: str) -> float:
    run.target.kill(name)
    time.sleep(run.outage_s)
    run.target.restart_services()
    return time.time()


def _kill_child(run: Run, role: str) -> float:
    name = f"worker-{role}"
    old = run.target.kill(name)
    run.target.wait_restarted(name, old)
    return time.time()


def _webhook_outage(run: Run) -> float:
    with run.receiver.lock:
        run.receiver.outage = True
    time.sleep(run.outage_s)
    with run.receiver.lock:
        run.receiver.outage = False
    return time.time()


def fault_for(name: str) -> Callable[[Run], float]:
    """The fault of a scenario: it breaks something and returns when (time.time) the fault ended."""
    if name in ("redis", "postgres"):
        return lambda run: _service_outage(run, name)
    if name.startswith("kill-"):
        return lambda run: _kill_child(run, name.removeprefix("kill-"))
    if name == "webhook-outage":
        return _webhook_outage
    if name == "worker-freeze":
        return worker_freeze
    if name in WEBHOOK_FAULTS:
        return lambda run: noisy_webhook(run, WEBHOOK_FAULTS[name])
    if name == "redis-empty":
        return redis_empty
    if name == "network":
        return network
    raise ValueError(f"unknown scenario {name!r}; choose from {', '.join(SCENARIOS)}")


def run_fault_scenario(run: Run, name: str) -> None:
    """Submit, break while jobs run, mend, wait: the report is filled in. Every worker whose pid changed
    meanwhile (it exited and the supervisor restarted it) is counted in `worker_restarts`."""
    pids = run.target.worker_pids()
    if name == "disk-full":
        _disk_full(run)
    elif name == "node-loss":
        _node_loss(run)
    else:
        _fault_scenario(run, name)
    after = run.target.worker_pids()
    run.extra["worker_restarts"] = sorted(name for name, pid in pids.items() if after.get(name) != pid)


def _disk_full(run: Run) -> None:
    warm = disk.warm_images(run)
    with Probe(run.target.base_url, run.headers) as probe:
        batch = run.submit(run.bodies(run.options.jobs)).job_ids
        run.wait_running(batch)
        run.note_running(batch)
        fault_end = disk.disk_full(run, warm)
        run.wait_terminal(batch, fault_end)
    _account(run, warm + batch, fault_end, probe)
    disk.check_entries(run, warm + batch)


def _node_loss(run: Run) -> None:
    with node.second_node(run) as lost, Probe(run.target.base_url, run.headers) as probe:
        batch = run.submit(run.bodies(run.options.jobs)).job_ids
        fault_end = node.lose_node(run, lost, batch)
        run.note_running(batch)  # the lost node's runs stay `processing` until their leases lapse
        run.wait_terminal(batch, fault_end)
    _account(run, batch, fault_end, probe)
    ends = job_ends(run.target.settings, batch) or {}
    node.read_all(run, [job for job, end in ends.items() if end.status == "succeeded"])


def _fault_scenario(run: Run, name: str) -> None:
    fault = fault_for(name)
    job_ids: list[str] = []
    if name == "kill-small":  # the small pool serves hits: cache the prompts first, then repeat them
        warm = run.bodies(run.options.jobs)
        first = run.submit(warm).job_ids
        run.wait_terminal(first, time.time(), events=False)
        job_ids += first
        bodies = run.bodies(run.options.jobs, prompts=[body["prompt"] for body in warm], seed=2)
    else:
        bodies = run.bodies(run.options.jobs)
    with Probe(run.target.base_url, run.headers) as probe:
        batch = run.submit(bodies).job_ids
        job_ids += batch
        run.wait_running(batch)
        run.note_running(job_ids)
        fault_end = fault(run)
        if name == "kill-decode":
            _read_images(run, batch, fault_end)
        run.wait_terminal(job_ids, fault_end)
    _account(run, job_ids, fault_end, probe)
    if name in WEBHOOK_FAULTS:
        account_noisy(run, job_ids, fault_end)
    if name == "webhook-outage":  # what recovers is delivery: time from the outage's end to each event
        run.report.recovery = deliveries_after(run, job_ids, fault_end)
        # what the outage held up: the events refused while it lasted, delivered after it
        run.report.running_recovery = deliveries_after(run, job_ids, fault_end, refused=True)
        run.report.running_at_fault_end = len(run.report.running_recovery)


def _read_images(run: Run, job_ids: list[str], since: float) -> None:
    """The decode pool works on reads: fetch each image (retrying while the pool comes back)."""
    run.wait_terminal(job_ids, since, events=False)
    with httpx.Client(base_url=run.target.base_url, headers=run.headers, timeout=60) as client:
        for job_id in job_ids:
            while time.time() - since < run.options.bound_s:
                status = client.get(f"/v1/generations/{job_id}/image").status_code
                if status >= 500 and status != 503:
                    run.report.five_xx += 1
                if status in (200, 404, 409):
                    break
                time.sleep(0.5)


def deliveries_after(run: Run, job_ids: list[str], since: float, *, refused: bool = False) -> list[float]:
    """Seconds from `since` to each delivery of the jobs' events after it (refused: only the events
    the receiver refused before)."""
    wanted = set(job_ids)
    with run.receiver.lock:
        return [
            at - since
            for message, at in run.receiver.delivered_at.items()
            if at > since
            and run.receiver.job_of.get(message) in wanted
            and (not refused or message in run.receiver.refused)
        ]


INTAKE_PATH = "fast"  # the API's one intake (jobs.intake), as the report has always named it


def run_load_by_intake(run: Run) -> dict[str, LoadResult]:
    """The load through the stack's API, keyed by its intake path (the report's `intake_by_path`); the
    scenario accounts for its jobs."""
    result = run_load(run)
    _account(run, result.job_ids, time.time(), None)
    return {INTAKE_PATH: result}


def run_load(run: Run) -> LoadResult:
    """Submit the load, then cancel what was accepted and wait until it ended."""
    bodies = [
        {"prompt": f"{run.tag} load {i}", "cache": "off", "webhook": run.receiver.url}
        for i in range(run.options.load_jobs)
    ]
    result = run.submit(bodies, concurrency=run.options.concurrency)
    ended = time.time()
    run.cancel(result.job_ids)
    run.wait_terminal(result.job_ids, ended)
    return result


def run_cancel_storm(run: Run) -> None:
    result = run.submit(run.bodies(run.options.jobs * 4), concurrency=8)
    ended = time.time()
    run.cancel(result.job_ids)
    run.wait_terminal(result.job_ids, ended)
    _account(run, result.job_ids, ended, None)


def _account(run: Run, job_ids: list[str], fault_end: float, probe: Probe | None) -> None:
    ends = job_ends(run.target.settings, job_ids) or {}
    tally(run.report, ends, job_ids, fault_end=fault_end, running=run.running)
    wanted = set(job_ids)
    with run.receiver.lock:
        twice = {
            m
            for m, count in run.receiver.delivered.items()
            if count > 1 and run.receiver.job_of.get(m) in wanted
        }
    entries = duplicated_entries(run.target.settings, job_ids)
    run.report.duplicate_runs = duplicate_runs(run.target.settings, job_ids)
    run.report.duplicated = entries + len(twice)
    run.report.duplicated_detail = {"cache_entries": entries, "webhook_events": len(twice)}
    if probe is not None:
        run.report.unavailable_s = probe.unavailable_s
        run.report.five_xx += probe.five_xx
