"""A replay's accounting: the CPU a local stack's processes spend by role (read from /proc around a run),
the stages of its jobs per route, their device seconds, and the stage clock that times a job's run."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.live.cpu import per_request_ms, read_stack_cpu, role_of, stack_roots
from bench.live.stages import device_s_per_request, stage_summary
from workers.stages import StageClock, add, job_stages, stage

# A parent that starts a child and both burn CPU: a role's time is its whole process tree's.
SPIN = "import time\\nend = time.process_time() + 0.4\\nwhile time.process_time() < end: pass"
BURN = f"""
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "{SPIN}"])
end = time.process_time() + 0.4
while time.process_time() < end:
    pass
child.wait()
open(sys.argv[1], "w").close()
time.sleep(60)
"""


def test_a_pid_file_names_its_role() -> None:
    assert role_of(Path("worker-large.pid")) == "large"
    assert role_of(Path("worker-decode-2.pid")) == "decode"
    assert role_of(Path("api.pid")) == "api"


def test_a_roles_cpu_is_its_process_tree_s_and_a_dead_pid_counts_for_nothing(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    assert read_stack_cpu(tmp_path) is None  # no stack here: nothing to read, and no figure made up
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (run / "worker-io.pid").write_text(f"{dead.pid}\n")
    assert stack_roots(tmp_path) == {}
    before = read_stack_cpu(tmp_path)
    burned = tmp_path / "burned"
    burner = subprocess.Popen([sys.executable, "-c", BURN, str(burned)])
    try:
        (run / "worker-large.pid").write_text(f"{burner.pid}\n")
        first = read_stack_cpu(tmp_path)
        assert before is None and first is not None and set(first.seconds) == {"large"}
        deadline = time.monotonic() + 60  # both processes burn 0.4 s of CPU, then the child ends, waited for
        while not burned.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        second = read_stack_cpu(tmp_path)
        assert second is not None
        spent = second.since(first)["large"]
        assert 0.6 <= spent <= 1.5, spent  # the ended child's time moved into its parent's, once
    finally:
        burner.kill()
        burner.wait()


def test_cpu_per_request_by_role_and_in_all() -> None:
    assert per_request_ms({"large": 2.0, "api": 0.5}, 100) == {"api": 5.0, "large": 20.0, "total": 25.0}
    assert per_request_ms({"large": 2.0}, 0) == {}


def _job(route: str, stages: dict[str, float], status: str = "succeeded") -> dict[str, object]:
    return {"status": status, "metrics": {"route": route, "stages_ms": stages}}


def test_stages_are_summed_per_route_and_device_time_is_the_model_calls() -> None:
    jobs = [
        _job(
            "miss",
            {"queue": 100.0, "encode_prompt": 10.0, "denoise": 300.0, "vae_decode": 20.0, "store": 5.0},
        ),
        _job("miss", {"queue": 300.0, "encode_prompt": 12.0, "denoise": 500.0, "store": 7.0}),
        _job("hit", {"queue": 50.0, "read": 4.0, "encode_prompt": 10.0, "denoise": 60.0}),
        _job("hit", {"denoise": 999.0}, status="failed"),  # only succeeded jobs count
        None,
    ]
    summary = stage_summary(jobs)
    assert summary["miss"]["denoise"] == {"median_ms": 400.0, "total_s": 0.8, "jobs": 2}
    assert summary["miss"]["vae_decode"] == {"median_ms": 20.0, "total_s": 0.02, "jobs": 1}
    assert summary["hit"]["denoise"]["jobs"] == 1
    # Waiting, reading, storing are not the device's: (330 + 512 + 70) ms over three requests.
    assert device_s_per_request(jobs) == pytest.approx((0.33 + 0.512 + 0.07) / 3, abs=1e-5)
    assert device_s_per_request([_job("miss", {})]) is None


def test_stages_nest_exclusively_and_outside_a_job_nothing_is_timed() -> None:
    with stage("store"):  # no job's clock in this thread: the block only runs
        add("denoise", 5.0)
    clock = StageClock()
    with clock.timing("cache_fill"):
        time.sleep(0.02)
        with clock.timing("vae_decode"):
            time.sleep(0.05)
        time.sleep(0.02)
    assert 45.0 <= clock.ms["vae_decode"] <= 150.0
    assert 35.0 <= clock.ms["cache_fill"] <= 100.0  # its own time, not the decode's inside it
    with job_stages() as running:
        add("denoise", 12.5)
        with stage("claim"):
            so_far = running.so_far()
    assert running.ms["denoise"] == 12.5 and "claim" in so_far and list(so_far) == ["claim", "denoise"]
