"""Shared bits of the service managers."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass


@dataclass(frozen=True)
class ServiceStatus:
    name: str
    embedded: bool
    running: bool
    url: str
    detail: str

    def line(self) -> str:
        kind = "embedded" if self.embedded else "external"
        state = "running" if self.running else "stopped"
        return f"{self.name:<9} {kind:<9} {state:<8} {self.url}  ({self.detail})"


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
