"""webhook-slow, webhook-hang, webhook-huge: a second receiver, another tenant's endpoint, misbehaves while
both tenants' jobs run: it trickles its answer a byte a second (slow), reads the request and never
answers (hang), or answers 200 with a 100 MB body (huge). For `outage_s` it does so, then it answers 204
at once. What must hold: the bench tenant's deliveries (to the well-behaved receiver) are not held up
by it (`other_delivery_s`: from each job's end to its completed event, under 5 s), the noisy tenant's
events all arrive once the endpoint answers (`noisy_undelivered` 0), and nothing is delivered twice to
either receiver (each attempt is sent once; `noisy_duplicated` counts 2xx answers past the first).
"""

from __future__ import annotations

import socket
import statistics
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from bench.chaos.accounting import job_ends
from bench.chaos.load import submit_all
from bench.chaos.run import Run
from core.vocabulary import TERMINAL_STATUSES

MODES = {"webhook-slow": "slow", "webhook-hang": "hang", "webhook-huge": "huge"}
HUGE_BYTES = 100 * 1024 * 1024
CHUNK = 64 * 1024


@dataclass
class NoisyReceiver:
    """A raw HTTP/1.1 receiver on 127.0.0.1 whose answers follow `mode` until `healed`."""

    mode: str
    url: str = ""
    healed: bool = False
    delivered: Counter[str] = field(default_factory=Counter)  # webhook-id -> 2xx answers given
    misbehaved: int = 0  # requests answered the bad way
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, conn: socket.socket) -> None:
        with conn:
            message = _read_request(conn)
            with self.lock:
                healed = self.healed
                if healed or self.mode == "huge":  # a 200, however long its body: delivered
                    self.delivered[message] += 1
                if not healed:
                    self.misbehaved += 1
            try:
                if healed:
                    conn.sendall(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n")
                else:
                    self._misbehave(conn)
            except OSError:  # the deliverer cut us off at its deadline: what the scenario expects
                pass

    def _misbehave(self, conn: socket.socket) -> None:
        if self.mode == "hang":
            self.stop.wait(600)
        elif self.mode == "slow":
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 100000\r\n\r\n")
            while not self.stop.wait(1.0):
                conn.sendall(b"x")
        else:
            conn.sendall(f"HTTP/1.1 200 OK\r\ncontent-length: {HUGE_BYTES}\r\n\r\n".encode())
            for _ in range(HUGE_BYTES // CHUNK):
                conn.sendall(b"x" * CHUNK)


def _read_request(conn: socket.socket) -> str:
    """Read one request; its webhook-id."""
    conn.settimeout(30)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(CHUNK)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    headers = dict(line.decode("latin-1").split(":", 1) for line in head.split(b"\r\n")[1:] if b":" in line)
    lowered = {key.strip().lower(): value.strip() for key, value in headers.items()}
    length = int(lowered.get("content-length", "0"))
    while len(body) < length:
        chunk = conn.recv(CHUNK)
        if not chunk:
            break
        body += chunk
    return lowered.get("webhook-id", "")


def start_noisy(mode: str) -> tuple[NoisyReceiver, socket.socket]:
    receiver = NoisyReceiver(mode=mode)
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)

    def serve() -> None:
        while not receiver.stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=receiver.answer, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, name="chaos-noisy-receiver", daemon=True).start()
    receiver.url = f"http://127.0.0.1:{server.getsockname()[1]}/hook"
    return receiver, server


def noisy_webhook(run: Run, mode: str) -> float:
    """The fault: the noisy tenant's batch, its receiver misbehaving for `outage_s`, then healed. The
    noisy jobs are kept in run.extra for `account_noisy`."""
    receiver, server = start_noisy(mode)
    run.extra["_noisy"] = (receiver, server)
    bodies = [
        {"prompt": f"{run.tag} noisy {i}: a harbour at night", "seed": 3, "webhook": receiver.url}
        for i in range(run.options.jobs)
    ]
    noisy = submit_all(run.target.base_url, run.headers, bodies, concurrency=4)
    run.extra["_noisy_jobs"] = noisy.job_ids
    time.sleep(run.outage_s)
    with receiver.lock:
        receiver.healed = True
    return time.time()


def account_noisy(run: Run, job_ids: list[str], fault_end: float) -> None:
    """Wait (bounded) for the noisy tenant's events, then record the scenario's figures: the other
    tenant's delivery delay, the noisy events undelivered and delivered twice."""
    receiver, server = run.extra.pop("_noisy")
    noisy_jobs: list[str] = run.extra.pop("_noisy_jobs")
    try:
        while time.time() - fault_end < run.options.bound_s:
            with receiver.lock:
                got = len([m for m in receiver.delivered if m.endswith("completed")])
            if got >= len(noisy_jobs):
                break
            time.sleep(0.5)
    finally:
        receiver.stop.set()
        server.close()
    with receiver.lock:
        completed = {m: n for m, n in receiver.delivered.items() if m.endswith("completed")}
        run.extra["noisy_misbehaved"] = receiver.misbehaved
    ends = job_ends(run.target.settings, noisy_jobs) or {}
    unended = sum(1 for job in noisy_jobs if job not in ends or ends[job].status not in TERMINAL_STATUSES)
    run.extra["noisy_jobs"] = len(noisy_jobs)
    run.extra["noisy_undelivered"] = max(0, len(noisy_jobs) - len(completed))
    run.extra["noisy_duplicated"] = sum(n - 1 for n in completed.values())
    # The row's lost and duplicated cover both tenants: a noisy job that never ended is lost too.
    run.report.lost += unended
    run.report.duplicated += run.extra["noisy_duplicated"]
    run.extra["other_delivery_s"] = other_delivery_s(run, job_ids)


def other_delivery_s(run: Run, job_ids: list[str]) -> dict[str, float | None]:
    """Seconds from each of the bench tenant's jobs' end to its completed event at its receiver."""
    ends = job_ends(run.target.settings, job_ids) or {}
    delays = []
    with run.receiver.lock:
        for message, job in run.receiver.job_of.items():
            end = ends.get(job)
            if not message.endswith("completed") or end is None or end.finished_at is None:
                continue
            delays.append(run.receiver.delivered_at[message] - end.finished_at.timestamp())
    if not delays:
        return {"p50": None, "max": None}
    return {"p50": round(statistics.median(delays), 2), "max": round(max(delays), 2)}
