"""The chaos bench's webhook faults at a small size, on a stack of the bench's own: another tenant's
receiver trickles its answer, hangs, or answers 100 MB. What must hold is what holds at production
size: nothing lost or delivered twice, the bench tenant's events delivered within seconds of their
jobs' ends whatever the other endpoint does, and every one of the noisy tenant's events delivered once
its endpoint answers."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from bench.chaos.run import ChaosOptions
from bench.chaos.runner import run_chaos
from bench.chaos.scenarios import SCENARIOS
from bench.chaos.stack import isolated_stack
from bench.chaos.target import ChaosTarget

JOBS = 3
OPTIONS = ChaosOptions(jobs=JOBS, outages_s=(4.0,), bound_s=120.0)
WEBHOOK_FAULTS = ("webhook-slow", "webhook-hang", "webhook-huge")


def test_the_webhook_faults_are_scenarios_of_the_bench() -> None:
    assert set(WEBHOOK_FAULTS) <= set(SCENARIOS)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChaosTarget]:
    with isolated_stack(tmp_path_factory.mktemp("chaos-webhooks")) as target:
        yield target


@pytest.mark.integration
@pytest.mark.parametrize("name", WEBHOOK_FAULTS)
def test_a_misbehaving_endpoint_holds_up_no_other_tenant(stack: ChaosTarget, name: str) -> None:
    row = run_chaos(stack, [name], OPTIONS)["scenarios"][name]
    assert "error" not in row, json.dumps(row)
    assert row["lost"] == 0 and row["duplicated"] == 0, json.dumps(row)
    assert row["noisy_jobs"] == JOBS and row["noisy_misbehaved"] > 0, json.dumps(row)
    assert row["noisy_undelivered"] == 0 and row["noisy_duplicated"] == 0, json.dumps(row)
    # the other tenant's events: within 5 s of their jobs' ends (an attempt's deadline is 15 s)
    assert row["other_delivery_s"]["max"] is not None and row["other_delivery_s"]["max"] < 5.0, json.dumps(
        row
    )
