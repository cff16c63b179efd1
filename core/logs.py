"""Logging for every process: JSON lines or text (REPRISE_LOG_FORMAT), and the job's context on each line.

A job's life crosses processes (the API, an admission worker, a GPU worker, the webhook worker); each
binds what it knows (`bind(job_id=..., tenant=...)`, the Celery task's role, queue and task id through
workers.bootstrap's signals) and every line logged meanwhile carries it, so that
`jq 'select(.job_id == "...")'` over all the logs tells the job's story.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Final, TextIO

from core.vocabulary import LogFormat

CONTEXT_FIELDS: Final = ("job_id", "tenant", "role", "queue", "task", "task_id")
_CONTEXT: ContextVar[Mapping[str, str]] = ContextVar("reprise_log_context", default={})  # noqa: B039
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


def bind(**fields: object) -> None:
    """Add fields to this context's lines (None removes one)."""
    current = dict(_CONTEXT.get())
    for name, value in fields.items():
        if value is None:
            current.pop(name, None)
        else:
            current[name] = str(value)
    _CONTEXT.set(current)


def clear(*names: str) -> None:
    """Forget `names` (every field when none is named)."""
    if not names:
        _CONTEXT.set({})
        return
    bind(**dict.fromkeys(names))


@contextmanager
def bound(**fields: object) -> Iterator[None]:
    """The fields on every line logged inside the block, then what was there before."""
    token = _CONTEXT.set({**_CONTEXT.get(), **{k: str(v) for k, v in fields.items() if v is not None}})
    try:
        yield
    finally:
        _CONTEXT.reset(token)


def context() -> Mapping[str, str]:
    return _CONTEXT.get()


class ContextFilter(logging.Filter):
    """Puts the bound context on each record (`record.context`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.context = dict(_CONTEXT.get())
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the bound context, extra fields, and
    the exception's traceback when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "process": record.processName if record.processName != "MainProcess" else record.process,
        }
        line.update(getattr(record, "context", None) or _CONTEXT.get())
        for name, value in record.__dict__.items():  # logger.info(..., extra={...})
            if name not in _STANDARD and name != "context" and not name.startswith("_"):
                line.setdefault(name, value)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """Human lines; the job's id and the task's queue in brackets when bound."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        bound_fields = {**(getattr(record, "context", None) or _CONTEXT.get())}
        bound_fields.update({key: record.__dict__[key] for key in CONTEXT_FIELDS if key in record.__dict__})
        shown = " ".join(
            f"{name}={bound_fields[name]}" for name in ("job_id", "queue") if name in bound_fields
        )
        return f"{text} [{shown}]" if shown else text


def resolve_format(wanted: LogFormat, stream: TextIO) -> LogFormat:
    """auto: text on a terminal, json elsewhere (a container's log, a file)."""
    if wanted is not LogFormat.AUTO:
        return wanted
    return LogFormat.TEXT if stream.isatty() else LogFormat.JSON


def configure_logging(
    wanted: LogFormat, *, level: int = logging.INFO, stream: TextIO | None = None
) -> LogFormat:
    """Send every logger's records to `stream` (stderr) in the resolved format; returns it. Replaces the
    root logger's handlers, so it can run again (a forked child, uvicorn's workers)."""
    target = stream if stream is not None else sys.stderr
    chosen = resolve_format(wanted, target)
    handler = logging.StreamHandler(target)
    handler.setFormatter(JsonFormatter() if chosen is LogFormat.JSON else TextFormatter())
    handler.addFilter(ContextFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    for name in ("uvicorn", "uvicorn.error", "celery", "celery.app.trace"):
        logging.getLogger(name).handlers.clear()  # theirs would print each line twice
        logging.getLogger(name).propagate = True
    return chosen
