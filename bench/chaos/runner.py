"""`reprise bench chaos`: the scenarios in order against one stack, and the JSON report:
{scenarios: {NAME: {accepted, succeeded, failed, lost, duplicated, recovery_s {p50, max},
running_recovery_s {p50, max, jobs}, lost_detail, unavailable_s, five_xx, jobs, outage_s, settings, ...}},
intake: {submit_rps, submit_ms {p50, p99}, path},
intake_by_path: {fast: {...}}}: `intake` is the load scenario through the stack's API, intake_by_path the
same keyed by its intake path (the API has one, jobs.intake; runs before it was the only one also hold
`orm`).

A scenario whose fault lasts (scenarios.OUTAGES) runs once per outage length; given more than one, its
entries are named NAME@<seconds>s ("postgres@60s"). `jobs` is the batch asked for, `outage_s` the
outage (null for kills, node-loss, load and cancel-storm), `settings` "bench" on the bench's own stack
(bench.chaos.stack: short leases, a 5 s beat) and "default" on a stack driven through --base-url (as an
operator runs it). Figures of a scenario's own (worker_restarts, proxy, reads...) sit beside them.

Without --base-url the bench starts a stack of its own (`run_isolated`): the workers behind the fault
proxy when the network scenario is asked for, and node-loss on a second stack of its own whose blob
store is S3 (moto), after the others; with --base-url it drives a running stack, whose settings
(REPRISE_DATA_DIR...) the bench process must share."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bench.chaos.load import LoadResult
from bench.chaos.proxy import FaultProxy
from bench.chaos.receiver import start_receiver
from bench.chaos.run import ChaosOptions, Run, new_run
from bench.chaos.scenarios import (
    INTAKE_PATH,
    OUTAGES,
    SCENARIOS,
    run_cancel_storm,
    run_fault_scenario,
    run_load_by_intake,
)
from bench.chaos.stack import isolated_stack as isolated_stack  # re-exported: bench.soak starts it too
from bench.chaos.target import ChaosTarget
from core.settings import Settings

S3_SCENARIOS = ("node-loss",)  # on the bench's own stack, these run on a second one with S3 blobs


def issue_admin_key(target: ChaosTarget) -> str:
    """A key of the bench's own tenant, admin (it reads global figures) and with room for the load."""
    done = target.reprise(
        "keys", "create", "--tenant", "chaos", "--admin", "--inflight-limit", "1000000", "--json"
    )
    if done.returncode != 0:
        raise RuntimeError(f"`reprise keys create` failed: {done.stderr or done.stdout}")
    return str(json.loads(done.stdout)["api_key"])


def run_chaos(target: ChaosTarget, scenarios: list[str], options: ChaosOptions) -> dict[str, Any]:
    unknown = [name for name in scenarios if name not in SCENARIOS]
    if unknown:
        raise ValueError(f"unknown scenario {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}")
    headers = {"Authorization": f"Bearer {issue_admin_key(target)}"}
    receiver = start_receiver()
    report: dict[str, Any] = {
        "scenarios": {},
        "intake": None,
        "intake_by_path": None,
        "options": asdict(options),
    }
    try:
        for name in scenarios:
            lengths = options.outages_s if name in OUTAGES else (0.0,)
            for outage_s in lengths:
                key = f"{name}@{outage_s:g}s" if len(lengths) > 1 else name
                run = new_run(target, receiver, headers, options, outage_s=outage_s)
                row = _run_one(run, name, report)
                report["scenarios"][key] = row | {
                    "jobs": options.jobs if name not in ("load",) else options.load_jobs,
                    "outage_s": outage_s if name in OUTAGES else None,
                    "settings": row.get("settings", "bench" if target.isolated else "default"),
                }
                print(f"chaos {key}: {json.dumps(report['scenarios'][key])}", file=sys.stderr, flush=True)
    finally:
        receiver.stop()
    return report


def _run_one(run: Run, name: str, report: dict[str, Any]) -> dict[str, Any]:
    """Run one scenario; its row (with the seconds it took and its own figures)."""
    started = time.monotonic()
    if name == "load":
        results = run_load_by_intake(run)
        by_intake = {path: _intake_figures(result, run.options) for path, result in results.items()}
        report["intake"] = by_intake[INTAKE_PATH] | {"path": INTAKE_PATH}
        report["intake_by_path"] = by_intake
    elif name == "cancel-storm":
        run_cancel_storm(run)
    else:
        try:
            run_fault_scenario(run, name)
        except RuntimeError as error:  # the scenario cannot run on this stack: say why, go on
            run.extra["error"] = str(error)
    return run.report.as_json() | run.extra | {"seconds": round(time.monotonic() - started, 1)}


def run_isolated(scenarios: list[str], options: ChaosOptions, workdir: Path | None) -> dict[str, Any]:
    """The scenarios on stacks of the bench's own: those of S3_SCENARIOS on a second stack (S3 blobs),
    after the others; one report."""
    unknown = [name for name in scenarios if name not in SCENARIOS]
    if unknown:
        raise ValueError(f"unknown scenario {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}")
    local = [name for name in scenarios if name not in S3_SCENARIOS]
    shared = [name for name in scenarios if name in S3_SCENARIOS]
    root = Path(workdir or tempfile.mkdtemp(prefix="reprise-chaos-"))
    report: dict[str, Any] | None = None
    for names, s3 in ((local, False), (shared, True)):
        if not names:
            continue
        with isolated_stack(root / ("s3" if s3 else "local"), proxy="network" in names, s3=s3) as target:
            part = run_chaos(target, names, options)
        if report is None:
            report = part
        else:
            report["scenarios"] |= part["scenarios"]
            report["intake"] = report["intake"] or part["intake"]
            report["intake_by_path"] = report["intake_by_path"] or part["intake_by_path"]
    assert report is not None
    return report


def _intake_figures(result: LoadResult, options: ChaosOptions) -> dict[str, Any]:
    return {
        "submit_rps": round(result.submit_rps, 1),
        "submit_ms": {"p50": result.percentile_ms(0.5), "p99": result.percentile_ms(0.99)},
        "submissions": len(result.latencies_ms),
        "statuses": {str(status): n for status, n in sorted(result.statuses.items())},
        "transport_errors": dict(result.errors),  # no answer: the job may or may not exist
        "concurrency": options.concurrency,
    }


def target_for(base_url: str, settings: Settings) -> ChaosTarget:
    """A running stack, reached with this process's settings and environment."""
    return ChaosTarget(base_url=base_url.rstrip("/"), settings=settings, env=dict(os.environ))


def run_against(
    base_url: str, settings: Settings, scenarios: list[str], options: ChaosOptions, *, proxy_ports: list[int]
) -> dict[str, Any]:
    """The scenarios against a running stack; with proxy_ports (REDIS, POSTGRES), the fault proxy listens
    there for the whole run (the stack's workers were pointed at them), for the network scenario."""
    target = target_for(base_url, settings)
    if not proxy_ports:
        return run_chaos(target, scenarios, options)
    if len(proxy_ports) != 2:
        raise RuntimeError("--proxy-ports takes two ports: REDIS,POSTGRES")
    with proxy_for(settings, proxy_ports[0], proxy_ports[1]) as target.proxy:
        target.wait_workers()  # they reach Redis through the proxy, which listens from now on
        return run_chaos(target, scenarios, options)


def proxy_for(settings: Settings, redis_port: int, postgres_port: int) -> FaultProxy:
    """The fault proxy for a running stack's workers: listening on the ports they were pointed at,
    passing to the stack's Redis and Postgres (this process's settings)."""
    redis, postgres = urlsplit(settings.broker_url), urlsplit(settings.sqlalchemy_url)
    return FaultProxy(
        {
            "redis": (redis.hostname or "127.0.0.1", redis.port or 6379),
            "postgres": (postgres.hostname or "127.0.0.1", postgres.port or 5432),
        },
        ports={"redis": redis_port, "postgres": postgres_port},
    )
