"""`reprise bench soak`: the request mix and its caps, what counts as an error, p99 per minute, the
memory summary, RSS read from /proc for a process tree and pidfiles, and a short soak on the bench's
own stack whose JSON has the contract's keys with sane values."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from bench.soak.memory import children_by_parent, stack_pids, tree_rss_mib, vm_rss_kib
from bench.soak.mix import SUBMITS, Mix, Op, choose, is_error, memory_summary, p99_by_minute

CONTRACT = {"minutes", "requests", "errors", "stuck", "p99_ms_by_minute", "rss_mb"}


def test_the_mix_stays_under_its_caps() -> None:
    rng = random.Random(1)
    capped = [choose(rng, Mix(max_inflight=2, video=True), inflight=2, finished_images=5) for _ in range(500)]
    assert not set(capped) & SUBMITS  # at the cap, submissions become reads
    without_video = [
        choose(rng, Mix(max_inflight=9, video=False), inflight=0, finished_images=5) for _ in range(500)
    ]
    assert Op.VIDEO not in without_video and Op.CANCEL in without_video and Op.READ in without_video
    nothing_yet = {
        choose(rng, Mix(max_inflight=9, video=True), inflight=0, finished_images=0) for _ in range(500)
    }
    assert Op.READ not in nothing_yet and Op.POLL not in nothing_yet  # nothing to read yet


def test_errors_are_failures_and_unexpected_refusals() -> None:
    assert is_error(Op.IMAGE_CACHED, None) and is_error(Op.POLL, 503) and is_error(Op.IMAGE_UNCACHED, 422)
    assert not is_error(Op.IMAGE_CACHED, 202) and not is_error(Op.READ, 202)
    assert not is_error(Op.READ, 410) and not is_error(Op.CANCEL, 409) and is_error(Op.CANCEL, 404)


def test_p99_per_minute_and_memory_growth_after_the_warmup() -> None:
    samples = [(1.0, 10.0)] * 99 + [(2.0, 500.0), (61.0, 20.0), (170.0, 30.0)]
    assert p99_by_minute(samples, minutes=3) == [10.0, 20.0, 30.0]
    assert p99_by_minute([], minutes=2) == [None, None]
    memory = memory_summary([(0.0, 100.0), (200.0, 300.0), (300.0, 250.0), (900.0, 275.0)], warmup_s=300)
    assert memory is not None and memory.contract() == {"start": 100.0, "end": 275.0, "max": 300.0}
    assert (memory.after_warmup, memory.growth_after_warmup) == (250.0, 0.1)


def test_rss_is_read_for_a_process_and_its_children(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; b = bytearray(64 << 20); time.sleep(30)"])
    try:
        (tmp_path / "run").mkdir()
        (tmp_path / "run" / "worker-large.pid").write_text(f"{os.getpid()}\n")
        (tmp_path / "run" / "broken.pid").write_text("not a pid\n")
        assert stack_pids(tmp_path) == {"worker-large": os.getpid()}
        while (vm_rss_kib(child.pid) or 0) < 64 << 10:  # until the child holds its 64 MiB
            pass
        own = (vm_rss_kib(os.getpid()) or 0) / 1024
        total = tree_rss_mib(os.getpid(), children_by_parent())
        assert total is not None and total >= own + 64
    finally:
        child.kill()
        child.wait()
    assert vm_rss_kib(child.pid) is None and tree_rss_mib(child.pid, {}) is None


@pytest.mark.integration
def test_a_short_soak_reports_the_contract(tmp_path: Path) -> None:
    out, samples = tmp_path / "soak.json", tmp_path / "samples.json"
    argv = [
        sys.executable,
        "-m",
        "reprise",
        "bench",
        "soak",
        "--seconds",
        "75",
        "--rate",
        "3",
        "--sample-every-s",
        "5",
        "--drain-s",
        "180",
        "--workdir",
        str(tmp_path / "stack"),
        "--json",
        str(out),
        "--samples",
        str(samples),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(out.read_text())
    assert set(report) == CONTRACT
    assert report["minutes"] == 1.25 and report["stuck"] == 0
    assert report["requests"] > 75 and 0 <= report["errors"] < report["requests"] * 0.05
    assert len(report["p99_ms_by_minute"]) == 2 and all(p > 0 for p in report["p99_ms_by_minute"])
    # Every child of `reprise run` sampled, its figures in MiB and consistent.
    assert {"api", "beat", "worker-large"} <= set(report["rss_mb"])
    for name, row in report["rss_mb"].items():
        assert set(row) == {"start", "end", "max"}, name
        assert 5 < row["start"] <= row["max"] and row["end"] <= row["max"] < 16_000, (name, row)
    extra = json.loads(samples.read_text())
    assert set(extra["rss_mb_samples"]) == set(report["rss_mb"]) and extra["accepted"] > 10
