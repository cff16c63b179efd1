"""`reprise ping-worker` (the workers' startup and readiness probe) asks only this host's worker, and
returns at its answer: the broadcast carries the destination or a pattern that kombu's mailbox matches
on each node (kombu.pidbox.Node.handle_message), so the test answers the way the nodes would."""

from __future__ import annotations

from typing import Any

from kombu.matcher import match

from reprise.commands.stack import ping_workers

NODES = ("large-1@reprise-large-6d9f7c8b5-x2x9k", "small-1@reprise-small-5b8c9d7f6-m3n8p", "io-1@other")


class Mailbox:
    """Control.ping as kombu delivers it: each live node answers when the destination names it, or the
    pattern matches it, or the message names neither (everyone)."""

    def __init__(self, nodes: tuple[str, ...]) -> None:
        self.nodes = nodes
        self.calls: list[dict[str, Any]] = []

    def ping(self, destination: list[str] | None = None, **kwargs: Any) -> list[dict[str, Any]]:
        self.calls.append({"destination": destination, **kwargs})
        pattern, matcher = kwargs.get("pattern"), kwargs.get("matcher")
        answering = [
            node
            for node in self.nodes
            if (node in destination if destination else _matches(node, pattern, matcher) if pattern else True)
        ]
        return [{node: {"ok": "pong"}} for node in answering]


def _matches(node: str, pattern: str, matcher: str | None) -> bool:
    return bool(match(node, pattern, matcher))  # type: ignore[arg-type]  # kombu's stub says bytes; str works


def test_only_this_hosts_worker_is_asked_and_its_answer_ends_the_wait() -> None:
    mailbox = Mailbox(NODES)
    ok, names = ping_workers(mailbox, name=None, host="reprise-large-6d9f7c8b5-x2x9k", timeout_s=10)
    assert ok and names == ["large-1@reprise-large-6d9f7c8b5-x2x9k"]
    (call,) = mailbox.calls
    assert call["limit"] == 1 and call["destination"] is None  # one answer is enough: no 10 s wait


def test_a_host_whose_worker_is_gone_gets_no_answer_from_the_others() -> None:
    ok, names = ping_workers(Mailbox(NODES), name=None, host="reprise-large-6d9f7c8b5-d3ad0", timeout_s=1)
    assert not ok and names == []
    prefix, _ = ping_workers(Mailbox(NODES), name=None, host="reprise-large-6d9f7c8b5", timeout_s=1)
    assert not prefix  # a host is matched whole: another pod's name is not this one's


def test_a_named_worker_is_asked_by_destination() -> None:
    mailbox = Mailbox(NODES)
    assert ping_workers(mailbox, name="io-1@other", host="ignored", timeout_s=1) == (True, ["io-1@other"])
    assert mailbox.calls[0]["destination"] == ["io-1@other"]
    assert ping_workers(Mailbox(NODES), name="nobody@nowhere", host="x", timeout_s=1) == (False, [])
