"""The chaos bench's own stack (`isolated_stack`): embedded Postgres and Redis on free ports in a scratch
data directory, the tiny models, `reprise run` with short leases, a 5 s beat and a short webhook retry
schedule, so that a run takes minutes; torn down afterwards, it never touches another stack.

Two options serve the scenarios that need more than one machine's worth of stack:
- proxy: the workers reach Redis and Postgres through the bench's fault proxy (bench.chaos.proxy), on
  `reprise run --workers-redis-url/--workers-database-url`; the API and beat reach them directly.
- s3: the blob store is S3 on a moto server of the stack's own (a second node of workers needs a blob
  store that both nodes read; a local one is one host's disk and refuses them, jobs.hosts).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from bench.chaos.proxy import FaultProxy
from bench.chaos.target import ChaosTarget
from core.settings import load_settings

# The isolated stack: small jobs (T = 10 at 64x64) and fast recovery loops, so a scenario takes seconds.
ISOLATED_ENV = {
    "REPRISE_MODEL_SET": "tiny",  # faults and recovery, not image quality: the fastest models
    "REPRISE_STEPS": "10",
    "REPRISE_CAPTURE_STEPS": "2,4,6,8",
    "REPRISE_DEFAULT_SIZE": "64",
    "REPRISE_LEASE_S": "6",
    "REPRISE_LEASE_RENEW_S": "2",
    "REPRISE_BEAT_PERIOD_S": "5",
    "REPRISE_RECONCILE_PERIOD_S": "5",  # the reconciler has its own period (10 s by default)
    "REPRISE_STUCK_AFTER_S": "10",
    "REPRISE_WEBHOOK_ALLOW_HOSTS": "127.0.0.1",
    "REPRISE_WEBHOOK_RETRY_DELAYS_S": "0,1,2,4,8,8,8,8,8,8",
    "REPRISE_MONITOR_ENABLED": "false",
    "REPRISE_PREDICTOR_ENABLED": "false",
    "REPRISE_QUEUE_DEPTH_LIMIT": "100000",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "OMP_NUM_THREADS": "1",
}
START_TIMEOUT_S = 300.0
S3_KEYS = {"REPRISE_S3_ACCESS_KEY_ID": "chaos", "REPRISE_S3_SECRET_ACCESS_KEY": "chaos"}  # moto takes any


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def isolated_stack(
    workdir: Path | None = None, *, proxy: bool = False, s3: bool = False
) -> Iterator[ChaosTarget]:
    """A whole stack of the bench's own, torn down afterwards."""
    root = Path(workdir or tempfile.mkdtemp(prefix="reprise-chaos-"))
    root.mkdir(parents=True, exist_ok=True)
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("REPRISE_DATABASE_URL", "REPRISE_REDIS_URL")
        and not key.startswith(("REPRISE_S3_", "REPRISE_BLOB"))
    }
    pg_port, redis_port, port = free_port(), free_port(), free_port()
    env |= ISOLATED_ENV | {
        "REPRISE_DATA_DIR": str(root / "data"),
        "REPRISE_PG_PORT": str(pg_port),
        "REPRISE_REDIS_PORT": str(redis_port),
    }
    with contextlib.ExitStack() as stack:
        if s3:
            env |= stack.enter_context(_moto_server(root))
        settings = load_settings(
            data_dir=root / "data",
            pg_port=pg_port,
            redis_port=redis_port,
            model_set="tiny",
            **{
                key.removeprefix("REPRISE_").lower(): value
                for key, value in env.items()
                if key.startswith(("REPRISE_S3_", "REPRISE_BLOB_"))
            },
        )
        target = ChaosTarget(base_url=f"http://127.0.0.1:{port}", settings=settings, env=env, isolated=True)
        for args in (("services", "up"), ("migrate",), ("models", "tiny")):
            done = target.reprise(*args, timeout_s=START_TIMEOUT_S)
            if done.returncode != 0:
                raise RuntimeError(f"`reprise {' '.join(args)}` failed: {done.stderr[-2000:]}")
        argv = ["run", "--port", str(port), "--flower-port", str(free_port()), "--demo", "0"]
        if proxy:
            target.proxy = stack.enter_context(
                FaultProxy({"redis": ("127.0.0.1", redis_port), "postgres": ("127.0.0.1", pg_port)})
            )
            argv += [
                "--workers-redis-url",
                f"redis://127.0.0.1:{target.proxy.port('redis')}/0",
                "--workers-database-url",
                f"postgresql+psycopg://reprise@127.0.0.1:{target.proxy.port('postgres')}/reprise",
            ]
        try:
            with _reprise_run(root, argv, env):
                yield target
        finally:
            target.reprise("services", "down")


@contextmanager
def _reprise_run(root: Path, argv: list[str], env: dict[str, str]) -> Iterator[None]:
    log_path = root / "run.log"
    with log_path.open("wb") as log:
        stack = subprocess.Popen(
            [sys.executable, "-m", "reprise", *argv],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            _wait_up(log_path, stack)
            yield
        finally:
            stack.send_signal(signal.SIGINT)
            try:
                stack.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(stack.pid, signal.SIGKILL)


def _wait_up(log: Path, stack: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if "the stack is up" in log.read_text(errors="replace"):
            return
        if stack.poll() is not None:
            break
        time.sleep(1.0)
    raise RuntimeError(
        f"the chaos stack did not come up; see {log}: {log.read_text(errors='replace')[-2000:]}"
    )


@contextmanager
def _moto_server(root: Path) -> Iterator[dict[str, str]]:
    """A moto S3 server on a free port with a bucket; yields the stack's S3 settings. moto is a test
    dependency (pip install 'reprise[test]')."""
    try:
        import moto.server  # noqa: F401
    except ImportError:
        raise RuntimeError("the S3 stack needs moto's server: pip install 'moto[server]'") from None
    from db.blobs.s3 import S3BlobStore

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with (root / "moto.log").open("wb") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                with contextlib.suppress(httpx.HTTPError):
                    httpx.get(url, timeout=2)
                    break
                time.sleep(0.3)
            S3BlobStore(
                bucket="chaos", endpoint_url=url, access_key_id="chaos", secret_access_key="chaos"
            ).ensure_bucket()
            yield S3_KEYS | {
                "REPRISE_BLOB_BACKEND": "s3",
                "REPRISE_S3_BUCKET": "chaos",
                "REPRISE_S3_ENDPOINT_URL": url,
            }
        finally:
            server.terminate()
            server.wait(timeout=30)
