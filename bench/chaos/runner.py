"""`reprise bench chaos`: the scenarios in order against one stack, and the JSON report:
{scenarios: {NAME: {accepted, succeeded, failed, lost, duplicated, recovery_s {p50, max}, unavailable_s,
five_xx, ...}}, intake: {submit_rps, submit_ms {p50, p99}, path}, intake_by_path: {orm: {...}, fast: {...}}}:
`intake` is the stack's own API (its REPRISE_INTAKE), intake_by_path each intake path of the load scenario.

Without --base-url the bench starts a stack of its own (`isolated_stack`): embedded Postgres and Redis
on free ports in a scratch data directory, the tiny models, `reprise run` with short leases, a 5 s beat
and a short webhook retry schedule, so that a run takes minutes; with --base-url it drives a running
stack, whose settings (REPRISE_DATA_DIR...) the bench process must share."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.chaos.load import LoadResult
from bench.chaos.receiver import start_receiver
from bench.chaos.scenarios import (
    SCENARIOS,
    ChaosOptions,
    new_run,
    run_cancel_storm,
    run_fault_scenario,
    run_load_by_intake,
)
from bench.chaos.target import ChaosTarget
from core.settings import Settings, load_settings

# The isolated stack: small jobs (T = 10 at 64x64) and fast recovery loops, so a scenario takes seconds.
ISOLATED_ENV = {
    "REPRISE_MODEL_SET": "tiny",  # faults and recovery, not image quality: the fastest models
    "REPRISE_STEPS": "10",
    "REPRISE_CAPTURE_STEPS": "2,4,6,8",
    "REPRISE_DEFAULT_SIZE": "64",
    "REPRISE_LEASE_S": "6",
    "REPRISE_LEASE_RENEW_S": "2",
    "REPRISE_BEAT_PERIOD_S": "5",
    "REPRISE_STUCK_AFTER_S": "10",
    "REPRISE_WEBHOOK_ALLOW_HOSTS": "127.0.0.1",
    "REPRISE_WEBHOOK_RETRY_DELAYS_S": "0,1,2,4,8,8,8,8,8,8",
    "REPRISE_MONITOR_ENABLED": "false",
    "REPRISE_PREDICTOR_ENABLED": "false",
    "REPRISE_QUEUE_DEPTH_LIMIT": "100000",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "OMP_NUM_THREADS": "1",
}
START_TIMEOUT_S = 300.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def isolated_stack(workdir: Path | None = None) -> Iterator[ChaosTarget]:
    """A whole stack of the bench's own, torn down afterwards; it never touches another stack."""
    root = Path(workdir or tempfile.mkdtemp(prefix="reprise-chaos-"))
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("REPRISE_DATABASE_URL", "REPRISE_REDIS_URL")
    }
    pg_port, redis_port, port = free_port(), free_port(), free_port()
    env |= ISOLATED_ENV | {
        "REPRISE_DATA_DIR": str(root / "data"),
        "REPRISE_PG_PORT": str(pg_port),
        "REPRISE_REDIS_PORT": str(redis_port),
    }
    settings = load_settings(data_dir=root / "data", pg_port=pg_port, redis_port=redis_port, model_set="tiny")
    target = ChaosTarget(base_url=f"http://127.0.0.1:{port}", settings=settings, env=env)
    for args in (("services", "up"), ("migrate",), ("models", "tiny")):
        done = target.reprise(*args, timeout_s=START_TIMEOUT_S)
        if done.returncode != 0:
            raise RuntimeError(f"`reprise {' '.join(args)}` failed: {done.stderr[-2000:]}")
    log = (root / "run.log").open("wb")
    stack = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "reprise",
            "run",
            "--port",
            str(port),
            "--flower-port",
            str(free_port()),
            "--demo",
            "0",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        _wait_up(root / "run.log", stack)
        yield target
    finally:
        stack.send_signal(signal.SIGINT)
        try:
            stack.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(stack.pid, signal.SIGKILL)
        log.close()
        target.reprise("services", "down")


def _wait_up(log: Path, stack: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if "the stack is up" in log.read_text(errors="replace"):
            return
        if stack.poll() is not None:
            break
        time.sleep(1.0)
    raise RuntimeError(
        f"the chaos stack did not come up; see {log}: {log.read_text(errors='replace')[-2000:]}"
    )


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
        "options": options.__dict__,
    }
    try:
        for name in scenarios:
            run = new_run(target, receiver, headers, options)
            started = time.monotonic()
            if name == "load":
                by_intake = {
                    path: _intake_figures(result, options) for path, result in run_load_by_intake(run).items()
                }
                report["intake"] = by_intake[target.settings.intake] | {"path": target.settings.intake}
                report["intake_by_path"] = by_intake
            elif name == "cancel-storm":
                run_cancel_storm(run)
            else:
                run_fault_scenario(run, name)
            report["scenarios"][name] = run.report.as_json() | {
                "seconds": round(time.monotonic() - started, 1)
            }
            print(f"chaos {name}: {json.dumps(report['scenarios'][name])}", file=sys.stderr, flush=True)
    finally:
        receiver.stop()
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
