"""The GPU check: its CPU dry run on the lab's models runs every check for real (through
`python -m bench.gpu`, the entry a GPU host without the service's stack uses), and its verdicts
(batch block, report status, options, weights provenance) follow their rules."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from bench.gpu.report import GpuReport, Outcome, Status, timed_check, weights_provenance
from bench.gpu.runner import (
    GpuCheckOptions,
    batch_outcome,
    default_capture,
    parse_steps,
    takes_batch_sizes,
)

ROOT = Path(__file__).resolve().parents[3]
DryRun = tuple[int, dict[str, Any], Path, str]  # exit status, the JSON, the output folder, stdout
MODEL_CHECKS = ("generate", "resume", "refine", "refine_cross_family", "decode", "reference")


def _takes_batches() -> bool:
    from bench.run.runtime import measure_runtime

    return takes_batch_sizes(measure_runtime)


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory: pytest.TempPathFactory) -> DryRun:
    """One CPU dry run, T = 2 (K = {1}), one prompt, batches of 1 and 2: every check but the worker
    loop's, whose two-step jobs need not overlap (its own test below runs ten steps), in a minute."""
    out = tmp_path_factory.mktemp("gpu")
    env = {**os.environ, "REPRISE_DATA_DIR": str(out / "data")}
    command = [
        sys.executable,
        "-m",
        "bench.gpu",
        "--device",
        "cpu",
        "--steps",
        "2",
        "--prompts",
        "1",
        "--repeats",
        "1",
        "--batch",
        "1,2",
        "--worker-threads",
        "0",
        "--json",
        str(out / "gpu.json"),
        "--runtime-json",
        str(out / "runtime.json"),
    ]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert (out / "gpu.json").is_file(), done.stdout + done.stderr
    return done.returncode, json.loads((out / "gpu.json").read_text()), out, done.stdout


def test_the_cpu_dry_run_runs_every_check_on_the_lab_models(
    dry_run: DryRun,
) -> None:
    code, report, _, stdout = dry_run
    checks = report["checks"]
    assert code == 0 and report["ok"], stdout
    assert report["environment"]["dtype"] == "float32" and report["environment"]["device"] == "cpu"
    assert report["environment"]["text_encoder"]["stored_dtypes"]  # the weights the pipelines load
    assert all(checks[name]["status"] == "pass" for name in ("setup", *MODEL_CHECKS, "bench_runtime"))
    assert checks["generate"]["images"] == 1 and checks["generate"]["evaluations_per_image"] == 2
    assert checks["resume"]["resumes"] == checks["resume"]["bit_exact"] == 1
    assert checks["refine"]["evaluations_per_image"] == 1 and checks["refine"]["family"] == "lab-a"
    assert checks["refine_cross_family"]["family"] == "lab-b"
    assert checks["refine_cross_family"]["vae_decodes_per_image"] == 2
    assert checks["decode"]["identical"] == 1
    assert checks["reference"]["latent_max_abs_diff"] == 0.0  # float32 on the CPU against itself
    assert "worker_loop" not in checks  # --worker-threads 0
    assert checks["bench_runtime"]["report"]["resume_exact"] is True
    assert checks["bench_runtime"]["report"]["large_step_ms"] > 0
    for name in (*MODEL_CHECKS, "bench_runtime"):
        assert f"pass   {name}" in stdout


def test_the_dry_run_measures_batches_when_the_runtime_bench_takes_them(
    dry_run: DryRun,
) -> None:
    _, report, out, _ = dry_run
    batch = report["checks"]["batch"]
    if _takes_batches():
        assert batch["status"] == "pass" and set(batch["batch"]) == {"1", "2"}
        assert batch["batch"]["1"]["images_per_s"] > 0
    else:
        assert batch["status"] == "absent"
    assert json.loads((out / "runtime.json").read_text())["steps"] == 2  # `reprise bench runtime`'s JSON


def test_the_batch_verdict() -> None:
    row = {"images_per_s": 10.0, "step_ms": 1.0, "max_abs_diff": 0.0}
    good = {"batch": {"1": row, "2": {**row, "max_abs_diff": 1e-6}}, "batch_within_atol": True}
    assert batch_outcome(good, [1, 2]).status is Status.PASS
    assert batch_outcome(good, [1, 2, 4]).status is Status.FAIL  # a size not measured
    assert batch_outcome({**good, "batch_within_atol": False}, [1, 2]).status is Status.FAIL
    alone_differs = {**good, "batch": {"1": {**row, "max_abs_diff": 1e-3}}}
    assert batch_outcome(alone_differs, [1]).status is Status.FAIL  # a batch of one is bit for bit
    assert not takes_batch_sizes(lambda settings, *, repeats: None)
    assert takes_batch_sizes(lambda settings, *, repeats, batch_sizes=(): None)


def test_a_failed_check_fails_the_report_and_absent_or_skipped_ones_do_not() -> None:
    def broken() -> Outcome:
        raise RuntimeError("CUDA error: an illegal memory access")

    failed = timed_check("generate", broken)
    assert failed.status is Status.FAIL and "illegal memory access" in failed.detail
    report = GpuReport(environment={}, setup={}, checks=[Outcome("batch", Status.ABSENT, "not yet")])
    report.checks.append(Outcome("decode", Status.SKIP, "generate did not pass"))
    assert report.ok
    report.checks.append(failed)
    assert not report.ok and report.as_json()["checks"]["generate"]["status"] == "fail"
    assert "FAILED: generate" in report.summary()


def test_options() -> None:
    assert default_capture(50) == (5, 10, 15, 20, 25) and default_capture(2) == (1,)
    assert parse_steps("1,2,4,8,16", "--batch") == (1, 2, 4, 8, 16) and parse_steps("none", "--batch") == ()
    with pytest.raises(ValueError, match="--batch"):
        parse_steps("1,two", "--batch")
    with pytest.raises(ValueError, match=r"1\.\.9"):
        GpuCheckOptions(steps=10, capture=(5, 10)).checked_capture()
    bad = subprocess.run(
        [sys.executable, "-m", "bench.gpu", "--steps", "1"], cwd=ROOT, capture_output=True, text=True
    )
    assert bad.returncode == 2 and "steps must be at least 2" in bad.stderr


def test_the_weights_provenance_shows_a_float16_copy(tmp_path: Path) -> None:
    weights = tmp_path / "model.safetensors"
    save_file({"w": torch.zeros(2, 2, dtype=torch.float16)}, str(weights), metadata={"note": "a copy"})
    found = weights_provenance(weights)
    assert found["stored_dtypes"] == ["F16"] and found["metadata"] == {"note": "a copy"}
    assert len(found["sha256"]) == 64 and found["bytes"] == weights.stat().st_size


def test_the_worker_loop_check_shares_steps_and_keeps_each_job_within_tolerance(tmp_path: Path) -> None:
    """Four jobs of ten steps from four threads on the lab's large model, on the CPU in float32."""
    from bench.gpu.runner import lab_settings
    from bench.gpu.worker_loop import worker_loop_check
    from lab.models import ensure_lab_models

    options = GpuCheckOptions(device="cpu", steps=10, prompts=1, worker_threads=4)
    settings = lab_settings("cpu", 10, options.checked_capture()).model_copy(update={"data_dir": tmp_path})
    ensure_lab_models(settings)
    loop = worker_loop_check(settings, options.probe(settings.effective_default_size), 4)
    assert loop.status is Status.PASS, loop.detail
    figures = loop.figures
    assert figures["threads"] == 4 and not figures["errors"] and figures["canceled_at_step"] == 5
    assert figures["largest_batch"] >= 2 and figures["unet_calls"] < figures["steps"]
