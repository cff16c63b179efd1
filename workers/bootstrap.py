"""Worker start-up: one role per process, its queues, and its models loaded once per process."""

from __future__ import annotations

import logging
import os
from importlib.metadata import entry_points

from celery import Celery
from celery.signals import worker_process_init, worker_process_shutdown
from celery.utils.nodenames import host_format

from core.errors import SettingsError
from core.settings import Settings, get_settings
from core.vocabulary import GPU_ROLES, Role
from jobs.celery_app import get_celery_app
from jobs.hosts import broker_ping, refuse_local_blobs_across_hosts
from jobs.queues import Queue, decode_queue
from workers import liveness, role_switch
from workers.context import ROLE_ENV, WorkerContext
from workers.decoding import NODE_ENV
from workers.registry import keep_record, starting_role
from workers.role_switch import consumed_queues

log = logging.getLogger(__name__)

TASK_PLUGINS = "reprise.worker_tasks"  # entry points of register(app) functions (register_task_plugins)


def worker_node_name(role: Role, settings: Settings, name: str | None = None) -> str:
    """The worker's Celery node name: `name` (default <role>-<pid>), on this machine's host
    (REPRISE_HOSTNAME, else its hostname) when it names none; %h, %n and %d expand to that host."""
    host = settings.worker_host
    node = name or f"{role.value}-{os.getpid()}"
    if "@" not in node:
        node = f"{node}@{host}"
    return str(host_format(node, host=host))


def pool_arguments(role: Role, settings: Settings, concurrency: int) -> list[str]:
    """Celery's pool for `role`: prefork, `concurrency` processes (the parent enforces hard time limits by
    killing a stuck child, the watchdog, and a crashed child's task is requeued: reject_on_worker_lost);
    or the threads pool, that many threads in one process, for an admit worker with REPRISE_ADMIT_THREADS
    > 1 (their prompts embedded together, WorkerContext.query_embedder), for a large or small worker
    with REPRISE_MAX_BATCH > 1 (their jobs denoised together, workers.runtime.batch_loop: the worker holds
    max_batch jobs at once, prefetch 1 a thread) and for a decode node with it (its reads' VAE decodes
    run together, workers.runtime.decode_batching). A threads pool enforces no time limit: a run's lease
    is renewed only while it keeps to its deadline (at most the task time limit) and no step of it hangs
    (workers.lease), so the reconciler sends a stuck run's job again; a hung model call makes the worker
    not alive, and it exits to be replaced (workers.liveness_watch)."""
    threads = {
        Role.ADMIT: settings.admit_threads,
        Role.LARGE: settings.max_batch,
        Role.SMALL: settings.max_batch,
        Role.DECODE: settings.max_batch,
    }
    count = threads.get(role, 1)
    if count == 1:
        return ["--pool=prefork", f"--concurrency={concurrency}"]
    if concurrency != 1:
        setting = "REPRISE_ADMIT_THREADS" if role is Role.ADMIT else "REPRISE_MAX_BATCH"
        raise SettingsError(
            f"a {role.value} worker with {setting}={count} runs its threads in one process, not "
            f"--concurrency {concurrency}: start one worker per process, or set {setting}=1 for the "
            "prefork pool"
        )
    return ["--pool=threads", f"--concurrency={count}"]


def run_worker(
    role: Role,
    *,
    name: str | None = None,
    concurrency: int = 1,
    metrics_port: int | None = None,
    only_queues: tuple[str, ...] | None = None,
) -> None:
    """Run a Celery worker for `role` in the foreground (blocks until it is stopped).

    A large or small worker whose name an operator pinned to the other pool starts there; the pool
    monitor may move it later (workers.role_switch). Its role is recorded in worker_roles (workers.registry).
    Raises SettingsError when the blob store is local and a worker on another host answers (jobs.hosts).
    """
    settings = get_settings()
    hostname = worker_node_name(role, settings, name)
    # A local blob store is this host's disk: refused while workers on another host run (jobs.hosts).
    refuse_local_blobs_across_hosts(settings, host=settings.worker_host, ping=broker_ping(get_celery_app()))
    role = starting_role(settings, worker_name=hostname, role=role)
    chosen = chosen_queues(role, settings, only_queues)  # SettingsError before anything starts
    pool = io_pool_arguments(chosen, settings) or pool_arguments(role, settings, concurrency)
    os.environ[ROLE_ENV] = role.value  # read by the child processes' context
    role_switch.install(role)  # shared memory: created before the pool forks its children
    liveness.install()  # the same: every process of the worker tells its progress (workers.liveness)
    app = get_celery_app()
    role_switch.register_commands()  # the pool monitor's remote control commands
    import workers.liveness_watch
    import workers.task_signals
    import workers.tasks  # noqa: F401  (registers the task bodies on the app)

    register_task_plugins(app)

    keep_record(settings, worker_name=hostname, role=role)
    if metrics_port is not None:  # the sum of every pool child's samples (workers.metrics)
        from workers.metrics import serve_worker_metrics

        serve_worker_metrics(metrics_port, settings.worker_metrics_address)
        log.info("worker metrics on http://%s:%d/metrics", settings.worker_metrics_address, metrics_port)
    # A large worker's cache_miss comes first: the "priority" order drains misses before hits.
    queues = ",".join(queue.value for queue in chosen)
    if role is Role.DECODE:  # a decode node consumes its own queue only (LatentBox 4.4's routing)
        os.environ[NODE_ENV] = hostname
        queues = decode_queue(hostname)
    if "--pool=threads" in pool:  # no pool child: this process runs the tasks, its models load now
        _load_models_in_child()
    argv = ["worker", f"--queues={queues}", f"--hostname={hostname}", *pool]
    # Without mingle: at each reconnection to the broker it broadcasts a hello, and a connection reset
    # during that broadcast is re-raised as kombu's OperationalError, which Celery's consumer does not
    # count as a connection error: the worker stopped (chaos network, a worker exited at 60 s of resets).
    # What mingle syncs, revoked task ids, this service does not use (a cancel is a row in Postgres).
    app.worker_main([*argv, "--loglevel=INFO", "--task-events", "--without-gossip", "--without-mingle"])


def register_task_plugins(app: Celery, group: str = TASK_PLUGINS) -> list[str]:
    """Let an installed package declare tasks of its own on the worker's app: each entry point of `group`
    is a `register(app)` function (the read benchmark's node set-up, bench.live.node_setup). Serving
    never sends them. Returns the entry points' names."""
    points = list(entry_points(group=group))
    for point in points:
        point.load()(app)
    return [point.name for point in points]


def chosen_queues(role: Role, settings: Settings, only: tuple[str, ...] | None) -> tuple[Queue, ...]:
    """The role's queues (consumed_queues), or the ones of them `only` names (`--queues`)."""
    queues = consumed_queues(role, settings)
    if only is None:
        return queues
    named = {queue.value: queue for queue in queues}
    unknown = [name for name in only if name not in named]
    if unknown or not only:
        raise SettingsError(
            f"--queues {','.join(only)}: a {role.value} worker consumes {', '.join(named)}; name some of them"
        )
    return tuple(named[name] for name in only)


def io_pool_arguments(queues: tuple[Queue, ...], settings: Settings) -> list[str] | None:
    """A worker that consumes the webhooks queue alone runs REPRISE_WEBHOOK_THREADS threads: a delivery
    waits on the network, each attempt bounded by its own deadline (workers.webhook_http), and one
    endpoint holds at most REPRISE_WEBHOOK_ENDPOINT_CONCURRENCY of them (workers.endpoint_slots).
    None for every other worker (pool_arguments decides)."""
    if queues != (Queue.WEBHOOKS,):
        return None
    return ["--pool=threads", f"--concurrency={settings.webhook_threads}"]


@worker_process_init.connect
def _load_models_in_child(**_: object) -> None:
    """Load the role's models in each pool process once, before its first task (in the worker's own
    process when its pool is threads)."""
    role_name = os.environ.get(ROLE_ENV)
    if role_name is None:
        return
    role = role_switch.shared_role() or Role(role_name)  # a child forked after a move takes the new role
    from workers.context import get_context

    context = get_context()
    context.switch_role(role)
    if role in GPU_ROLES:
        context.runtime()
    if role is Role.SMALL and context.settings.cohosting:
        _load_guest(context)
    if role is Role.ADMIT:
        context.query_embedder()  # batched across threads when the admit worker has several
    if role in (Role.LARGE, Role.SMALL):
        context.text_embedder()
    if role is Role.DECODE:
        from workers.decoding import start_heartbeat

        start_heartbeat(context)
    log.info("worker process ready for role %s", role.value)


def _load_guest(context: WorkerContext) -> None:
    """A co-hosting small worker's second model, the large one, loaded at start like its own: a card
    that cannot hold both says so now, with the fix, rather than at the first miss."""
    try:
        with context.serving(Role.LARGE):
            context.runtime()
    except RuntimeError as error:
        if "out of memory" not in str(error).lower():
            raise
        raise SettingsError(
            f"the small worker cannot also host the large model ({error}); set REPRISE_COHOST=false "
            "so that each worker hosts its own pool's model only"
        ) from None


@worker_process_shutdown.connect
def _leave_the_ring(**_: object) -> None:
    """A decode node stopping leaves the hash ring at once rather than after three missed heartbeats."""
    if os.environ.get(ROLE_ENV) == Role.DECODE.value:
        from workers.context import get_context
        from workers.decoding import stop_heartbeat

        stop_heartbeat(get_context())
