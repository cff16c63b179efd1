"""The client's event-stream parser (reprise_client.sse) on the lines the API writes."""

from __future__ import annotations

from reprise_client.sse import ServerEvent, parse_events

STREAM = [
    "retry: 2000",
    "",
    "event: generation",
    "id: 1",
    'data: {"status": "starting"}',
    "",
    ": keep-alive",
    "",
    "event: done",
    "id: 2",
    "data: line one",
    "data: line two",
    "",
]


def test_events_complete_at_their_blank_line_and_comments_are_skipped() -> None:
    events = [event for event in parse_events(STREAM) if event is not None]
    assert events == [
        ServerEvent("generation", '{"status": "starting"}', "1"),
        ServerEvent("done", "line one\nline two", "2"),
    ]


def test_every_line_yields_so_a_reader_can_check_its_deadline() -> None:
    assert len(list(parse_events(STREAM))) == len(STREAM)


def test_an_unnamed_event_is_a_message_and_an_unfinished_one_is_not_emitted() -> None:
    events = [event for event in parse_events(["data: x", "", "event: generation", "data: y"]) if event]
    assert events == [ServerEvent("message", "x")]
