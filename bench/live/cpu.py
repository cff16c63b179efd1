"""The CPU time a local stack's processes spend, by role, read from Linux's /proc around a replay.

`reprise run` keeps each child's pid in <data_dir>/run/<name>.pid (reprise.supervisor), and the embedded
Postgres and Redis keep theirs under <data_dir>/postgres/data/postmaster.pid and <data_dir>/redis/redis.pid.
A role's CPU is its root process's and every descendant's (a Celery pool's children, Postgres' backends),
user and system, with the children that ended and were waited for (cutime, cstime): a backend that exits
between two readings moves its time into its parent's, so the difference of two readings counts each
CPU second once. A process is named by its pid file (worker-large -> large, worker-decode-1 -> decode).

On a host where the stack is not local (no pid files, another machine's API) there is nothing to read:
`read_stack_cpu` returns None and the replay says so, rather than a figure of the wrong processes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True, slots=True)
class StackCpu:
    """CPU seconds per role at one instant (cumulative since each process started)."""

    seconds: Mapping[str, float]

    def since(self, earlier: StackCpu) -> dict[str, float]:
        """CPU seconds spent per role between `earlier` and this reading (roles present in both)."""
        return {
            role: max(0.0, self.seconds[role] - earlier.seconds[role])
            for role in self.seconds
            if role in earlier.seconds
        }


def role_of(pid_file: Path) -> str:
    """The role a supervised child's pid file names: worker-large -> large, worker-decode-2 -> decode."""
    name = pid_file.stem.removeprefix("worker-")
    head, _, tail = name.rpartition("-")
    return head if head and tail.isdigit() else name


def stack_roots(data_dir: Path) -> dict[str, list[int]]:
    """Role -> the live root pids of a local stack under `data_dir`: the supervised children and the
    embedded Postgres and Redis; empty when none is running here."""
    files = sorted((data_dir / "run").glob("*.pid"))
    named = [(role_of(path), path) for path in files]
    named += [
        ("postgres", data_dir / "postgres" / "data" / "postmaster.pid"),
        ("redis", data_dir / "redis" / "redis.pid"),
    ]
    roots: dict[str, list[int]] = {}
    for role, path in named:
        pid = _first_int(path)
        if pid is not None and (PROC / str(pid)).is_dir():
            roots.setdefault(role, []).append(pid)
    return roots


def read_stack_cpu(data_dir: Path) -> StackCpu | None:
    """The CPU seconds of every role of the local stack now; None when no stack process runs here."""
    roots = stack_roots(data_dir)
    if not roots:
        return None
    table = _process_table()
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    seconds: dict[str, float] = {}
    for role, pids in roots.items():
        seen: set[int] = set()
        todo = [pid for pid in pids if pid in table]
        while todo:
            pid = todo.pop()
            if pid in seen:
                continue
            seen.add(pid)
            todo.extend(children.get(pid, ()))
        seconds[role] = seconds.get(role, 0.0) + sum(table[pid][1] for pid in seen)
    return StackCpu(seconds)


def _process_table() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, CPU seconds: utime + stime + cutime + cstime) of every process now."""
    ticks = float(os.sysconf("SC_CLK_TCK"))
    table: dict[int, tuple[int, float]] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # ended while we read
            continue
        # The command (field 2) is in parentheses and may hold spaces: split after its last ')'.
        fields = stat[stat.rindex(")") + 2 :].split()
        parent = int(fields[1])
        utime, stime, cutime, cstime = (int(value) for value in fields[11:15])
        table[int(entry.name)] = (parent, (utime + stime + cutime + cstime) / ticks)
    return table


def _first_int(path: Path) -> int | None:
    try:
        first = path.read_text().split()[0]
    except (OSError, IndexError):
        return None
    return int(first) if first.isdigit() else None


def per_request_ms(spent: Mapping[str, float], requests: int) -> dict[str, float]:
    """CPU milliseconds per request by role, and their sum as `total`."""
    if requests <= 0:
        return {}
    figures = {role: round(seconds * 1000.0 / requests, 2) for role, seconds in sorted(spent.items())}
    return figures | {"total": round(sum(spent.values()) * 1000.0 / requests, 2)}
