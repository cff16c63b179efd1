"""What one worker process holds: settings, the blob store, the dispatcher it enqueues through,
and its models, each built once.

The role's model is loaded on first use (or eagerly at process start, see bootstrap), so a
process only pays for what its queues need.
"""

from __future__ import annotations

import os
import secrets
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import redis

from core import plugins
from core.settings import Settings, get_settings
from core.vocabulary import LookupMode, Role
from db.blobs.base import BlobStore
from db.blobs.factory import blob_store_from_settings
from jobs.broker import broker_client
from jobs.celery_app import get_celery_app
from jobs.dispatch import CeleryDispatcher, Dispatcher

if TYPE_CHECKING:
    from core.scoring import Scorer, VideoScorer
    from workers.run_watch import RunWatch
    from workers.runtime.runtime import DiffusionRuntime
    from workers.runtime.video import VideoRuntime


class WorkerContext:
    """Process-wide state of a worker. A prefork pool's process runs one task at a time (prefetch 1); an
    admit worker with threads (settings.admit_threads) runs several, so the models are built under a lock
    and its threads share one query embedder that batches their prompts; a GPU worker with step-level
    batching (settings.max_batch > 1) runs max_batch task threads whose jobs share one UNet call per step
    (workers.runtime.batch_loop), and switches its role only when none of them runs (`hosting`)."""

    def __init__(self, settings: Settings, role: Role, *, dispatcher: Dispatcher | None = None) -> None:
        self.settings = settings
        self.role = role
        self.blobs: BlobStore = blob_store_from_settings(settings)
        self._dispatcher = dispatcher
        self._runtime: DiffusionRuntime | None = None
        self._guest: DiffusionRuntime | None = None  # a co-hosting small worker's large model
        self._video_runtime: VideoRuntime | None = None
        self._text_embedder: Any = None
        self._image_embedder: Any = None
        self._query_embedder: Any = None
        self._scorer: Scorer | None = None
        self._video_scorer: VideoScorer | None = None
        self._video_scorer_chosen = False  # None is a choice: no scorer for this video model
        self._building = threading.RLock()  # one build of each model, whichever thread asks first
        self._hosting = threading.Condition()  # the role's runs in flight, and a switch waiting for none
        self._running = 0
        self.video_lock = threading.Lock()  # the video model runs one job at a time, whatever the pool
        self.predictors: dict[tuple[str, str, str], Any] = {}  # (scope, family, mode) -> (version, model)
        # name -> (read at, value): workers.cascade's threshold, jobs.route_costs' costs
        self.cascade_cache: dict[str, tuple[float, Any]] = {}
        self.decode_node: Any = None  # workers.decoding: the decode role's node (its cache), on first use
        self.redis: Any = None  # workers.decoding: a client of the broker's Redis, on first use
        self._run_watch: RunWatch | None = None

    @property
    def owner(self) -> str:
        """Names the run in job leases: this process, and the task's own run when `run_owner` marks one.
        A worker with batching threads runs several tasks at once, so the process alone does not tell
        two deliveries of one job apart: both would claim it, run it twice and spend two attempts."""
        return _RUN.get() or self._process_owner()

    def _process_owner(self) -> str:
        return f"{self.role.value}:{socket.gethostname()}:{os.getpid()}"

    @contextmanager
    def run_owner(self) -> Iterator[str]:
        """Within the block, `owner` names one run of this process (a task's), not the process."""
        owner = f"{self._process_owner()}:{secrets.token_hex(4)}"
        token = _RUN.set(owner)
        try:
            yield owner
        finally:
            _RUN.reset(token)

    def switch_role(self, role: Role) -> None:
        """Host `role` from now on: a loaded runtime swaps its model (releasing the old one first);
        an unloaded one loads the new role's on first use. Between tasks only (workers.role_switch)."""
        if role is self.role:
            return
        if self._guest is not None:  # the guest model belongs to the small pool's co-hosting
            self._guest.release()
            self._guest = None
        if self._runtime is not None:
            self._runtime.switch_role(role)
        self.role = role

    @property
    def serving_role(self) -> Role:
        """The role whose model the running task uses: the worker's, or its guest's (`serving`)."""
        return _SERVING.get() or self.role

    @contextmanager
    def serving(self, role: Role) -> Iterator[None]:
        """Within the block, runtime() is `role`'s: a co-hosting small worker runs a miss on the large
        model it also hosts (workers.role_switch.serving_role)."""
        token = _SERVING.set(role)
        try:
            yield
        finally:
            _SERVING.reset(token)

    @contextmanager
    def hosting(self, role: Role) -> Iterator[None]:
        """Run a task on `role`'s model: switch to it first when the worker was moved (workers.role_switch),
        after the runs of the previous role in this process have ended; the switch waits for them, and
        later tasks for the new role wait for the switch."""
        with self._hosting:
            while role is not self.role and self._running:
                self._hosting.wait()
            self.switch_role(role)
            self._running += 1
        try:
            yield
        finally:
            with self._hosting:
                self._running -= 1
                self._hosting.notify_all()

    @property
    def dispatcher(self) -> Dispatcher:
        """Every enqueue of this process goes through it; over a Celery app for these settings unless
        one was given (get_context gives the process-wide app, tests a recording one)."""
        if self._dispatcher is None:
            self._dispatcher = CeleryDispatcher.for_settings(self.settings)
        return self._dispatcher

    def broker(self) -> redis.Redis:
        """A client of the broker's Redis (answers, heartbeats, announcements), built on first use."""
        if self.redis is None:
            self.redis = broker_client(self.settings)
        client: redis.Redis = self.redis
        return client

    def run_watch(self) -> RunWatch:
        """The cancel flags and progress of this process's runs, kept off the denoising's thread
        (workers.run_watch), made on first use."""
        with self._building:
            if self._run_watch is None:
                from workers.run_watch import RunWatch

                self._run_watch = RunWatch(self.settings, self.broker)
            return self._run_watch

    def runtime(self) -> DiffusionRuntime:
        """The model of the role the running task serves (`serving_role`): the worker's own, built on
        first use, or the guest model a co-hosting small worker also hosts."""
        from workers.runtime.runtime import DiffusionRuntime

        role = self.serving_role
        with self._building:
            if role is self.role:
                if self._runtime is None:
                    self._runtime = DiffusionRuntime(self.settings, self.role)
                return self._runtime
            if self._guest is None:
                self._guest = DiffusionRuntime(self.settings, role)
            return self._guest

    def video_runtime(self) -> VideoRuntime:
        """The text-to-video pipeline (settings.video_model_name), loaded on this process's first video job:
        apart from the role's image model, which a role switch swaps and this one outlives."""
        with self._building:
            if self._video_runtime is None:
                from workers.runtime.video import VideoRuntime

                self._video_runtime = VideoRuntime(self.settings)
            return self._video_runtime

    def text_embedder(self) -> Any:
        """The embedder of prompts for text-to-text lookup (MiniLM or open_clip's text tower)."""
        with self._building:
            if self._text_embedder is None:
                from workers.runtime.embedders import build_text_embedder

                self._text_embedder = build_text_embedder(self.settings)
            return self._text_embedder

    def query_embedder(self) -> Any:
        """Admission's embedder of prompts, in the lookup's space: the text embedder (NIRVANA) or CLIP's
        (MoDM). In an admit worker with threads, wrapped so that prompts arriving together are embedded
        in one call (workers/runtime/embedders/batching.py, settings.embed_batch_*)."""
        with self._building:
            if self._query_embedder is None:
                settings = self.settings
                image = settings.lookup_mode is LookupMode.TEXT_TO_IMAGE
                embedder = self.image_embedder() if image else self.text_embedder()
                if self.role is Role.ADMIT and settings.admit_threads > 1 and settings.embed_batch_max > 1:
                    from workers.runtime.embedders.batching import BatchingEmbedder

                    embedder = BatchingEmbedder(
                        embedder, max_batch=settings.embed_batch_max, max_wait_ms=settings.embed_batch_wait_ms
                    )
                self._query_embedder = embedder
            return self._query_embedder

    def scorer(self) -> Scorer | None:
        """The quality scorer this worker's images are judged by (core.scoring.Scorer), built once:
        the lab judge where this worker's model is one of the lab's, CLIP score for real models when
        open_clip has real weights, None otherwise (tiny models: nothing judges their images); the
        choice is workers.runtime.quality.configured_scorer's."""
        with self._building:
            if self._scorer is None:
                from workers.runtime.quality import configured_scorer

                self._scorer = configured_scorer(self.settings, self.role, self.image_embedder)
            return self._scorer

    def video_scorer(self) -> VideoScorer | None:
        """The scorer of this worker's videos, chosen once: the lab's video judge (validated at load; the
        video scorer the lab registers, core.plugins) when the video model is lab:video; None otherwise
        (nothing here judges other video models)."""
        with self._building:
            if not self._video_scorer_chosen:
                from workers.runtime.video import LAB_VIDEO_MODEL

                if self.settings.video_model_name == LAB_VIDEO_MODEL:
                    self._video_scorer = plugins.video_scorer(self.settings, LAB_VIDEO_MODEL)
                self._video_scorer_chosen = True
            return self._video_scorer

    def image_embedder(self) -> Any:
        """open_clip: images, and prompts in the image space for text-to-image lookup (MoDM)."""
        with self._building:
            if self._image_embedder is None:
                from workers.runtime.embedders import build_image_embedder

                self._image_embedder = build_image_embedder(self.settings)
            return self._image_embedder


_RUN: ContextVar[str | None] = ContextVar("reprise_run_owner", default=None)  # WorkerContext.run_owner
_SERVING: ContextVar[Role | None] = ContextVar("reprise_serving_role", default=None)  # WorkerContext.serving
ROLE_ENV = "REPRISE_WORKER_ROLE"  # set by workers.bootstrap in the main process, read by its children


@lru_cache(maxsize=1)
def get_context() -> WorkerContext:
    """This process's context: settings from the environment, the role bootstrap set, and a dispatcher
    over the process-wide Celery app (the one workers.tasks registers the tasks on)."""
    return WorkerContext(
        get_settings(),
        Role(os.environ.get(ROLE_ENV, Role.LARGE.value)),
        dispatcher=CeleryDispatcher(get_celery_app()),
    )
