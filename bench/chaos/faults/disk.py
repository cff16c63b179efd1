"""disk-full: the blob store's disk takes no more bytes while jobs run and images are read.

How, without root on a shared disk: RLIMIT_FSIZE. Filling the disk would fill it for everyone, and a
small loop-mounted or quota-limited folder needs root; a fault hook in the blob store would test a hook.
A process whose file-size limit is 0 cannot make any file bigger: write(2) fails with EFBIG ("File too
large"; the SIGXFSZ that comes with it is ignored by CPython, so Python code sees an OSError), exactly
where a full disk fails with ENOSPC: the first write after the file was created. The bench lowers the
soft limit of every process of every worker's process group (prlimit(2) on a process of one's own user;
the hard limit stays, so it can be raised back) for `outage_s`, again each second for processes forked
meanwhile, then restores the limits. The API and the services keep theirs: the blob store's disk is the
workers' (Postgres has its own). The workers' own log files fail to grow meanwhile, as on a full disk.

Jobs may fail (with their reason) or wait and recover; none may leave a corrupt entry: afterwards every
succeeded job's image is read back (a PNG), and no temporary file of an interrupted write may be left in a
local blob store. Images stored before the fault are read throughout it.
"""

from __future__ import annotations

import contextlib
import resource
import time
from collections import Counter

import httpx

from bench.chaos.accounting import job_ends
from bench.chaos.run import Run
from bench.chaos.target import group_members
from core.vocabulary import BlobBackend

PNG = b"\x89PNG"


def warm_images(run: Run) -> list[str]:
    """A few jobs run to the end before the fault: the images read while it lasts."""
    warm = run.submit(run.bodies(max(2, run.options.jobs // 10), seed=7)).job_ids
    run.wait_terminal(warm, time.time(), events=False)
    run.extra["warm_jobs"] = len(warm)
    return warm


def disk_full(run: Run, warm: list[str]) -> float:
    saved: dict[int, tuple[int, int]] = {}
    reads: Counter[str] = Counter()
    ends = time.monotonic() + run.outage_s
    with httpx.Client(base_url=run.target.base_url, headers=run.headers, timeout=30) as client:
        try:
            while time.monotonic() < ends:
                _limit_workers(run, saved)
                for job_id in warm:
                    reads[_read(client, job_id)] += 1
                time.sleep(0.5)
        finally:
            _restore(run, saved)
    run.extra["limited_processes"] = len(saved)
    run.extra["reads_during_fault"] = dict(reads)
    return time.time()


def _limit_workers(run: Run, saved: dict[int, tuple[int, int]]) -> None:
    for pgid in (pid for pid in run.target.worker_pids().values() if pid is not None):
        for pid in group_members(pgid):
            if pid in saved:
                continue
            with contextlib.suppress(ProcessLookupError, PermissionError):
                soft, hard = resource.prlimit(pid, resource.RLIMIT_FSIZE)
                resource.prlimit(pid, resource.RLIMIT_FSIZE, (0, hard))
                saved[pid] = (soft, hard)


def _restore(run: Run, saved: dict[int, tuple[int, int]]) -> None:
    """Every limited process gets its limits back; so does a process forked from a limited one after
    the last pass (it inherited the 0 and was never seen), with its group leader's limits."""
    for pid, limits in saved.items():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            resource.prlimit(pid, resource.RLIMIT_FSIZE, limits)
    for pgid in (pid for pid in run.target.worker_pids().values() if pid is not None):
        limits = saved.get(pgid, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        for pid in group_members(pgid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if pid not in saved and resource.prlimit(pid, resource.RLIMIT_FSIZE)[0] == 0:
                    resource.prlimit(pid, resource.RLIMIT_FSIZE, limits)
                    saved[pid] = limits


def _read(client: httpx.Client, job_id: str) -> str:
    """One read of a job's image: "ok" (a PNG), "pending" (202), else the status or the error."""
    try:
        response = client.get(f"/v1/generations/{job_id}/image")
    except httpx.HTTPError as error:
        return type(error).__name__
    if response.status_code == 200:
        return "ok" if response.content.startswith(PNG) else "not-png"
    return "pending" if response.status_code == 202 else str(response.status_code)


def check_entries(run: Run, job_ids: list[str]) -> None:
    """After the fault: every succeeded job's image reads back whole; no interrupted write left behind."""
    ends = job_ends(run.target.settings, job_ids) or {}
    done = [job_id for job_id, end in ends.items() if end.status == "succeeded"]
    bad: Counter[str] = Counter()
    with httpx.Client(base_url=run.target.base_url, headers=run.headers, timeout=60) as client:
        for job_id in done:
            outcome = _read(client, job_id)
            deadline = time.monotonic() + 60
            while outcome == "pending" and time.monotonic() < deadline:
                time.sleep(0.5)
                outcome = _read(client, job_id)
            if outcome != "ok":
                bad[outcome] += 1
    run.extra["images_checked"] = len(done)
    run.extra["corrupt"] = dict(bad)
    settings = run.target.settings
    if settings.blob_backend is BlobBackend.LOCAL:
        run.extra["temp_files_left"] = sum(1 for _ in settings.blob_root.resolve().rglob(".tmp-*"))
