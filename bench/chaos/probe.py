"""A client's view while a fault lasts: an authenticated request every period; unavailable seconds add
up the time between a request and the previous one whenever it failed (connection error, timeout or
non-2xx), and every 5xx answer is counted."""

from __future__ import annotations

import threading
import time

import httpx

PROBE_PERIOD_S = 0.25


class Probe:
    def __init__(self, base_url: str, headers: dict[str, str], period_s: float = PROBE_PERIOD_S) -> None:
        self.base_url = base_url
        self.headers = headers
        self.period_s = period_s
        self.unavailable_s = 0.0
        self.five_xx = 0
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-probe", daemon=True)

    def __enter__(self) -> Probe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._halt.set()
        self._thread.join()

    def _run(self) -> None:
        with httpx.Client(base_url=self.base_url, headers=self.headers, timeout=self.period_s * 8) as client:
            last = time.monotonic()
            while not self._halt.wait(self.period_s):
                try:
                    status: int | None = client.get("/v1/generations", params={"limit": 1}).status_code
                except httpx.HTTPError:
                    status = None
                now = time.monotonic()
                if status is None or status >= 300:
                    self.unavailable_s += now - last
                if status is not None and status >= 500:
                    self.five_xx += 1
                last = now
