"""A small progress bar on stderr: redrawn in place on a terminal, one line per quarter otherwise
(so logs and CI output stay readable)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class ProgressBar:
    """`update(done, note=...)` as work advances; `close()` ends the line. Never raises on output."""

    def __init__(
        self, total: int, *, label: str, stream: TextIO | None = None, width: int = 30, every_s: float = 0.2
    ) -> None:
        self.total = max(total, 0)
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self.every_s = every_s
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._started = time.monotonic()
        self._last_draw = 0.0
        self._last_quarter = 0
        self._done = 0
        self._note = ""

    def update(self, done: int, *, note: str = "") -> None:
        self._done, self._note = min(done, self.total), note
        now = time.monotonic()
        if self._tty:
            if now - self._last_draw >= self.every_s or self._done >= self.total:
                self._last_draw = now
                self._write("\r" + self.line() + "\x1b[K")
        else:
            quarter = 4 * self._done // self.total if self.total else 4
            if quarter > self._last_quarter:
                self._last_quarter = quarter
                self._write(self.line() + "\n")

    def line(self) -> str:
        fraction = self._done / self.total if self.total else 1.0
        filled = round(fraction * self.width)
        elapsed = time.monotonic() - self._started
        eta = elapsed / fraction - elapsed if 0 < fraction < 1 else 0.0
        bar = "#" * filled + "-" * (self.width - filled)
        note = f"  {self._note}" if self._note else ""
        return f"{self.label} [{bar}] {self._done}/{self.total} {elapsed:.0f}s eta {eta:.0f}s{note}"

    def close(self) -> None:
        if self._tty:
            self._write("\r" + self.line() + "\x1b[K\n")
        elif self._last_quarter < 4:
            self._write(self.line() + "\n")

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            pass  # a closed or broken stream must not stop the benchmark
