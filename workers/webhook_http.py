"""One webhook request within a wall-clock budget and a response-size cap.

httpx's timeouts bound each step (connect, each read), not the whole request: a receiver that trickles
its answer a byte at a time stays within every read timeout for as long as it likes. Here a watchdog
timer shuts the connection's socket down when the attempt's deadline passes, whatever the request is
doing then (connecting over TLS, sending, waiting for the status line, reading the body), and the body
is read up to a byte cap and no further: the status line alone decides a delivery (Svix and Stripe
read no more than the status either).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

import httpx

from jobs.webhooks import WebhookTarget


@dataclass(frozen=True, slots=True)
class AttemptLimits:
    deadline_s: float  # connect + send + the whole answer
    max_response_bytes: int  # read at most this much of the answer's body
    step_timeout_s: float  # each connect, write and read


class _Watchdog:
    """Shuts the request's socket down once the deadline passes (a blocked read then fails at once)."""

    def __init__(self, deadline_s: float) -> None:
        self.deadline = time.monotonic() + deadline_s
        self.fired = False
        self._socket: socket.socket | None = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(deadline_s, self._cut)
        self._timer.daemon = True
        self._timer.start()

    def trace(self, name: str, info: Mapping[str, Any]) -> None:
        """httpcore's trace hook: keep the socket of each new connection."""
        if name != "connection.connect_tcp.complete":
            return
        stream = info.get("return_value")
        sock = stream.get_extra_info("socket") if stream is not None else None
        with self._lock:
            self._socket = sock if isinstance(sock, socket.socket) else None
            if self.fired:
                self._shut()

    def left_s(self) -> float:
        return self.deadline - time.monotonic()

    def _cut(self) -> None:
        with self._lock:
            self.fired = True
            self._shut()

    def _shut(self) -> None:
        if self._socket is not None:
            with suppress(OSError):  # already closed: the request ended meanwhile
                self._socket.shutdown(socket.SHUT_RDWR)

    def cancel(self) -> None:
        self._timer.cancel()


def post_within(
    client: httpx.Client,
    target: WebhookTarget,
    headers: dict[str, str],
    body: bytes,
    limits: AttemptLimits,
) -> int:
    """POST to the checked addresses themselves (a second DNS answer cannot redirect us to an internal
    host: rebinding; TLS still verifies the certificate against the URL's host name), read at most
    `limits.max_response_bytes` of the answer, and return its status code. Raises httpx.HTTPError,
    httpx.ReadTimeout (a timeout, as the breaker counts them) when the deadline cut the request."""
    url = httpx.URL(target.url)
    pinned_headers = {**headers, "host": url.netloc.decode("ascii")}
    watchdog = _Watchdog(limits.deadline_s)
    extensions: dict[str, Any] = {"trace": watchdog.trace}
    if url.scheme == "https":
        extensions["sni_hostname"] = target.host
    try:
        last_error: httpx.ConnectError | None = None
        for address in target.addresses:
            try:
                return _exchange(
                    client, url.copy_with(host=address), (pinned_headers, body, extensions), limits, watchdog
                )
            except httpx.ConnectError as error:  # try the host's next address while time is left
                last_error = error
                if watchdog.left_s() <= 0:
                    break
        assert last_error is not None
        raise last_error
    except httpx.HTTPError:
        if watchdog.fired:  # the cut socket's own error, told as the deadline it is
            raise httpx.ReadTimeout(_too_slow(limits)) from None
        raise
    finally:
        watchdog.cancel()


def _exchange(
    client: httpx.Client,
    url: httpx.URL,
    request: tuple[dict[str, str], bytes, dict[str, Any]],
    limits: AttemptLimits,
    watchdog: _Watchdog,
) -> int:
    headers, body, extensions = request
    with client.stream("POST", url, content=body, headers=headers, extensions=extensions) as response:
        read = 0
        for chunk in response.iter_raw():
            read += len(chunk)
            if read >= limits.max_response_bytes or watchdog.left_s() <= 0:
                break  # closing the stream drops the connection: the rest is never read
        if watchdog.fired or watchdog.left_s() <= 0:
            raise httpx.ReadTimeout(_too_slow(limits))
        return response.status_code


def _too_slow(limits: AttemptLimits) -> str:
    return f"no complete answer within the attempt's deadline of {limits.deadline_s:g} s"
