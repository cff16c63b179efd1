"""What `make run` hands a newcomer works: the demo key it prints is kept and reused, and the curl line
and the client snippet it prints, run as printed, get a finished job and its PNG from the live stack."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest

from db.engine import session_scope
from db.keys import revoke_key
from db.tenants import find_key
from reprise.welcome import ensure_demo_key, welcome
from tests.e2e.conftest import Stack

pytestmark = pytest.mark.integration

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def printed_curl(text: str) -> str:
    (line,) = [line.strip() for line in text.splitlines() if line.strip().startswith("curl ")]
    return line


def printed_snippet(text: str) -> str:
    _, _, after = text.partition("The same with the Python client:\n")
    return textwrap.dedent(after)


def test_the_demo_key_is_created_once_kept_private_and_replaced_when_it_stops_working(
    stack: Stack, tmp_path: Path
) -> None:
    settings = stack.settings.model_copy(update={"data_dir": tmp_path})
    first = ensure_demo_key(settings)
    again = ensure_demo_key(settings)
    assert first.created and not again.created and again.api_key == first.api_key
    assert stat.S_IMODE(first.path.stat().st_mode) == 0o600
    assert first.path.read_text().strip() == first.api_key

    with session_scope(settings) as session:
        row = find_key(session=session, key=first.api_key)
        assert row is not None
        revoke_key(session, row.id)
    replaced = ensure_demo_key(settings)
    assert replaced.created and replaced.api_key != first.api_key
    assert first.path.read_text().strip() == replaced.api_key


def test_the_printed_curl_line_and_client_snippet_work_against_the_stack(
    stack: Stack, tmp_path: Path
) -> None:
    settings = stack.settings.model_copy(update={"data_dir": tmp_path})
    key = ensure_demo_key(settings)
    text = welcome(stack.base_url, key)
    assert key.api_key in text and str(key.path) in text

    answer = subprocess.run(
        ["bash", "-c", printed_curl(text)], capture_output=True, text=True, timeout=90, check=True
    )
    job = json.loads(answer.stdout)
    assert job["status"] == "succeeded", job
    auth = {"Authorization": f"Bearer {key.api_key}"}
    image = httpx.get(job["output"]["image"], headers=auth, timeout=60)
    if image.status_code == 202:  # a decode still under way: its Location joins it
        image = httpx.get(image.headers["Location"], headers=auth, timeout=60)
    assert image.status_code == 200 and image.content.startswith(PNG_MAGIC)

    run = subprocess.run(
        [sys.executable, "-c", printed_snippet(text)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=150,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("succeeded")
    assert (tmp_path / "image.png").read_bytes().startswith(PNG_MAGIC)
