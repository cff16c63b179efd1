"""Log lines: JSON or text, and the job's context on each (core.logs)."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from core import logs
from core.vocabulary import LogFormat


@pytest.fixture(autouse=True)
def _root_logger_restored() -> Iterator[None]:
    """configure_logging replaces the root logger's handlers: give pytest's back."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logs.clear()


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _configured(fmt: LogFormat, stream: io.StringIO) -> logging.Logger:
    logs.configure_logging(fmt, stream=stream)
    return logging.getLogger("reprise.test")


def test_a_json_line_carries_the_bound_context_and_the_extra_fields() -> None:
    stream = io.StringIO()
    log = _configured(LogFormat.JSON, stream)
    with logs.bound(job_id="j-1", tenant="t-1", queue="cache_miss"):
        log.info("ran %d steps", 50, extra={"model": "lab-large"})
    log.warning("outside")
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["message"] == "ran 50 steps" and first["level"] == "info"
    assert (first["job_id"], first["tenant"], first["queue"], first["model"]) == (
        "j-1",
        "t-1",
        "cache_miss",
        "lab-large",
    )
    assert "job_id" not in second  # the block ended: its context with it


def test_an_exception_is_kept_in_its_line() -> None:
    stream = io.StringIO()
    log = _configured(LogFormat.JSON, stream)
    try:
        raise ValueError("bad latent")
    except ValueError:
        log.exception("decode failed")
    line = json.loads(stream.getvalue())
    assert "ValueError: bad latent" in line["exception"]


def test_bind_and_clear_keep_fields_until_forgotten() -> None:
    logs.clear()
    logs.bind(job_id="j-2", role="large")
    logs.bind(role=None)
    assert dict(logs.context()) == {"job_id": "j-2"}
    logs.clear()
    assert dict(logs.context()) == {}


def test_text_shows_the_job_and_auto_picks_text_on_a_terminal_json_elsewhere() -> None:
    terminal = _Terminal()
    assert logs.configure_logging(LogFormat.AUTO, stream=terminal) is LogFormat.TEXT
    with logs.bound(job_id="j-3", queue="admit"):
        logging.getLogger("reprise.test").info("admitted")
    assert terminal.getvalue().rstrip().endswith("admitted [job_id=j-3 queue=admit]")
    assert logs.configure_logging(LogFormat.AUTO, stream=io.StringIO()) is LogFormat.JSON


def test_configuring_again_replaces_the_handler_rather_than_adding_one() -> None:
    stream = io.StringIO()
    _configured(LogFormat.JSON, io.StringIO())
    log = _configured(LogFormat.JSON, stream)
    log.info("once")
    assert len(stream.getvalue().splitlines()) == 1
