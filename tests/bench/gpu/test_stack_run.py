"""The whole-stack run (bench.gpu.stack): its CPU mode end to end against the real Postgres and Redis
(the stack as `reprise run` starts it, two replays, default then vanilla, on the lab's models and on the
timing model's tiny scale), and the rules of its options, runs and report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.gpu.stack import main, options_from, parser, plans, summary
from bench.gpu.stack_run import REPLAY_FIGURES, replay_figures
from core.settings import Settings

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def idle_redis_url(redis_url: str, stack_redis_url: str) -> Iterator[str]:
    """A Redis database no stack uses now (empty), other than this run's tests' and end-to-end stack's,
    emptied again afterwards: the run refuses a broker on which other workers answer, since they would
    take its jobs, and other test runs on this machine pick databases by their process id."""
    import redis

    base = redis_url.rpartition("/")[0]
    taken = {redis_url, stack_redis_url}
    idle = [f"{base}/{n}" for n in range(1, 16) if f"{base}/{n}" not in taken]
    url = next((url for url in idle if redis.Redis.from_url(url).dbsize() == 0), None)
    if url is None:
        pytest.skip("no empty Redis database is left for the run's stack")
    yield url
    redis.Redis.from_url(url).flushdb()


@pytest.mark.integration
def test_the_cpu_tiny_run_brings_the_stack_up_twice_and_replays_default_and_vanilla(
    service_settings: Settings, idle_redis_url: str, tmp_path: Path
) -> None:
    out = tmp_path / "stack"
    env = {
        **os.environ,
        "REPRISE_DATABASE_URL": service_settings.sqlalchemy_url,
        "REPRISE_REDIS_URL": idle_redis_url,
        "REPRISE_DATA_DIR": str(service_settings.data_dir.resolve()),  # the built models are kept there
    }
    bounded = ["--ready-timeout", "300", "--replay-timeout", "300"]  # a stuck run fails, with its JSON
    argv = [sys.executable, "-m", "bench.gpu.stack", "--tiny", "--out", str(out), *bounded]
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    report: dict[str, Any] = json.loads((out / "gpu-stack.json").read_text())
    runs = report["runs"]
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert report["ok"] and report["mode"] == "cpu-tiny"
    assert report["card"]["device"] == "cpu" and report["card"]["card"].startswith("CPU")
    assert list(runs) == ["lab", "sd15"]
    for name, run in runs.items():
        assert run["ok"] and run["requests"] == 8, name
        assert run["rps"] > 0 and run["vanilla_rps"] > 0, name
        assert run["device_memory"] is None  # a CPU has no card memory to sample
        assert json.loads((out / run["replay_json"]).read_text())["throughput_rps"] == run["rps"]
        assert run["environment"]["REPRISE_DEVICE"] == "cpu" and run["environment"]["REPRISE_STEPS"] == "10"
        assert {"api", "worker-admit", "worker-large", "worker-small", "worker-decode", "beat"} <= set(
            run["processes"]
        )
        assert [item.name for item in (out / name).iterdir()] == ["logs"]  # blobs and metrics removed
    # What each stack reported it ran (/v1/stats, through the replay's record): the lab's default, and
    # NIRVANA's text lookups with resumed hits on the timing model.
    assert runs["lab"]["lookup"]["lookup"] == "image"
    assert runs["sd15"]["lookup"] | {"k_table": None} == {
        "lookup": "text",
        "hit_policy": "resume",
        "k_table": None,
    }
    model = report["timing_model"]
    assert model["scale"] == "tiny" and model["weights"] == "random"
    assert runs["sd15"]["environment"]["REPRISE_LARGE_MODEL"] == model["path"]
    assert "lab " in done.stdout and "sd15 " in done.stdout and "mode cpu-tiny" in done.stdout


def test_tiny_fills_in_cpu_sizes_and_bad_options_are_refused() -> None:
    tiny = options_from(parser().parse_args(["--out", "x", "--tiny"]))
    assert (tiny.device, tiny.requests, tiny.clients, tiny.quality_sample) == ("cpu", 8, 2, 0)
    gpu = options_from(parser().parse_args(["--out", "x"]))
    assert (gpu.device, gpu.requests, gpu.clients, gpu.quality_sample, gpu.mode) == (
        "cuda",
        300,
        16,
        64,
        "gpu",
    )
    for bad in (["--runs", "lab,video"], ["--clients", "0"], ["--device", "mps"]):
        with pytest.raises(ValueError):
            options_from(parser().parse_args(["--out", "x", *bad]))
    assert main(["--out", "x", "--runs", "nothing"]) == 2


def test_the_sd15_run_serves_the_timing_model_on_both_pools_by_text_and_resume(tmp_path: Path) -> None:
    options = options_from(parser().parse_args(["--out", "x"]))
    lab, sd15 = plans(options, tmp_path / "sd15", 512)
    assert lab.env == {} and lab.quality_sample == 64 and lab.lab_models  # the default configuration, judged
    assert not sd15.lab_models
    assert sd15.env["REPRISE_LARGE_MODEL"] == sd15.env["REPRISE_SMALL_MODEL"] == str(tmp_path / "sd15")
    assert sd15.env["REPRISE_LARGE_FAMILY"] == sd15.env["REPRISE_SMALL_FAMILY"]
    assert (sd15.env["REPRISE_LOOKUP_MODE"], sd15.env["REPRISE_HIT_POLICY"]) == ("text", "resume")
    assert sd15.env["REPRISE_DEFAULT_SIZE"] == "512" and sd15.quality_sample == 0


def test_the_replays_figures_are_copied_through_when_present() -> None:
    bare = {"throughput_rps": 5.0, "vanilla_measured_rps": 4.0, "vs_vanilla_measured": 1.25, "requests": 3}
    figures = replay_figures(bare, report_file="r.json", seconds=1.0)
    assert figures["ok"] and (figures["rps"], figures["vanilla_rps"], figures["vs_vanilla"]) == (
        5.0,
        4.0,
        1.25,
    )
    assert "stages" not in figures and figures["lookup"] == {
        "lookup": None,
        "hit_policy": None,
        "k_table": None,
    }
    stages = {"hit": {"denoise": {"median_ms": 12.0, "total_s": 1.0}}, "miss": {}}
    accounted = {
        **bare,
        "stages": stages,
        "device_s_per_request": 0.5,
        "vanilla_cpu_ms_per_request": {"large": 3.0},
    }
    full = replay_figures(accounted, report_file="r.json", seconds=1.0)
    assert full["stages"] == stages and full["device_s_per_request"] == 0.5
    assert full["vanilla_cpu_ms_per_request"] == {"large": 3.0}
    assert {"stages", "device_s_per_request", "cpu_ms_per_request"} <= set(REPLAY_FIGURES)
    assert not replay_figures({**bare, "vanilla_measured_rps": None}, report_file="r", seconds=0)["ok"]
    report = {
        "ok": True,
        "mode": "cpu-tiny",
        "card": {"card": "CPU (x86_64)", "dtype": "float32", "device": "cpu"},
        "host": {"cpus": 2},
        "trace": {"seed": 1, "requests": 3, "clients": 2},
        "seconds": 3.0,
        "runs": {"lab": {**full, "model": "m", "ready_s": 2.0}},
    }
    text = summary(report)
    assert "hit (median): denoise 12.0 ms" in text and "measure no GPU" in text
