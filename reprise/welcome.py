"""What `make run` hands a newcomer: the demo tenant's API key, created once and kept under the data
directory (`.reprise/demo-api-key`, mode 0600), and a ready curl line and client snippet that work
against the stack it started.

Only a key's hash is in the database, so the clear key is kept in that file; a key that no longer
works there (revoked, expired, or a database started afresh) is replaced by a new one.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from core.settings import Settings
from db.engine import session_scope
from db.tenants import find_tenant_by_key, issue_key

DEMO_TENANT = "demo"
KEY_FILE = "demo-api-key"
# A caption of the quality lab's world (lab.captions), the default models' language: its image is
# one the judge can read.
FIRST_PROMPT = "a small red circle left of a large blue square on a striped yellow background"
FIRST_WAIT_S = 60  # Prefer: wait=N answers when the job ends, at most 60 s (api/routes)


@dataclass(frozen=True, slots=True)
class DemoKey:
    api_key: str
    tenant: str
    path: Path
    created: bool  # False: the stored key still works and was reused


def key_path(settings: Settings) -> Path:
    return settings.data_dir / KEY_FILE


def ensure_demo_key(settings: Settings) -> DemoKey:
    """The stored demo key when it still authenticates, else a new admin key for tenant "demo" (it
    may read /v1/stats?scope=global), written to the key file before it is returned."""
    path = key_path(settings)
    stored = path.read_text().strip() if path.is_file() else ""
    with session_scope(settings) as session:
        if stored:
            tenant = find_tenant_by_key(session=session, key=stored)
            if tenant is not None:
                return DemoKey(api_key=stored, tenant=tenant.name, path=path, created=False)
        credentials = issue_key(session=session, name=DEMO_TENANT, admin=True)
    _write_private(path, credentials.api_key + "\n")
    return DemoKey(api_key=credentials.api_key, tenant=credentials.name, path=path, created=True)


def _write_private(path: Path, text: str) -> None:
    """Write a secret readable by its owner only, replacing the file atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)
    os.replace(partial, path)


def first_request_curl(base_url: str, api_key: str) -> str:
    """One shell line: submit the first prompt and wait for the finished job (Prefer: wait)."""
    body = json.dumps({"prompt": FIRST_PROMPT, "seed": 7})
    return " ".join(
        [
            "curl -s",
            shlex.quote(f"{base_url}/v1/generations"),
            "-H",
            shlex.quote(f"Authorization: Bearer {api_key}"),
            "-H 'Content-Type: application/json'",
            "-H",
            shlex.quote(f"Prefer: wait={FIRST_WAIT_S}"),
            "-d",
            shlex.quote(body),
        ]
    )


def client_snippet(base_url: str, api_key: str) -> str:
    """Python with the client (clients/python, installed by `make env`): create, wait, save the PNG."""
    return "\n".join(
        [
            "from reprise_client import Client",
            "",
            f"with Client({base_url!r}, api_key={api_key!r}) as reprise:",
            f"    job = reprise.create({FIRST_PROMPT!r}, seed=7, wait_s={FIRST_WAIT_S})",
            "    done = reprise.wait(job.id, timeout=120)",
            "    with open('image.png', 'wb') as out:",
            "        out.write(reprise.image(done.id))",
            "    print(done.status, done.metrics)",
        ]
    )


def welcome(base_url: str, key: DemoKey) -> str:
    """The lines `reprise run` prints once the stack is ready."""
    origin = "created now" if key.created else "kept from an earlier run"
    indented = "\n".join(
        f"    {line}" if line else "" for line in client_snippet(base_url, key.api_key).splitlines()
    )
    return "\n".join(
        [
            f"API key    {key.api_key}",
            f"           tenant {key.tenant!r}, {origin}, stored in {key.path}",
            "",
            "Your first request (it answers with the finished job; output.image is its PNG):",
            f"    {first_request_curl(base_url, key.api_key)}",
            "",
            "The same with the Python client:",
            indented,
            "",
        ]
    )
