"""One run of the whole-stack check (bench.gpu.stack): a fresh database on the stack's Postgres migrated
by `reprise migrate`, the stack brought up by `reprise run` (the API, a worker of every role, beat and
Flower, under its supervisor), a lab trace replayed through its API by `reprise bench replay --vanilla`,
the card's memory sampled meanwhile, then everything stopped and the database dropped. The project's
commands run as they are, in processes of their own: this module starts them, it does not redo them.

Each run's processes get the run's environment (its models and lookup) and a data directory of their
own under the output (logs, blobs, beat's schedule, metrics), whose `models` links to the invoking
data directory's, so that the lab's pipelines, the tiny CLIP and MiniLM's ONNX export are built once.
The database and Redis are the invoking settings' (embedded ones started by the caller), reached by URL.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from core.redaction import redacted_url

if TYPE_CHECKING:  # the stack's libraries load only once the preflight found them (bench.gpu.stack)
    from core.settings import Settings

# What a replay's JSON carries that the whole-stack report copies as it is, when the replay has it.
REPLAY_FIGURES: Final = (
    "requests",
    "hit_rate",
    "compute_saved",
    "k_histogram",
    "latency_ms",
    "admission_ms",
    "stack_step_ms",
    "quality",
    "stages",
    "device_s_per_request",
    "cpu_ms_per_request",
    "vanilla_stages",
    "vanilla_device_s_per_request",
    "vanilla_cpu_ms_per_request",
)
KEPT_IN_RUN_DIR: Final = ("logs",)  # the rest of a run's data directory (blobs, metrics) is removed
URL_VARIABLES: Final = ("REPRISE_DATABASE_URL", "REPRISE_REDIS_URL")
STACK_UP: Final = "the stack is up"  # what `reprise run` prints once every process is ready


@dataclass(frozen=True, slots=True)
class RunPlan:
    """One replay on its own stack: its name (files are named after it), what it serves in words, the
    REPRISE_* variables it sets on top of the invoking environment, the replay's quality sample, and
    whether it serves the lab's models."""

    name: str
    model: str
    env: Mapping[str, str]
    quality_sample: int = 0
    lab_models: bool = False  # serves the lab's models: `reprise models lab` assembles them first


@dataclass(frozen=True, slots=True)
class ReplayLoad:
    """What every run replays: the trace's prompts, how many, by how many closed-loop clients."""

    prompts: Path
    requests: int
    clients: int


@dataclass(slots=True)
class MemorySampler:
    """The card's memory in use (all processes: cudaMemGetInfo), sampled on a thread while a run lasts;
    nothing on a CPU."""

    device: str
    period_s: float = 0.5
    samples: list[float] = field(default_factory=list)
    total_mib: float | None = None
    _halt: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def used_mib(self) -> float | None:
        if not self.device.startswith("cuda"):
            return None
        import torch

        free, total = torch.cuda.mem_get_info(torch.device(self.device))
        self.total_mib = total / 2**20
        return (total - free) / 2**20

    def start(self) -> None:
        if self.used_mib() is None:
            return
        self._thread = threading.Thread(target=self._loop, name="memory", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._halt.wait(self.period_s):
            used = self.used_mib()
            if used is not None:
                self.samples.append(used)

    def stop(self) -> dict[str, Any] | None:
        self._halt.set()
        if self._thread is None:
            return None
        self._thread.join()
        return {
            "total_mib": _round(self.total_mib),
            "peak_used_mib": _round(max(self.samples, default=0.0)),
            "last_used_mib": _round(self.samples[-1] if self.samples else None),
            "samples": len(self.samples),
        }


def free_ports(count: int) -> list[int]:
    """`count` distinct ports free on the loopback now (held open together, so none repeats)."""
    with ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]


def reprise(*args: str) -> list[str]:
    return [sys.executable, "-m", "reprise", *args]


def admin_dsn(settings: Settings, database: str) -> str:
    """psycopg's DSN for `database` on the settings' Postgres server."""
    url = settings.sqlalchemy_url.replace("postgresql+psycopg://", "postgresql://", 1)
    return f"{url.rpartition('/')[0]}/{database}"


@contextmanager
def fresh_database(settings: Settings, name: str) -> Iterator[str]:
    """A new database on the settings' server for one run (its SQLAlchemy URL), dropped on exit: each
    run starts with an empty cache, sized for its own embedders at its migration."""
    import psycopg

    database = f"reprise_gpu_stack_{name}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_dsn(settings, "postgres"), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{database}"')
    try:
        yield admin_dsn(settings, database).replace("postgresql://", "postgresql+psycopg://", 1)
    finally:
        with psycopg.connect(admin_dsn(settings, "postgres"), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


def run_environment(
    plan: RunPlan, *, database_url: str, broker_url: str, data_dir: Path, device: str
) -> dict[str, str]:
    """The run's processes' environment: the invoking one, the run's services and data directory, its
    device, no download, then the plan's own variables."""
    return {
        **os.environ,
        "REPRISE_DATABASE_URL": database_url,
        "REPRISE_REDIS_URL": broker_url,
        "REPRISE_DATA_DIR": str(data_dir),
        "REPRISE_DEVICE": device,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        **plan.env,
    }


def described_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The REPRISE_* variables a run's processes saw, URLs without their passwords."""
    return {
        name: redacted_url(value) if name in URL_VARIABLES else value
        for name, value in sorted(env.items())
        if name.startswith("REPRISE_")
    }


def run_once(
    plan: RunPlan,
    settings: Settings,
    load: ReplayLoad,
    *,
    out: Path,
    device: str,
    ready_timeout_s: float,
    replay_timeout_s: float,
) -> dict[str, Any]:
    """The plan on a stack of its own, replayed: the run's record (its figures, or the error that stopped
    it). Its replay's own JSON and log are kept as <name>-replay.json and .log under `out`, its processes'
    logs under <name>/logs."""
    data_dir = out / plan.name
    data_dir.mkdir(parents=True, exist_ok=True)
    models = data_dir / "models"
    if not models.exists():
        settings.tiny_models_dir.resolve().mkdir(parents=True, exist_ok=True)
        models.symlink_to(settings.tiny_models_dir.resolve(), target_is_directory=True)
    record: dict[str, Any] = {"name": plan.name, "model": plan.model, "ok": False}
    started = time.perf_counter()
    try:
        with fresh_database(settings, plan.name) as database_url:
            env = run_environment(
                plan,
                database_url=database_url,
                broker_url=settings.broker_url,
                data_dir=data_dir.resolve(),
                device=device,
            )
            record["environment"] = described_environment(env)
            _prepare(plan, env, data_dir / "logs")
            record |= _serve_and_replay(
                plan,
                load,
                env=env,
                out=out,
                data_dir=data_dir,
                ready_timeout_s=ready_timeout_s,
                replay_timeout_s=replay_timeout_s,
            )
    except (RuntimeError, subprocess.SubprocessError, OSError, ValueError) as error:
        record["error"] = f"{type(error).__name__}: {error}"
    finally:
        _tidy(data_dir)
    record["seconds"] = round(time.perf_counter() - started, 1)
    return record


def _prepare(plan: RunPlan, env: Mapping[str, str], logs: Path) -> None:
    """The run's database migrated and, for the lab's models, their pipelines assembled, by the project's
    own commands."""
    logs.mkdir(parents=True, exist_ok=True)
    commands = [("migrate", reprise("migrate"))]
    if plan.lab_models:
        commands.append(("models-lab", reprise("models", "lab")))
    for name, argv in commands:
        with (logs / f"{name}.log").open("wb") as log:
            done = subprocess.run(argv, env=dict(env), stdout=log, stderr=subprocess.STDOUT, timeout=600)
        if done.returncode != 0:
            raise RuntimeError(
                f"`reprise {' '.join(argv[3:])}` exited {done.returncode}: {_tail(logs / f'{name}.log')}"
            )


def _serve_and_replay(
    plan: RunPlan,
    load: ReplayLoad,
    *,
    env: Mapping[str, str],
    out: Path,
    data_dir: Path,
    ready_timeout_s: float,
    replay_timeout_s: float,
) -> dict[str, Any]:
    """`reprise run --demo 0` in the run's environment (the API, a worker of every role, beat and Flower,
    kept up by its supervisor), replayed once it says the stack is up, then stopped as Ctrl-C stops it."""
    refuse_shared_broker(env["REPRISE_REDIS_URL"])
    port, flower_port = free_ports(2)
    logs = data_dir / "logs"
    run_log = logs / "run.log"
    argv = reprise("run", "--port", str(port), "--flower-port", str(flower_port), "--demo", "0")
    memory = MemorySampler(device=env["REPRISE_DEVICE"])
    record: dict[str, Any] = {}
    memory.start()
    with run_log.open("wb") as log:
        stack = subprocess.Popen(
            argv, env=dict(env), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            started = time.perf_counter()
            _wait_up(stack, run_log, ready_timeout_s)
            record["ready_s"] = round(time.perf_counter() - started, 1)
            record["processes"] = sorted(path.stem for path in (data_dir / "run").glob("*.pid"))
            base_url = f"http://127.0.0.1:{port}"
            record |= _replay(plan, load, env=env, base_url=base_url, out=out, timeout_s=replay_timeout_s)
        finally:
            _stop(stack)
            record["device_memory"] = memory.stop()
            record["restarts"] = [line for line in _lines(logs / "supervisor.log") if "restart" in line]
    return record


def refuse_shared_broker(broker_url: str) -> None:
    """Raise RuntimeError when workers already answer on the run's broker: another stack's workers there
    would take this run's jobs (their database has none of them, and they would never finish)."""
    from jobs.celery_app import get_celery_app
    from jobs.hosts import answering_roles

    roles = answering_roles(get_celery_app())
    if roles:
        raise RuntimeError(
            f"workers of another stack answer on {redacted_url(broker_url)} ({', '.join(sorted(roles))}): "
            "they would take this run's jobs; give it a Redis database of its own (REPRISE_REDIS_URL)"
        )


def _wait_up(stack: subprocess.Popen[bytes], run_log: Path, timeout_s: float) -> None:
    """Until `reprise run` prints that the stack is up (every role answered, /readyz ready); raises
    RuntimeError, with the tails of the logs that show an error, when it exits first or takes too long."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(line.startswith(STACK_UP) for line in _lines(run_log)):
            return
        if stack.poll() is not None:
            raise RuntimeError(
                f"`reprise run` exited {stack.returncode} before the stack was up: {_tail(run_log, 4)}; "
                f"{_failed_tails(run_log.parent)}"
            )
        time.sleep(0.5)
    raise RuntimeError(f"the stack was not up after {timeout_s:.0f}s; {_failed_tails(run_log.parent)}")


def _stop(stack: subprocess.Popen[bytes], timeout_s: float = 120.0) -> None:
    """SIGTERM to `reprise run`, which stops its processes in order (Ctrl-C's path); SIGKILL to its group
    if it has not ended after `timeout_s` (its processes then follow it: reprise.supervision)."""
    if stack.poll() is None:
        stack.send_signal(signal.SIGTERM)
    try:
        stack.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(stack.pid, signal.SIGKILL)
        stack.wait()


def _replay(
    plan: RunPlan, load: ReplayLoad, *, env: Mapping[str, str], base_url: str, out: Path, timeout_s: float
) -> dict[str, Any]:
    """`reprise bench replay --vanilla` through the stack's API: the configured run, then the same
    requests with the cache off; its figures read back from its JSON."""
    report_path = out / f"{plan.name}-replay.json"
    log_path = out / f"{plan.name}-replay.log"
    argv = reprise(
        "bench",
        "replay",
        "--base-url",
        base_url,
        "--trace",
        str(load.prompts),
        "--limit",
        str(load.requests),
        "--concurrency",
        str(load.clients),
        "--quality-sample",
        str(plan.quality_sample),
        "--vanilla",
        "--tenant",
        f"gpu-stack-{plan.name}",
        "--json",
        str(report_path),
    )
    started = time.perf_counter()
    with log_path.open("wb") as log:
        done = subprocess.run(argv, env=dict(env), stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s)
    seconds = time.perf_counter() - started
    if done.returncode != 0 or not report_path.is_file():
        raise RuntimeError(f"the replay exited {done.returncode}: {_tail(log_path)}")
    return replay_figures(json.loads(report_path.read_text()), report_file=report_path.name, seconds=seconds)


def replay_figures(report: Mapping[str, Any], *, report_file: str, seconds: float) -> dict[str, Any]:
    """A run's figures from its replay's JSON: requests per second configured and vanilla and their
    ratio, what the stack reported it ran (lookup, hit policy, embedder), and REPLAY_FIGURES where the
    replay has them. ok when both runs served."""
    rps, vanilla = report.get("throughput_rps"), report.get("vanilla_measured_rps")
    profile = (report.get("stack") or {}).get("profile") or {}
    figures: dict[str, Any] = {
        "ok": bool(rps) and bool(vanilla),
        "replay_json": report_file,
        "replay_s": round(seconds, 1),
        "rps": rps,
        "vanilla_rps": vanilla,
        "vs_vanilla": report.get("vs_vanilla_measured"),
        "lookup": {key: profile.get(key) for key in ("lookup", "hit_policy", "k_table")},
        "embedder": (report.get("embedder") or {}).get("name"),
    }
    figures |= {key: report[key] for key in REPLAY_FIGURES if key in report}
    return figures


def _tidy(data_dir: Path) -> None:
    """A run's data directory down to its logs: blobs, metrics and beat's schedule removed, the models
    link unlinked (the models stay where they are)."""
    for item in data_dir.iterdir() if data_dir.is_dir() else ():
        if item.name in KEPT_IN_RUN_DIR:
            continue
        if item.is_symlink() or item.is_file():
            item.unlink()
        else:
            shutil.rmtree(item, ignore_errors=True)


def _lines(path: Path) -> list[str]:
    return path.read_text(errors="replace").splitlines() if path.is_file() else []


def _tail(path: Path, lines: int = 15) -> str:
    return " | ".join(line for line in _lines(path)[-lines:] if line.strip()) or "(no output)"


def _failed_tails(logs: Path) -> str:
    """The last lines of each process's log that shows a traceback or an error (what kept it down)."""
    found = []
    for log in sorted(logs.glob("*.log")):
        text = log.read_text(errors="replace")
        if "Traceback" in text or "error" in text.lower():
            found.append(f"{log.name}: {_tail(log, 6)}")
    return "; ".join(found) or f"no process logged an error; see {logs}"


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)
