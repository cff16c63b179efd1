"""What a tenant reads of a run that raised: a code and a sentence, never the exception's own text.

An exception's message names what the tenant must not see and cannot act on: hosts and ports
(`connection to server at "10.0.3.7", port 5432 failed`), paths (`/data/blobs/...`), bucket names,
library internals. The job's `error` carries `<code>: <message>`; the exception itself, traceback and
all, goes to the worker's log with the job's id (the task's log line, workers/tasks.py), where the
operator reads it. Codes are stable: a client may branch on the text before the first colon. Pure.
"""

from __future__ import annotations

import enum

from redis.exceptions import RedisError
from sqlalchemy.exc import SQLAlchemyError

from core.errors import BlobNotFound, BlobStoreMisconfigured, CodecError, InvalidInput


class RunErrorCode(enum.StrEnum):
    INVALID_INPUT = "invalid_input"  # the request cannot be run as given: its message is the tenant's own
    SOURCE_UNREADABLE = "source_unreadable"  # a stored latent or image the run needed could not be read
    STORAGE_UNAVAILABLE = "storage_unavailable"  # the blob store or the disk refused a read or a write
    DATABASE_UNAVAILABLE = "database_unavailable"
    BROKER_UNAVAILABLE = "broker_unavailable"
    OUT_OF_MEMORY = "out_of_memory"  # the model's device or the host ran out of memory
    INTERNAL = "internal_error"


MESSAGES: dict[RunErrorCode, str] = {
    RunErrorCode.SOURCE_UNREADABLE: "data the generation needed could not be read",
    RunErrorCode.STORAGE_UNAVAILABLE: "the output store could not be read or written",
    RunErrorCode.DATABASE_UNAVAILABLE: "the service's database was unavailable",
    RunErrorCode.BROKER_UNAVAILABLE: "the service's queue was unavailable",
    RunErrorCode.OUT_OF_MEMORY: "the worker ran out of memory",
    RunErrorCode.INTERNAL: "the generation failed in the worker",
}


def run_error_code(error: BaseException) -> RunErrorCode:
    """The code of an exception a run raised, by its kind."""
    if isinstance(error, InvalidInput):
        return RunErrorCode.INVALID_INPUT
    if isinstance(error, BlobNotFound | CodecError):
        return RunErrorCode.SOURCE_UNREADABLE
    if isinstance(error, BlobStoreMisconfigured | OSError):
        return RunErrorCode.STORAGE_UNAVAILABLE
    if isinstance(error, SQLAlchemyError):
        return RunErrorCode.DATABASE_UNAVAILABLE
    if isinstance(error, RedisError):
        return RunErrorCode.BROKER_UNAVAILABLE
    if isinstance(error, MemoryError) or "out of memory" in str(error).lower():  # torch's OOM errors
        return RunErrorCode.OUT_OF_MEMORY
    return RunErrorCode.INTERNAL


def public_run_error(error: BaseException) -> str:
    """`<code>: <message>` for the job's `error`. Invalid input keeps its own message, which describes
    the tenant's request (core.errors.InvalidInput); every other message is the code's sentence."""
    code = run_error_code(error)
    if code is RunErrorCode.INVALID_INPUT:
        return f"{code.value}: {error}"
    return f"{code.value}: {MESSAGES[code]}; the operator's logs hold the details"
