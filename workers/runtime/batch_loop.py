"""The worker loop of step-level batching: the jobs a GPU worker's task threads run at the same time
share one UNet call per denoising step (workers.runtime.batching).

A GPU worker with REPRISE_MAX_BATCH > 1 runs that many task threads (workers.bootstrap). Each thread
prepares its job as a BatchMember (prompt encoding, seeded noise or the cached latent: its own work, in
its own thread), hands it to the runtime's BatchLoop and waits. The loop is a thread of its own that
lives while there is work: between two steps it admits the members that arrived (a miss joins at step
0, a resumed hit at its step k), runs one step of every member in one UNet call, and hands each member
it retired (finished, canceled, failed) back to its thread, which decodes and stores the result while
the others go on. So a job waits for no other job to finish, and the UNet sees as many jobs as the
worker holds: continuous batching, one denoising step per iteration, as Orca and vLLM do it for tokens.

Members share a UNet call only at one latent shape, dtype and device (DenoisingBatch.admit); arrivals
are admitted in order, and one of another shape waits until the batch has drained (the first in line
is never passed over, so no shape starves). A failure of the UNet call itself (out of memory, a broken
model) fails every member of that step, each in its own thread; the loop then starts afresh. Whatever
else stops the loop (a new batch that cannot be made) hands every member it holds back with the error,
so no task thread waits on a loop that is gone; a telemetry write that fails (a full disk) is logged and
the loop goes on.

A run's deadline and its lease are enforced here through each member's should_stop, asked before every
step: a run past its deadline, or whose lease was lost, retires at its next step (workers.lease,
workers.run_clock). A UNet call that never returns holds the loop itself: there the run's lease stops
being renewed once the step has hung run_stall_s, so its job is sent to another worker, and the worker is
not alive until it is replaced (workers.liveness).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable

from workers import metrics
from workers.runtime.batching import BatchMember, DenoisingBatch
from workers.runtime.denoising import DenoiseRun

log = logging.getLogger(__name__)


class BatchLoop:
    """Runs the members its callers hand it in one DenoisingBatch, stepped by a thread of its own.

    new_batch makes an empty batch on the hosted model (called when the loop starts from empty, so a
    role switch between batches is picked up). `run` blocks its caller until its member retires.
    """

    def __init__(self, new_batch: Callable[[], DenoisingBatch], *, role: str) -> None:
        self._new_batch = new_batch
        self._role = role
        self._lock = threading.Condition()
        self._arrivals: deque[BatchMember] = deque()
        self._retired: dict[int, threading.Event] = {}
        self._thread: threading.Thread | None = None
        self._batch: DenoisingBatch | None = None  # the members being stepped (the loop's thread only)
        self.steps_run = 0  # UNet calls made, every batch together
        self.largest_batch = 0  # the most members one call ran

    @property
    def busy(self) -> bool:
        """Whether a member is waiting or running."""
        with self._lock:
            return bool(self._arrivals) or self._thread is not None

    def run(self, member: BatchMember) -> DenoiseRun:
        """Run `member` to its end in the shared batch; its result, or its error (GenerationCanceled,
        or what failed its step) raised in the caller's thread."""
        retired = threading.Event()
        with self._lock:
            self._retired[id(member)] = retired
            self._arrivals.append(member)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name=f"batch-loop-{self._role}", daemon=True
                )
                self._thread.start()
        retired.wait()
        return member.result()

    def _loop(self) -> None:
        """Step the batch while there is work. Whatever stops the loop hands every member it holds back
        with the error: a caller is never left waiting on a loop that is gone."""
        try:
            self._step_while_busy()
        except BaseException as error:
            log.exception("the batch loop of the %s model stopped", self._role)
            self._fail_all(error)
            raise

    def _step_while_busy(self) -> None:
        while True:
            with self._lock:
                if self._batch is None or not len(self._batch):
                    if not self._arrivals:
                        self._thread = None  # the loop ends with its work; the next run starts another
                        self._batch = None
                        return
                    if self._batch is None:
                        self._batch = self._new_batch()
                batch = self._batch
                self._admit(batch)
            try:
                step = batch.step()
            except Exception as error:  # the UNet call failed: every member of it fails with it
                log.exception("a batched step of %d jobs failed", len(batch))
                for member in batch.members:
                    member.error = error
                    self._hand_back(member)
                self._batch = None
                continue
            if step.size:
                self._count(step.size)
            for member in step.retired:
                self._hand_back(member)
            if not len(batch):
                self._batch = None  # an empty batch holds no model: a role switch may come now

    def _count(self, size: int) -> None:
        """Book a step's size. Telemetry must not stop the serving: its samples live in files
        (prometheus_client's multiprocess mode), and a full disk fails the write that grows one."""
        self.steps_run += 1
        self.largest_batch = max(self.largest_batch, size)
        try:
            metrics.BATCH_SIZE.labels(role=self._role).observe(size)
        except OSError as error:
            log.warning("a batch size was not recorded: %s", error)

    def _fail_all(self, error: BaseException) -> None:
        """Hand every member held (in the batch and waiting) back with `error`; the next run starts a
        new loop."""
        with self._lock:
            held = [*(self._batch.members if self._batch is not None else ()), *self._arrivals]
            self._arrivals.clear()
            self._batch = None
            self._thread = None
        for member in held:
            member.error = error if isinstance(error, Exception) else RuntimeError(str(error))
            self._hand_back(member)

    def _admit(self, batch: DenoisingBatch) -> None:
        """Move arrivals into the batch, in order, while they fit (the lock is held)."""
        while self._arrivals and batch.free_slots and batch.fits(self._arrivals[0]):
            batch.admit(self._arrivals.popleft())

    def _hand_back(self, member: BatchMember) -> None:
        with self._lock:
            retired = self._retired.pop(id(member), None)
        if retired is not None:
            retired.set()
