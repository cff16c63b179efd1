"""The hosts the workers run on, read from their names, and the rule they impose on the blob store: a
local blob store is one host's disk, so workers on more than one host must share S3.

A worker's name is <name>@<host> (Celery's node name; the host is REPRISE_HOSTNAME, else the machine's
hostname). A latent that a large worker on host A keeps under A's REPRISE_BLOB_DIR is not on host B's
disk: B's decode node answers "gone", B's small worker cannot refine the hit, B's eviction cannot delete
it. So a worker that starts with REPRISE_BLOB_BACKEND=local while a worker on another host answers over
the broker refuses to start (workers.bootstrap), and the pool monitor warns when the workers it surveys
span hosts under a local store (jobs.pools.rebalance). worker_roles says who ran lately; only a worker
that answers a ping counts, so the rows of a machine that died or was renamed stop no one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable
from typing import Any

import redis
from celery import Celery
from kombu.exceptions import KombuError, OperationalError
from sqlalchemy.exc import SQLAlchemyError

from core.errors import SettingsError
from core.settings import Settings
from core.vocabulary import BlobBackend
from db import pools
from db.engine import session_scope

log = logging.getLogger(__name__)

PING_TIMEOUT_S = 2.0
"""How long a worker's start waits for the recorded workers of other hosts to answer (all answering
ends the wait sooner)."""

Ping = Callable[[list[str]], Collection[str]]  # worker names -> those that answered


def host_of(worker_name: str) -> str:
    """The host of a worker's name: what follows its last '@' ("" for a name that names none)."""
    return worker_name.rpartition("@")[2] if "@" in worker_name else ""


def hosts_of(worker_names: Iterable[str]) -> set[str]:
    """The hosts that the names name (a name without a host names none)."""
    return {host_of(name) for name in worker_names} - {""}


def local_blobs_refusal(settings: Settings, *, host: str, elsewhere: Collection[str]) -> str | None:
    """Why a worker on `host` must not start while `elsewhere` (workers of other hosts) are alive; None
    when it may: the blob store is S3, or no other host runs a worker."""
    if settings.blob_backend is not BlobBackend.LOCAL or not elsewhere:
        return None
    hosts = ", ".join(sorted(hosts_of(elsewhere)))
    return (
        f"REPRISE_BLOB_BACKEND=local keeps latents and images on this host's disk ({settings.blob_root}), "
        f"but workers on other hosts are running ({hosts}: {', '.join(sorted(elsewhere))}): what one host "
        "stores, the others cannot read. Fix: set REPRISE_BLOB_BACKEND=s3 and REPRISE_S3_BUCKET (with "
        "REPRISE_S3_ENDPOINT_URL for MinIO and the like) on every process, the API and beat included; or "
        f"run every worker on one host (this one's worker names end in @{host}: REPRISE_HOSTNAME)."
    )


def workers_elsewhere(settings: Settings, *, host: str, ping: Ping) -> list[str]:
    """The workers that worker_roles records on another host than `host` and that answer `ping` now."""
    with session_scope(settings, pooled=False) as session:  # a worker's main process forks later
        recorded = [worker.worker_name for worker in pools.recorded_workers(session)]
    others = [name for name in recorded if host_of(name) not in ("", host)]
    if not others:
        return []
    return sorted(set(ping(others)) & set(others))


def broker_ping(app: Celery, *, timeout_s: float = PING_TIMEOUT_S) -> Ping:
    """A Ping over `app`'s broker (Celery's remote control)."""

    def ping(names: list[str]) -> set[str]:
        replies: list[dict[str, Any]] = app.control.ping(destination=names, timeout=timeout_s) or []
        return {name for reply in replies for name in reply}

    return ping


def answering_roles(app: Celery, *, timeout_s: float = 1.0) -> set[str]:
    """The roles of the workers that answer a ping now (a worker's name begins with its role and a
    dash, workers.bootstrap.worker_node_name); none while the broker cannot be reached (it may be
    restarting, or the workers reach it through an address that is not up yet)."""
    try:
        replies = app.control.ping(timeout=timeout_s) or []
    except (OSError, redis.RedisError, KombuError) as error:
        log.info("no worker answered: %s", error)
        return set()
    return {name.split("-", 1)[0] for reply in replies for name in reply}


def refuse_local_blobs_across_hosts(settings: Settings, *, host: str, ping: Ping) -> None:
    """At a worker's start: raise SettingsError when the blob store is local and a worker on another
    host is alive. An unreachable database or broker lets the worker start (its tasks will say what is
    wrong with them)."""
    if settings.blob_backend is not BlobBackend.LOCAL:
        return
    try:
        alive = workers_elsewhere(settings, host=host, ping=ping)
    except (SQLAlchemyError, OperationalError, redis.RedisError, OSError):
        log.warning("could not tell whether workers run on other hosts than %s", host, exc_info=True)
        return
    refusal = local_blobs_refusal(settings, host=host, elsewhere=alive)
    if refusal is not None:
        raise SettingsError(refusal)


def spanned_hosts_warning(settings: Settings, live_workers: Collection[str]) -> str | None:
    """For the pool monitor: a warning when the live workers span hosts under a local blob store."""
    hosts = hosts_of(live_workers)
    if settings.blob_backend is not BlobBackend.LOCAL or len(hosts) < 2:
        return None
    return (
        f"workers run on {len(hosts)} hosts ({', '.join(sorted(hosts))}) with REPRISE_BLOB_BACKEND=local: "
        "a latent stored on one host cannot be read on another (reads answer 'gone', hits fail). "
        "Set REPRISE_BLOB_BACKEND=s3 on every process, or run every worker on one host."
    )
