"""Server-sent events (the WHATWG event-stream format) as the API sends them on
GET /v1/generations/{id}/events: `generation` at each change of the job, `done` at its end."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class ServerEvent:
    event: str
    data: str
    id: str | None = None


class EventParser:
    """Feeds lines, returns each event as its blank line completes it; comments (keep-alives) are None."""

    def __init__(self) -> None:
        self._event = "message"
        self._data: list[str] = []
        self._id: str | None = None

    def feed(self, line: str) -> ServerEvent | None:
        line = line.rstrip("\r\n")
        if not line:
            if not self._data:
                self._event = "message"
                return None
            done = ServerEvent(self._event, "\n".join(self._data), self._id)
            self._event, self._data = "message", []
            return done
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id":
            self._id = value
        return None  # retry and unknown fields: nothing to do for a client that reconnects itself


def parse_events(lines: Iterable[str]) -> Iterator[ServerEvent | None]:
    """Each completed event, and None for every other line (so a caller can check a deadline)."""
    parser = EventParser()
    for line in lines:
        yield parser.feed(line)


async def aparse_events(lines: AsyncIterator[str]) -> AsyncIterator[ServerEvent | None]:
    parser = EventParser()
    async for line in lines:
        yield parser.feed(line)
