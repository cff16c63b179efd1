"""A worker's Celery node name carries this machine's host: REPRISE_HOSTNAME when set (two nodes on one
machine in tests/e2e/test_two_nodes.py), else the machine's hostname."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from core.settings import load_settings
from core.vocabulary import Role
from workers.bootstrap import worker_node_name


def test_the_node_name_takes_the_configured_host(tmp_path: Path) -> None:
    named = load_settings(data_dir=tmp_path, hostname="node-a.example")
    assert worker_node_name(Role.LARGE, named) == f"large-{os.getpid()}@node-a.example"
    assert worker_node_name(Role.IO, named, "io-e2e@%h") == "io-e2e@node-a.example"
    assert worker_node_name(Role.IO, named, "io-e2e") == "io-e2e@node-a.example"
    assert worker_node_name(Role.IO, named, "%n-io@%h") == "node-a-io@node-a.example"
    assert worker_node_name(Role.IO, named, "io@elsewhere") == "io@elsewhere"  # a full name is kept


def test_unset_the_machines_hostname_names_the_host(tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path)
    if settings.hostname is not None:  # REPRISE_HOSTNAME set in this environment
        return
    assert worker_node_name(Role.DECODE, settings, "decode@%h") == f"decode@{socket.gethostname()}"
