"""The API's intake: a submission is one INSERT and one admit message, on asyncio.

Why it batches: a job's INSERT bumps its tenant's in-flight counter (the trigger of migration 0004), so
a tenant's submissions hold its row from the INSERT to the end of the COMMIT, WAL flush included
(3 ms on this project's test machine). One commit per submission caps a tenant at a few hundred
submissions a second however fast the API is. Here submissions that arrive while a commit is under way
wait for the next one, and go together: one pipelined transaction of their INSERTs (db.job_intake),
then one Redis round trip of their admit messages (jobs.dispatch.AdmitPublisher). Nothing waits on a
timer: a lone submission is written at once.

The guarantees: a job is answered only once committed; its admission is queued only once committed, so
a worker never looks for a row that is not there; a message that cannot be sent leaves the job
'starting' for the reconciler (jobs.passes.reconcile) to send again.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

import psycopg
from redis.asyncio.retry import Retry
from redis.backoff import ConstantBackoff

from core.errors import DatabaseUnavailable
from core.settings import Settings
from core.vocabulary import Priority
from db.job_intake import Outcome, PendingJob, Written, insert_jobs
from db.jobs import NewJob
from jobs.broker import async_broker_client
from jobs.dispatch import AdmitPublisher
from jobs.queues import Queue, step_lists

log = logging.getLogger(__name__)

MAX_BATCH = 256  # jobs per transaction: a few milliseconds of work, whatever the backlog
CONNECT_TIMEOUT_S = 5
# A connection idle longer than this is pinged before use: after Postgres restarts, the first batch on
# the old connection would fail (a 503 once Postgres is back, chaos `postgres`); busy, no ping is paid.
PING_IDLE_S = 1.0
BROKER_TIMEOUT_S = 1.0  # as the API's other broker questions: fail fast, the reconciler sends it later
BACKLOG_TTL_S = 0.25  # the admit queue's length is asked at most this often: one LLEN per period


@dataclass(frozen=True, slots=True)
class Submitted:
    """What became of one submission: its outcome, its row's created_at when created, and whether its
    admission was queued (False: the reconciler will queue it)."""

    job_id: uuid.UUID
    written: Written
    queued: bool = False

    @property
    def outcome(self) -> Outcome:
        return self.written.outcome


class JobIntake:
    """Writes submitted jobs a batch per commit and queues their admissions. One per event loop: it
    holds one Postgres connection (reopened after a failure) and a Redis connection pool."""

    def __init__(self, settings: Settings, publisher: AdmitPublisher | None = None) -> None:
        self.dsn = settings.sqlalchemy_url.replace("postgresql+psycopg://", "postgresql://", 1)
        self.publisher = publisher or AdmitPublisher(
            async_broker_client(
                settings,
                socket_timeout=BROKER_TIMEOUT_S,
                socket_connect_timeout=BROKER_TIMEOUT_S,
                retry=Retry(ConstantBackoff(0.2), 2),  # as send_task's PUBLISH_RETRY_POLICY
            ),
        )
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._used_at = 0.0  # when the connection was last handed out (time.monotonic)
        self._pending: list[tuple[PendingJob, asyncio.Future[Submitted]]] = []
        self._writer: asyncio.Task[None] | None = None
        self._backlog: int | None = None
        self._backlog_at = -BACKLOG_TTL_S

    async def submit(self, tenant_id: uuid.UUID, new: NewJob) -> Submitted:
        """Write the job (committed when this returns) and queue its admission if it was created.
        Raises DatabaseUnavailable when it could not be written, or what its INSERT raised."""
        pending = PendingJob(tenant_id=tenant_id, new=new, job_id=uuid.uuid4())
        done: asyncio.Future[Submitted] = asyncio.get_running_loop().create_future()
        self._pending.append((pending, done))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_all())
        # shield: a client that hangs up does not cancel the batch, whose other jobs are answered
        return await asyncio.shield(done)

    async def admit_backlog(self) -> int | None:
        """The admit queue's length, asked of Redis at most every BACKLOG_TTL_S; None when unreachable."""
        now = asyncio.get_running_loop().time()
        if now - self._backlog_at >= BACKLOG_TTL_S:
            self._backlog_at = now
            try:
                pipe = self.publisher.client.pipeline(transaction=False)
                for name in step_lists(Queue.ADMIT.value):  # every priority step's list
                    pipe.llen(name)
                self._backlog = sum(int(length) for length in await pipe.execute())
            except Exception:  # an unreachable broker is no reason to refuse work: Postgres holds it
                self._backlog = None
        return self._backlog

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()
        await self.publisher.close()

    async def _write_all(self) -> None:
        while self._pending:
            batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
            try:
                answers = await self._write([pending for pending, _ in batch])
            except Exception as error:  # handed to every waiter of the batch
                answers = [error] * len(batch)
            for (_, done), answer in zip(batch, answers, strict=True):
                if done.done():
                    continue
                if isinstance(answer, Exception):
                    done.set_exception(answer)
                else:
                    done.set_result(answer)

    async def _write(self, jobs: list[PendingJob]) -> list[Submitted | Exception]:
        written = await self._insert(jobs)
        created = [
            job
            for job, w in zip(jobs, written, strict=True)
            if isinstance(w, Written) and w.outcome is Outcome.CREATED
        ]
        queued = await self._publish(created)
        created_ids = {job.job_id for job in created}
        return [
            w
            if isinstance(w, Exception)
            else Submitted(job.job_id, w, queued=queued and job.job_id in created_ids)
            for job, w in zip(jobs, written, strict=True)
        ]

    async def _insert(self, jobs: list[PendingJob]) -> list[Written | Exception]:
        conn = await self._connection()
        try:
            return list(await insert_jobs(conn, jobs))
        except psycopg.OperationalError as error:
            await self._drop_connection()
            raise DatabaseUnavailable(str(error)) from error
        except psycopg.Error as error:
            if len(jobs) == 1:
                return [error]
        # One job's INSERT failed and took the batch's transaction with it: write each alone, so that
        # only that job fails.
        return [(await self._insert([job]))[0] for job in jobs]

    async def _connection(self) -> psycopg.AsyncConnection[Any]:
        if (
            self._conn is not None
            and not self._conn.closed
            and time.monotonic() - self._used_at > PING_IDLE_S
        ):
            try:  # as SQLAlchemy's pool_pre_ping: a connection from before a Postgres restart is dead
                await self._conn.execute("SELECT 1")
                await self._conn.rollback()
            except psycopg.Error:
                await self._drop_connection()
        if self._conn is None or self._conn.closed:
            try:
                self._conn = await psycopg.AsyncConnection.connect(
                    self.dsn, connect_timeout=CONNECT_TIMEOUT_S
                )
            except psycopg.OperationalError as error:
                raise DatabaseUnavailable(str(error)) from error
        self._used_at = time.monotonic()
        return self._conn

    async def _drop_connection(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await conn.close()

    async def _publish(self, jobs: list[PendingJob]) -> bool:
        if not jobs:
            return True
        try:
            await self.publisher.admit([j.job_id for j in jobs], [Priority(j.new.priority) for j in jobs])
        except Exception:  # the broker is down: the jobs stay 'starting' and the reconciler sends them
            log.warning(
                "could not enqueue admission of %d jobs; the reconciler will", len(jobs), exc_info=True
            )
            return False
        return True
