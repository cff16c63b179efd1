"""The prompt-redelivery policy (jobs.policies.webhook_recovery): which waiting deliveries an
endpoint's success sends now."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from db.webhooks import Waiting
from jobs.policies.webhook_recovery import (
    BATCH,
    endpoint_of,
    failing_key,
    mark_ttl_s,
    probe_of,
    to_send_now,
    url_prefix,
)

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def waiting(url: str, in_s: float) -> Waiting:
    return Waiting(uuid.uuid4(), "generation.completed", 2, NOW + timedelta(seconds=in_s), url)


def test_one_endpoint_is_scheme_host_and_port_whatever_the_path_or_spelling() -> None:
    assert endpoint_of("http://Hooks.Example.com/a?x=1") == "http://hooks.example.com:80"
    assert endpoint_of("http://hooks.example.com:80/b") == "http://hooks.example.com:80"
    assert endpoint_of("https://hooks.example.com/a") == "https://hooks.example.com:443"
    assert endpoint_of("http://hooks.example.com:8080/a") != endpoint_of("http://hooks.example.com/a")
    assert failing_key("http://127.0.0.1:9/x") == failing_key("http://127.0.0.1:9/y")
    assert url_prefix("http://user@h:9/a/b?c") == "http://user@h:9"


def test_the_mark_outlives_the_longest_wait_of_the_schedule() -> None:
    assert mark_ttl_s([0.0, 5.0, 300.0, 36000.0]) == 36001
    assert mark_ttl_s([0.0]) == 1


def test_only_the_endpoint_s_deliveries_not_due_soon_are_sent_earliest_first() -> None:
    here, other = "http://127.0.0.1:9/hooks", "http://127.0.0.1:10/hooks"
    late, later, soon, elsewhere = (
        waiting(here, 300),
        waiting(here, 1800),
        waiting(here, 1),
        waiting(other, 300),
    )
    chosen = to_send_now([later, soon, elsewhere, late], endpoint=endpoint_of(here), now=NOW)
    assert chosen == [late, later]  # `soon` is its own queued task's to send


def test_a_backlog_is_sent_in_batches() -> None:
    here = "http://127.0.0.1:9/hooks"
    backlog = [waiting(here, 300 + i) for i in range(BATCH + 7)]
    chosen = to_send_now(backlog, endpoint=endpoint_of(here), now=NOW)
    assert chosen == backlog[:BATCH]


def test_an_endpoint_is_probed_with_its_earliest_waiting_delivery() -> None:
    here = "http://127.0.0.1:9/hooks"
    later, earliest, soon = waiting(here, 1800), waiting(here, 300), waiting(here, 1)
    assert probe_of([later, soon, earliest], endpoint=endpoint_of(here), now=NOW) == earliest
    assert probe_of([soon], endpoint=endpoint_of(here), now=NOW) is None  # its own task is about to try
