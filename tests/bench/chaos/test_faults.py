"""The chaos bench's bigger faults at a small size, on stacks of the bench's own: Redis back empty, a lossy
network between the workers and their services, the workers' disk full, a whole node lost. A few jobs
and a short outage each; what must hold is what holds at production size: nothing accepted lost, no
effect twice, no worker exiting of a network fault, no corrupt entry, the lost node's jobs finished."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.chaos.proxy import NetworkFault
from bench.chaos.run import ChaosOptions
from bench.chaos.runner import run_chaos
from bench.chaos.stack import isolated_stack
from bench.chaos.target import ChaosTarget

pytestmark = pytest.mark.integration

JOBS = 4
# Short faults, cut harder than the bench's default so that a few seconds see every kind of cut.
OPTIONS = ChaosOptions(
    jobs=JOBS,
    outages_s=(4.0,),
    bound_s=120.0,
    network=NetworkFault(latency_s=0.2, jitter_s=0.1, drop_per_s=0.1, reset_per_s=0.1, reset_on_connect=0.3),
)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChaosTarget]:
    """The bench's own stack with its workers behind the fault proxy (local blobs)."""
    with isolated_stack(tmp_path_factory.mktemp("chaos-faults"), proxy=True) as target:
        yield target


def _row(target: ChaosTarget, name: str) -> dict[str, Any]:
    report = run_chaos(target, [name], OPTIONS)
    row: dict[str, Any] = report["scenarios"][name]
    assert "error" not in row, json.dumps(row)
    assert row["lost"] == 0 and row["duplicated"] == 0, f"{json.dumps(row)}\n{_log_tails(target)}"
    assert (row["jobs"], row["settings"]) == (JOBS, "bench"), json.dumps(row)
    return row


def _log_tails(target: ChaosTarget, lines: int = 12) -> str:
    """The end of each worker's log: where a lost job stopped."""
    logs = sorted((target.settings.data_dir / "logs").glob("worker-*.log"))
    return "\n".join(
        f"== {log.name}\n"
        + "\n".join(line[:300] for line in log.read_text(errors="replace").splitlines()[-lines:])
        for log in logs
    )


def test_redis_back_empty_loses_no_job(stack: ChaosTarget) -> None:
    row = _row(stack, "redis-empty")
    assert any(name.startswith("appendonly") for name in row["deleted"]), row  # its data was gone
    assert row["succeeded"] == JOBS and row["outage_s"] == 4.0, row
    assert row["worker_restarts"] == [], row


def test_a_lossy_network_loses_nothing_and_no_worker_exits(stack: ChaosTarget) -> None:
    row = _row(stack, "network")
    cut = ("drops", "resets", "refused")
    cuts = {kind: n for kind, n in row["proxy"].items() if kind.split(":")[1] in cut}
    assert cuts, row  # the fault did cut connections
    assert row["succeeded"] == JOBS and row["worker_restarts"] == [], row


def test_a_full_disk_corrupts_nothing_and_old_images_stay_readable(stack: ChaosTarget) -> None:
    row = _row(stack, "disk-full")
    assert row["limited_processes"] >= 5, row  # every worker's processes
    assert row["corrupt"] == {} and row["temp_files_left"] == 0, row
    reads = row["reads_during_fault"]
    assert reads.get("ok", 0) > 0 and set(reads) <= {"ok", "pending"}, row
    failed = sum(row["failed_reasons"].values())
    assert row["succeeded"] + failed == row["accepted"], row
    assert not any("died or timed out" in reason for reason in row["failed_reasons"]), row  # the disk's


def test_a_lost_node_s_jobs_finish_on_the_other(tmp_path: Path) -> None:
    with isolated_stack(tmp_path / "s3", s3=True) as target:
        row = _row(target, "node-loss")
    assert row["held_at_kill"] >= 1 and row["succeeded"] == JOBS, row
    assert row["reads_after"] == {"ok": JOBS}, row
