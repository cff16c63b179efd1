"""A progress bar on stderr, drawn by rich.progress (typer brings rich): redrawn in place on a terminal,
one line per quarter otherwise (so logs and CI output stay readable).

rich draws a bar in place on a terminal; on a file or a pipe it draws nothing until the end. The quarter
lines are ours: rich renders each of them, this module only decides when."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from typing import TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

LOG_WIDTH = 200  # a quarter line in a log is never folded (rich would fold at 80 columns off a terminal)


class ProgressBar:
    """`update(done, note=...)` as work advances; `close()` ends the line. Never raises on output."""

    def __init__(
        self, total: int, *, label: str, stream: TextIO | None = None, width: int = 30, every_s: float = 0.2
    ) -> None:
        self.total = max(total, 0)
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        terminal = bool(getattr(self.stream, "isatty", lambda: False)())
        self.console = Console(
            file=self.stream, force_terminal=terminal, width=None if terminal else LOG_WIDTH, highlight=False
        )
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(bar_width=width),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[note]}"),
            console=self.console,
            refresh_per_second=1 / every_s,
        )
        self._task = self._progress.add_task(label, total=self.total, note="")
        self._tty = terminal
        self._last_quarter = 0
        if self._tty:
            self._guarded(self._progress.start)

    def update(self, done: int, *, note: str = "") -> None:
        done = min(done, self.total)
        self._progress.update(self._task, completed=done, note=note)
        if self._tty:
            return  # rich redraws from its own thread, every_s apart
        quarter = 4 * done // self.total if self.total else 4
        if quarter > self._last_quarter:
            self._last_quarter = quarter
            self._guarded(self._print_line)

    def close(self) -> None:
        if self._tty:
            self._guarded(self._progress.stop)  # draws the last state and ends the line
        elif self._last_quarter < 4:
            self._guarded(self._print_line)

    def _print_line(self) -> None:
        self.console.print(self._progress.get_renderable())

    def _guarded(self, write: Callable[[], None]) -> None:
        with contextlib.suppress(OSError, ValueError):  # a closed or broken stream must not stop the run
            write()
