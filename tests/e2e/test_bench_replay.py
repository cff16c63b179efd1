"""`reprise bench replay` against the live test stack, on a tiny slice with exact repeats, then (--vanilla)
the same requests with the cache off."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from bench.run.report import REPORT_FIELDS
from tests.e2e.conftest import Stack, make_tenant

pytestmark = pytest.mark.integration


def test_replay_reports_the_contract_fields_and_hits_on_repeats(stack: Stack, tmp_path: Path) -> None:
    prompts = [
        "a small red circle on the left on a plain white background",
        "a big blue square above a tiny green wedge on a striped gray backdrop",
    ] * 3
    trace = tmp_path / "trace.txt"
    trace.write_text("\n".join(prompts) + "\n", encoding="utf-8")
    tenant = make_tenant(stack.settings, f"replay-{uuid.uuid4().hex[:8]}", admin=True)  # reads global stats
    out = tmp_path / "replay.json"
    options = f"--base-url {stack.base_url} --api-key {tenant.api_key} --trace {trace} --concurrency 1"
    options += f" --json {out} --vanilla"
    done = subprocess.run(
        [sys.executable, "-m", "reprise", "bench", "replay", *options.split()],
        env=stack.env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(out.read_text())
    assert set(REPORT_FIELDS) <= set(report)
    assert report["requests"] == 6
    # One client in trace order: the first two prompts miss, their four repeats hit.
    assert report["hit_rate"] == pytest.approx(4 / 6, abs=1e-3)  # the JSON rounds to 4 places
    assert sum(report["k_histogram"].values()) == 4
    assert 0 < report["compute_saved"] < 1
    assert report["admission_ms"]["p50"] is not None
    assert report["embedder"]["name"] == "minilm"
    # what a step took on the stack under the replay's own load, per model its jobs ran
    assert report["stack_step_ms"] and all(row["step_ms"] > 0 for row in report["stack_step_ms"].values())
    # Where the jobs' time went, per route, and what the model's calls took of it (bench.live.stages).
    assert {"claim", "encode_prompt", "denoise", "complete"} <= set(report["stages"]["hit"])
    assert report["stages"]["miss"]["denoise"]["jobs"] == 2 and report["device_s_per_request"] > 0
    assert "cpu_ms_per_request" in report and report["comparison"]["warmup_requests"] == 16
    # The lab's models ran: every image was judged (a hit's read back and judged by the benchmark, whose
    # latent alone the stack stored); each hit was audited, generated again on the stack with the cache
    # off, to measure its drop (a miss is its own fresh generation).
    quality = report["quality"]
    assert (quality["judged"], quality["compared"], quality["audited"]) == (6, 6, 4)
    assert 0 <= quality["hit_mean"] <= 1 and 0 <= quality["miss_mean"] <= 1
    assert quality["drop_mean"] == pytest.approx(quality["hit_drop_mean"] * 4 / 6, abs=1e-3)
    low, high = quality["drop_ci95"]
    assert low <= quality["drop_mean"] <= high
    assert sum(row["n"] for row in quality["by_bin"]) == 4
    assert {row["k"] for row in quality["by_bin"]} == {int(k) for k in report["k_histogram"]}
    assert "4 of 4 requests served with less than the full model" in quality["source"]
    assert quality["by_stratum"]["hit"]["n"] == 4 and quality["by_stratum"]["full"]["n"] == 2
    # what the stack ran, from /v1/stats, for `simulate --compare` (bench.live.stack)
    record = report["stack"]
    assert record["profile"]["name"] == "configured"
    assert set(record["monitor"]) == {"enabled", "mode", "period_s", "cohost"}
    start = record["timeline"][0]
    assert start["submitted"] == 0 and start["large"] + start["small"] >= 1
    _measured_vanilla(done.stderr, report)


def _measured_vanilla(stderr: str, report: dict[str, Any]) -> None:
    """--vanilla: the same six requests again with the cache off, on the same stack, measured."""
    assert "vanilla: the same requests with the cache off" in stderr
    assert report["vanilla_measured_rps"] > 0
    ratio = report["throughput_rps"] / report["vanilla_measured_rps"]
    assert report["vs_vanilla_measured"] == pytest.approx(ratio, rel=1e-3)
    assert set(report["vanilla_stages"]) == {"miss"} and report["vanilla_device_s_per_request"] > 0
