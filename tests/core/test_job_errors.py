"""A failed run's error as the tenant reads it: a stable code and a sentence, never the exception's text
(hosts, paths, URLs with passwords); invalid input keeps its own message, which is about the request."""

from __future__ import annotations

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from sqlalchemy.exc import OperationalError

from core.errors import BlobNotFound, StepsError
from core.job_errors import RunErrorCode, public_run_error, run_error_code

SECRET_PARTS = ("10.0.3.7", "5432", "/data/blobs", "hunter2", "reprise-bucket")
DISK_FULL = OSError(28, "No space left on device", "/data/blobs/jobs/x/latent.pt")
REFUSED = Exception('connection to server at "10.0.3.7", port 5432 failed')
DATABASE_DOWN = OperationalError("SELECT 1", {}, REFUSED)


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (DISK_FULL, RunErrorCode.STORAGE_UNAVAILABLE),
        (DATABASE_DOWN, RunErrorCode.DATABASE_UNAVAILABLE),
        (RedisConnectionError("Error 111 connecting to 10.0.3.7:6379"), RunErrorCode.BROKER_UNAVAILABLE),
        (BlobNotFound("s3://reprise-bucket/data/blobs/entry.pt"), RunErrorCode.SOURCE_UNREADABLE),
        (RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), RunErrorCode.OUT_OF_MEMORY),
        (ValueError("postgresql://app:hunter2@10.0.3.7:5432/reprise refused"), RunErrorCode.INTERNAL),
    ],
)
def test_each_failure_has_a_code_and_no_detail_reaches_the_tenant(
    error: Exception, code: RunErrorCode
) -> None:
    assert run_error_code(error) is code
    shown = public_run_error(error)
    assert shown.startswith(f"{code.value}: ") and "logs" in shown
    assert not [part for part in SECRET_PARTS if part in shown], shown


def test_invalid_input_keeps_its_message() -> None:
    shown = public_run_error(StepsError("steps must be between 1 and 150"))
    assert shown == "invalid_input: steps must be between 1 and 150"
