"""`reprise bench chaos`: the short version. It starts a stack of its own (own Postgres and Redis on free
ports), kills a GPU pool and Redis, takes the webhook receiver down, storms cancels and loads the intake:
nothing accepted is lost, no effect happens twice, and the JSON has the contract's fields."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bench.chaos.accounting import JobEnd, ScenarioReport, tally
from bench.chaos.receiver import start_receiver
from bench.chaos.run import ChaosOptions, new_run
from bench.chaos.runner import run_chaos
from bench.chaos.scenarios import deliveries_after
from bench.chaos.target import ChaosTarget
from core.settings import load_settings

SHORT = "kill-large,redis,webhook-outage,cancel-storm,load"
FIELDS = {"accepted", "succeeded", "failed", "lost", "duplicated", "recovery_s", "unavailable_s", "five_xx"}


def test_tally_counts_lost_failed_and_recovery_after_the_fault() -> None:
    fault_end = datetime(2030, 1, 1, tzinfo=UTC)
    ends = {
        "a": JobEnd("succeeded", None, fault_end + timedelta(seconds=3)),
        "b": JobEnd("failed", "gave up after 3 attempts", fault_end + timedelta(seconds=5)),
        "c": JobEnd("processing", None, None, "miss", 2),  # never ended: lost
        "d": JobEnd("succeeded", None, fault_end - timedelta(seconds=1)),  # ended before: no recovery
    }
    report = ScenarioReport()
    running = frozenset({"b", "c"})  # processing when the fault ended; "a" was still queued
    tally(report, ends, ["a", "b", "c", "d", "e"], fault_end=fault_end.timestamp(), running=running)
    row = report.as_json()
    assert (row["accepted"], row["succeeded"], row["failed"], row["lost"]) == (5, 2, 1, 2)
    assert row["failed_reasons"] == {"gave up after 3 attempts": 1}
    assert row["recovery_s"] == {"p50": 4.0, "max": 5.0}
    assert row["running_recovery_s"] == {"p50": 5.0, "max": 5.0, "jobs": 2}
    assert row["lost_detail"] == {"processing route=miss attempts=2 error=-": 1, "no row": 1}


def test_the_receiver_counts_deliveries_per_event_and_refuses_during_an_outage() -> None:
    receiver = start_receiver()
    try:
        body = b'{"data": {"id": "job-1"}}'
        receiver.outage = True
        assert receiver.record({"webhook-id": "msg_1_completed"}, body) == 503
        receiver.outage = False
        assert receiver.record({"webhook-id": "msg_1_completed"}, body) == 200
        assert receiver.duplicated() == 0
        receiver.record({"webhook-id": "msg_1_completed"}, body)
        assert receiver.duplicated() == 1 and receiver.job_of["msg_1_completed"] == "job-1"
    finally:
        receiver.stop()


def test_an_unknown_scenario_is_refused_with_the_choices(tmp_path: Path) -> None:
    target = ChaosTarget("http://127.0.0.1:9", load_settings(data_dir=tmp_path), env={})
    with pytest.raises(ValueError, match="kill-large"):
        run_chaos(target, ["kill-everything"], ChaosOptions())


@pytest.mark.integration
def test_the_short_chaos_run_loses_nothing_and_does_nothing_twice(tmp_path: Path) -> None:
    out = tmp_path / "chaos.json"
    argv = [
        sys.executable,
        "-m",
        "reprise",
        "bench",
        "chaos",
        "--scenarios",
        SHORT,
        "--jobs",
        "4",
        "--load-jobs",
        "60",
        "--outage-s",
        "4",
        "--bound-s",
        "120",
        "--workdir",
        str(tmp_path / "stack"),
        "--json",
        str(out),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(out.read_text())
    assert list(report["scenarios"]) == SHORT.split(",")
    for name, row in report["scenarios"].items():
        assert set(row) >= FIELDS, name
        assert row["lost"] == 0 and row["duplicated"] == 0, (name, row)
        assert row["accepted"] > 0 and row["succeeded"] + row["failed"] + row["canceled"] == row["accepted"]
        assert set(row["recovery_s"]) == {"p50", "max"}
    assert report["scenarios"]["kill-large"]["succeeded"] == 4  # a killed run is run again, to the end
    assert report["scenarios"]["cancel-storm"]["canceled"] > 0
    intake = report["intake"]
    assert intake["submit_rps"] > 0 and set(intake["submit_ms"]) == {"p50", "p99"}


def test_a_webhook_outage_s_held_up_events_are_the_ones_refused_during_it() -> None:

    receiver = start_receiver()
    try:
        run = new_run(
            ChaosTarget("http://127.0.0.1:9", load_settings(), env={}), receiver, {}, ChaosOptions()
        )
        body = b'{"data": {"id": "job-1"}}'
        receiver.outage = True
        receiver.record({"webhook-id": "msg_held_completed"}, body)  # refused: the outage held it up
        receiver.outage = False
        since = time.time()
        receiver.record({"webhook-id": "msg_held_completed"}, body)
        receiver.record({"webhook-id": "msg_later_completed"}, body)  # sent after the outage: never held
        assert len(deliveries_after(run, ["job-1"], since)) == 2
        held = deliveries_after(run, ["job-1"], since, refused=True)
        assert len(held) == 1 and 0 <= held[0] < 5
    finally:
        receiver.stop()
