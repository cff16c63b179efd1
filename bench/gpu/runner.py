"""The GPU check's run: settings for the lab's models on the asked device, the runtime's checks in
order (bench.gpu.checks), then `reprise bench runtime`'s measurement on the same device, with
step-level batching when the checkout has it.

The runtime bench (bench.run.runtime.measure_runtime, what `reprise bench runtime` runs) becomes two
checks: `bench_runtime` (its figures; it passes when its resume_exact holds) and `batch` (its `batch`
block for each size asked and its exactness: every size measured, a batch of one bit for bit equal to
a job run alone, and batch_within_atol). A checkout whose measure_runtime takes no batch sizes reports
`batch` absent, and one whose runtime bench cannot be imported reports `bench_runtime` failed with the
missing module, instead of stopping the run.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from bench.gpu.checks import (
    Generated,
    Probe,
    Scorer,
    decode_check,
    generate_check,
    reference_check,
    refine_check,
    resume_check,
)
from bench.gpu.report import (
    GpuReport,
    Outcome,
    Status,
    environment,
    outcome,
    skipped,
    timed_check,
    weights_provenance,
)
from bench.gpu.worker_loop import worker_loop_check
from core.schedulers import SchedulerName
from core.settings import Settings, load_settings
from core.vocabulary import ModelSet

# Scenes of the lab's world, each naming every attribute, so that the judge scores them.
PROMPTS: Final = (
    "a small red circle left of a large blue square on a striped yellow background",
    "a large green triangle above a small purple circle on a checkered gray background",
    "a small orange square on the right on a plain black background",
    "a large blue circle in the center on a plain white background",
)
BATCHING_MODULE: Final = "workers.runtime.batching"
QUIET_OFFLINE: Final = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "DIFFUSERS_VERBOSITY": "error",
    "TRANSFORMERS_VERBOSITY": "error",
}


@dataclass(frozen=True, slots=True)
class GpuCheckOptions:
    """What to run. steps: T; capture: K (None: NIRVANA's 10%..50% of T); prompts: how many of PROMPTS;
    refine_k: where refine starts (None: T // 2); repeats: timed runs of the runtime bench; batch_sizes:
    its `--batch` (empty: none); reference: also generate in float32 on the CPU; worker_threads: jobs
    run at once through the worker's batch loop (bench.gpu.worker_loop; 0: not checked)."""

    device: str = "cuda"
    steps: int = 50
    capture: tuple[int, ...] | None = None
    prompts: int = len(PROMPTS)
    seed: int = 7
    refine_k: int | None = None
    repeats: int = 3
    batch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16)
    reference: bool = True
    worker_threads: int = 8

    def checked_capture(self) -> tuple[int, ...]:
        """K as asked (or the default), checked against T; raises ValueError naming the option."""
        if self.steps < 2:
            raise ValueError("steps must be at least 2: a resume needs a step to start from and one to run")
        capture = self.capture if self.capture is not None else default_capture(self.steps)
        refine_k = self.refine_k if self.refine_k is not None else self.steps // 2
        if not capture or any(not 1 <= k < self.steps for k in (*capture, refine_k)):
            raise ValueError(f"capture steps and refine k must lie in 1..{self.steps - 1}")
        if not 1 <= self.prompts <= len(PROMPTS):
            raise ValueError(f"prompts must be in 1..{len(PROMPTS)}")
        return tuple(sorted(set(capture)))

    def probe(self, size: int) -> Probe:
        refine_k = self.refine_k if self.refine_k is not None else self.steps // 2
        return Probe(PROMPTS[: self.prompts], self.steps, self.checked_capture(), size, self.seed, refine_k)


def default_capture(steps: int) -> tuple[int, ...]:
    """NIRVANA's K = {5, 10, 15, 20, 25} of T = 50, as shares of T: 10%, 20% ... 50%, within 1..T-1."""
    return tuple(sorted({min(steps - 1, max(1, round(steps * tenth / 10))) for tenth in range(1, 6)}))


def lab_settings(device: str, steps: int, capture: Sequence[int], *, small: str = "lab:small") -> Settings:
    """The lab's models (whatever REPRISE_*_MODEL say) on `device`, DDIM, T and K as asked."""
    return load_settings(
        device=device,
        model_set=ModelSet.LAB,
        large_model="lab:large",
        small_model=small,
        large_family="",
        small_family="",
        decode_model=None,
        steps=steps,
        capture_steps=list(capture),
        scheduler=SchedulerName.DDIM,
        default_size=None,
    )


def run_gpu_check(
    options: GpuCheckOptions, *, on_check: Callable[[GpuReport, Outcome], None] | None = None
) -> GpuReport:
    """Every check, in order; a check that fails never stops the others (those needing it skip).
    on_check is told of each check as it ends (to show progress, or keep the JSON up to date)."""
    started = time.perf_counter()
    settings = lab_settings(options.device, options.steps, options.checked_capture())
    probe = options.probe(settings.effective_default_size)
    report = GpuReport(environment={}, setup=_setup_json(options, probe), on_check=on_check)
    report.add(timed_check("setup", lambda: _setup(settings, report)))
    if report.checks[-1].status is Status.PASS:
        _model_checks(report, settings, probe, options)
        if options.worker_threads:
            threads = options.worker_threads
            report.add(timed_check("worker_loop", lambda: worker_loop_check(settings, probe, threads)))
        report.add(*bench_runtime_checks(settings, repeats=options.repeats, batch_sizes=options.batch_sizes))
        report.environment |= peak_memory(settings.device)
    report.seconds = time.perf_counter() - started
    return report


def _setup(settings: Settings, report: GpuReport) -> Outcome:
    """Resolve the device, assemble the lab's pipelines, record the machine and the text encoder."""
    from lab.models import ensure_lab_models
    from workers.runtime.loading import compute_dtype, resolve_device

    report.environment = environment()  # the versions, even when the device cannot be used
    device = resolve_device(settings.device)
    report.environment = environment(device, compute_dtype(device))
    paths = ensure_lab_models(settings)
    encoder = weights_provenance(paths.pipeline("large") / "text_encoder" / "model.safetensors")
    report.environment["text_encoder"] = encoder
    detail = f"{report.environment['card']}, {report.environment['dtype']}; lab models in {paths.root}"
    return outcome("setup", True, detail, {"models": str(paths.root)})


def _model_checks(report: GpuReport, settings: Settings, probe: Probe, options: GpuCheckOptions) -> None:
    generated: Generated = {}
    report.add(timed_check("generate", lambda: generate_check(settings, probe, generated)))
    dependent: list[tuple[str, Callable[[], Outcome]]] = [
        ("resume", lambda: resume_check(settings, probe, generated)),
        ("refine", lambda: refine_check(settings, probe, generated, name="refine")),
        (
            "refine_cross_family",
            lambda: refine_check(_cross_family(settings), probe, generated, name="refine_cross_family"),
        ),
        ("decode", lambda: decode_check(settings, generated)),
    ]
    if options.reference:
        cpu = lab_settings("cpu", probe.steps, probe.capture)
        dependent.append(("reference", lambda: reference_check(cpu, probe, generated, _judge(settings))))
    ran = report.checks[-1].status is Status.PASS and len(generated) == len(probe.prompts)
    for name, check in dependent:
        report.add(timed_check(name, check) if ran else skipped(name, "generate did not pass"))


def _cross_family(settings: Settings) -> Settings:
    return lab_settings(settings.device, settings.steps, settings.capture_steps, small="lab:small-b")


def _judge(settings: Settings) -> Scorer | None:
    """The lab's judge, on the CPU; None when it is refused (its validation below a floor)."""
    from core.errors import RepriseError
    from lab.models import load_judge

    try:
        return load_judge(settings).score
    except RepriseError:
        return None


def bench_runtime_checks(settings: Settings, *, repeats: int, batch_sizes: Sequence[int]) -> list[Outcome]:
    """`reprise bench runtime` on `settings` (with its batch sizes when it takes them): two checks."""
    try:
        from bench.run.runtime import measure_runtime
    except ImportError as error:  # a dependency of the runtime bench (pcodec, sqlalchemy) missing here
        why = f"bench.run.runtime cannot be imported: {type(error).__name__}: {error}"
        return [Outcome("bench_runtime", Status.FAIL, why), skipped("batch", "the runtime bench did not run")]
    batches = list(batch_sizes) if takes_batch_sizes(measure_runtime) else []
    found: dict[str, Any] = {}

    def bench() -> Outcome:
        if batches:
            found.update(measure_runtime(settings, repeats=repeats, batch_sizes=batches).as_json())
        else:
            found.update(measure_runtime(settings, repeats=repeats).as_json())
        exact = found.get("resume_exact") is True
        detail = (
            f"large step {found['large_step_ms']:.2f} ms, small step {found['small_step_ms']:.2f} ms, "
            f"decode {found['decode_ms']:.2f} ms, resume_exact {str(found.get('resume_exact')).lower()}"
        )
        return outcome("bench_runtime", exact, detail, {"report": found})

    checks = [timed_check("bench_runtime", bench)]
    if not batch_sizes:
        return [*checks, skipped("batch", "no batch sizes asked")]
    if not batches:
        return [*checks, batch_absent()]
    if not found:
        return [*checks, skipped("batch", "the runtime bench failed")]
    return [*checks, batch_outcome(found, batches)]


def takes_batch_sizes(measure: Callable[..., Any]) -> bool:
    """Whether the runtime bench runs step-level batches (its `batch_sizes`, `--batch`)."""
    return "batch_sizes" in inspect.signature(measure).parameters


def batch_absent() -> Outcome:
    module = "present" if importlib.util.find_spec(BATCHING_MODULE) is not None else "absent"
    why = f"measure_runtime takes no batch sizes in this checkout ({BATCHING_MODULE} {module})"
    return Outcome("batch", Status.ABSENT, why)


def batch_outcome(found: dict[str, Any], sizes: Sequence[int]) -> Outcome:
    """The runtime bench's `batch` block against the sizes asked, and its exactness keys."""
    block: dict[str, dict[str, float]] = found.get("batch") or {}
    missing = [size for size in sizes if not {"images_per_s", "step_ms"} <= set(block.get(str(size), {}))]
    alone = block.get("1", {}).get("max_abs_diff")
    within = found.get("batch_within_atol")
    figures = {key: value for key, value in found.items() if key.startswith("batch")}
    throughput = ", ".join(f"{size}: {row['images_per_s']:.1f}/s" for size, row in block.items())
    detail = (
        f"images/s by batch size {throughput or 'none'}; max |batched - alone| "
        f"{_figure(found.get('batch_max_abs_diff'))} (atol {_figure(found.get('batch_atol'))}), "
        f"bit for bit {str(found.get('batch_exact')).lower()}"
    )
    if missing:
        detail += f"; sizes not measured: {missing}"
    passed = not missing and within is not False and alone in (None, 0.0)
    return outcome("batch", passed, detail, figures)


def parse_steps(text: str, option: str) -> tuple[int, ...]:
    """'1,2,4,8,16' -> (1, 2, 4, 8, 16); '' or 'none' -> (). Raises ValueError naming the option."""
    if text.strip().lower() in ("", "none"):
        return ()
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ValueError(f"{option} {text!r}: a comma list of whole numbers, e.g. 1,2,4,8,16") from None
    if min(values, default=1) < 1:
        raise ValueError(f"{option} {text!r}: every value must be at least 1")
    return values


def run_command(
    *,
    device: str,
    steps: int,
    capture: str | None,
    refine_k: int | None,
    prompts: int,
    seed: int,
    repeats: int,
    batch: str,
    reference: bool,
    worker_threads: int = 8,
    json_path: Path | None,
    runtime_json: Path | None,
) -> int:
    """Both command lines' body (`reprise bench gpu`, `python -m bench.gpu`): the options checked, the
    checks run, the summary printed and the files written; the exit status (0 every check passed, 1 a
    check failed, 2 a bad option or an invalid REPRISE_* setting, said on stderr)."""
    from core.errors import SettingsError

    try:
        options = GpuCheckOptions(
            device=device,
            steps=steps,
            prompts=prompts,
            seed=seed,
            refine_k=refine_k,
            repeats=repeats,
            capture=parse_steps(capture, "--capture") if capture is not None else None,
            batch_sizes=parse_steps(batch, "--batch"),
            reference=reference,
            worker_threads=worker_threads,
        )
        options.checked_capture()
        if worker_threads and worker_threads < 4:
            raise ValueError("--worker-threads must be 0 (no check) or at least 4")
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    quiet_offline()
    try:
        report = run_gpu_check(options, on_check=progress(json_path))
    except SettingsError as error:  # a REPRISE_* variable of this host is invalid
        print(error, file=sys.stderr)
        return 2
    print(report.summary())
    for path in write_outputs(report, json_path=json_path, runtime_json=runtime_json):
        print(f"wrote {path}")
    return 0 if report.ok else 1


def write_outputs(report: GpuReport, *, json_path: Path | None, runtime_json: Path | None) -> list[Path]:
    """The report's JSON, and the runtime bench's own (`reprise bench runtime --json`'s, which
    `reprise bench simulate --costs` reads) when it ran; the paths written."""
    written = []
    if json_path is not None:
        report.write(json_path)
        written.append(json_path)
    bench = report.get("bench_runtime")
    if runtime_json is not None and bench is not None and "report" in bench.figures:
        runtime_json.parent.mkdir(parents=True, exist_ok=True)
        runtime_json.write_text(json.dumps(bench.figures["report"], indent=2) + "\n")
        written.append(runtime_json)
    return written


def progress(json_path: Path | None) -> Callable[[GpuReport, Outcome], None]:
    """Each check's line on stderr as it ends, and the JSON rewritten, so that a run stopped midway
    (a time limit, a hung kernel) still leaves the checks it finished."""

    def told(report: GpuReport, check: Outcome) -> None:
        print(check.line(), file=sys.stderr, flush=True)
        if json_path is not None:
            report.write(json_path)

    return told


def _figure(value: Any) -> str:
    return f"{value:.2e}" if isinstance(value, float) else str(value)


def quiet_offline() -> None:
    """No download and no progress bars: the weights come from the checkout, the output is the report.
    Call it before diffusers or transformers load (the environment is read at their import)."""
    for name, value in QUIET_OFFLINE.items():
        os.environ.setdefault(name, value)
    from diffusers.utils import logging as diffusers_logging

    diffusers_logging.disable_progress_bar()


def peak_memory(device: str) -> dict[str, Any]:
    """The most memory the run's tensors held on a CUDA device (what one worker of each role needs)."""
    import torch

    if not device.startswith("cuda") or not torch.cuda.is_available():
        return {}
    return {"peak_memory_mib": round(torch.cuda.max_memory_allocated(torch.device(device)) / 2**20, 1)}


def _setup_json(options: GpuCheckOptions, probe: Probe) -> dict[str, Any]:
    return {
        "models": {"large": "lab:large", "small": "lab:small", "cross_family_small": "lab:small-b"},
        "scheduler": "ddim",
        "steps": probe.steps,
        "capture_steps": list(probe.capture),
        "refine_k": probe.refine_k,
        "size": probe.size,
        "seed": probe.seed,
        "prompts": list(probe.prompts),
        "repeats": options.repeats,
        "batch_sizes": list(options.batch_sizes),
        "reference": "float32 on the CPU" if options.reference else None,
    }
