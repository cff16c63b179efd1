"""A real S3 API for the blob store and image delivery tests: moto's standalone server in a subprocess."""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

_START_TIMEOUT_S = 30.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1):
            return True
    except urllib.error.HTTPError:  # any HTTP status means the server is up
        return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    """The endpoint URL of a moto S3 server started for this test session.

    Any access key works against it; buckets must be created (S3BlobStore.ensure_bucket).
    """
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    # Output goes to a file, not a pipe: a full pipe would block the server mid-session.
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + _START_TIMEOUT_S
            while not _answers(url):
                if process.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    output = log.read().decode(errors="replace")[-2000:]
                    pytest.fail(f"moto server did not start on {url} (exit code {process.poll()}):\n{output}")
                time.sleep(0.1)
            yield url
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
