"""The benchmarks' progress bar (rich.progress): a line per quarter in a log, redrawn in place on a
terminal, and silent rather than failing on a closed stream."""

from __future__ import annotations

import io

from bench.run.progress import ProgressBar


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_log_gets_one_line_per_quarter_with_the_count_and_the_note() -> None:
    log = io.StringIO()
    bar = ProgressBar(10, label="replay modm", stream=log)
    for done in range(1, 11):
        bar.update(done, note=f"hits {done}")
    bar.close()
    lines = log.getvalue().splitlines()
    assert len(lines) == 4
    for line, done in zip(lines, (3, 5, 8, 10), strict=True):
        assert line.startswith("replay modm ") and f" {done}/10 " in line
    assert lines[-1].rstrip().endswith("hits 10") and "\x1b" not in log.getvalue()


def test_close_writes_the_last_state_when_no_quarter_did() -> None:
    log = io.StringIO()
    bar = ProgressBar(7, label="partial", stream=log)
    bar.update(1)
    bar.close()
    assert log.getvalue().count("\n") == 1 and " 1/7 " in log.getvalue()


def test_a_terminal_is_redrawn_in_place_and_ends_with_a_newline() -> None:
    screen = Terminal()
    bar = ProgressBar(4, label="sims", stream=screen)
    for done in range(1, 5):
        bar.update(done)
    bar.close()
    drawn = screen.getvalue()
    assert "\r" in drawn and "4/4" in drawn and drawn.removesuffix("\x1b[?25h").endswith("\n")


def test_a_closed_stream_does_not_stop_the_run() -> None:
    log = io.StringIO()
    bar = ProgressBar(2, label="gone", stream=log)
    log.close()
    bar.update(2)
    bar.close()
