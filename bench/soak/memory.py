"""The memory of each process of `reprise run`: its children's pids from <data_dir>/run/<name>.pid
(reprise.supervision writes them; the chaos bench kills through them), each one's resident set from
/proc/<pid>/status (VmRSS), sampled on a thread.

A child's figure is its own VmRSS plus its descendants' (a prefork worker's pool processes, which
hold the model and run the tasks): the memory that child's service costs, whatever process it sits in.
Shared pages (a forked model) count once per process, as `ps` and `top` count them. A child that the
supervisor restarted is read under its new pid, from the same pidfile.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from pathlib import Path

KIB_PER_MIB = 1024


def vm_rss_kib(pid: int, proc: Path = Path("/proc")) -> int | None:
    """VmRSS of one process in KiB; None when it is gone (or a kernel thread without one)."""
    try:
        for line in (proc / str(pid) / "status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def children_by_parent(proc: Path = Path("/proc")) -> dict[int, list[int]]:
    """Every process's children, from the PPid line of /proc/<pid>/status."""
    tree: dict[int, list[int]] = defaultdict(list)
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            for line in (entry / "status").read_text().splitlines():
                if line.startswith("PPid:"):
                    tree[int(line.split()[1])].append(int(entry.name))
                    break
        except (OSError, ValueError, IndexError):
            continue
    return tree


def tree_rss_mib(pid: int, tree: dict[int, list[int]], proc: Path = Path("/proc")) -> float | None:
    """RSS of a process and its descendants, MiB; None when the process itself is gone."""
    own = vm_rss_kib(pid, proc)
    if own is None:
        return None
    total, todo, seen = own, list(tree.get(pid, [])), {pid}
    while todo:
        child = todo.pop()
        if child in seen:
            continue
        seen.add(child)
        total += vm_rss_kib(child, proc) or 0
        todo.extend(tree.get(child, []))
    return total / KIB_PER_MIB


def stack_pids(data_dir: Path) -> dict[str, int]:
    """name -> pid of each child of `reprise run`, from <data_dir>/run/*.pid."""
    pids: dict[str, int] = {}
    for path in sorted((data_dir / "run").glob("*.pid")):
        try:
            text = path.read_text().split()[0]
        except (OSError, IndexError):
            continue
        if text.isdigit():
            pids[path.stem] = int(text)
    return pids


class RssSampler:
    """Samples every child's RSS every `every_s` seconds on a thread, from start() until stop()."""

    def __init__(self, data_dir: Path, *, every_s: float = 10.0) -> None:
        self.data_dir = data_dir
        self.every_s = every_s
        self.samples: dict[str, list[tuple[float, float]]] = defaultdict(list)  # name -> (s, MiB)
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-rss", daemon=True)
        self._started = time.monotonic()

    def start(self) -> RssSampler:
        self._started = time.monotonic()
        self.sample()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._halt.set()
        self._thread.join()
        self.sample()

    def sample(self) -> None:
        at = time.monotonic() - self._started
        tree = children_by_parent()
        for name, pid in stack_pids(self.data_dir).items():
            mib = tree_rss_mib(pid, tree)
            if mib is not None:
                self.samples[name].append((round(at, 1), round(mib, 1)))

    def _run(self) -> None:
        while not self._halt.wait(self.every_s):
            self.sample()
