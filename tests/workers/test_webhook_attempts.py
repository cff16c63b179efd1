"""A webhook attempt's bounds (workers.webhook_http): a wall-clock deadline a trickling or hanging
receiver cannot stretch, a cap on the answer read; and its record (db.webhooks.claim_attempt): claimed
before it is sent, once across concurrent consumers, counted when its worker dies mid-attempt; and the
per-endpoint slots (workers.endpoint_slots) that defer rather than wait. Real receivers on 127.0.0.1,
the real database and Redis; and the breaker (workers.endpoint_pause) that stops sending to an endpoint
that does not answer, but its probe."""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
import redis
from sqlalchemy import select

from core.params import GenerationParams
from core.settings import Settings
from core.vocabulary import WebhookEvent
from db.engine import session_scope
from db.jobs import NewJob
from db.models import WebhookDelivery
from db.tenants import TenantCredentials
from db.webhooks import INTERRUPTED, claim_attempt, due_retries, waiting_at
from jobs.celery_app import make_celery_app
from jobs.dispatch import CeleryDispatcher
from jobs.policies.webhook_recovery import url_prefix
from jobs.queues import Queue
from jobs.webhooks import message_id
from tests.support.jobs import add_job
from workers.endpoint_pause import EndpointPause
from workers.endpoint_slots import EndpointSlots
from workers.webhook_delivery import ENDPOINT_BUSY, DeliveryOutcome, deliver_webhook, run_delivery

pytestmark = pytest.mark.integration

DEADLINE_S = 1.0


@dataclass
class RawReceiver:
    """A TCP server on 127.0.0.1 that answers each connection as `mode` says: "ok" (204 at once),
    "slow-ok" (204 after 0.5 s), "trickle" (200, then a byte of body every 0.2 s forever), "hang"
    (reads the request, answers nothing), "huge" (200 with a 100 MB body, written as fast as read)."""

    mode: str
    url: str = ""
    requests: list[bytes] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)


def _read_request(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    while len(body) < length:
        body += conn.recv(65536)
    return head


def _answer(state: RawReceiver, conn: socket.socket) -> None:
    with conn:
        state.requests.append(_read_request(conn))
        try:
            if state.mode in ("ok", "slow-ok"):
                time.sleep(0.5 if state.mode == "slow-ok" else 0)
                conn.sendall(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n")
            elif state.mode == "trickle":
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 100000\r\n\r\n")
                while not state.stop.wait(0.2):
                    conn.sendall(b"x")
            elif state.mode == "hang":
                state.stop.wait(30)
            elif state.mode == "huge":
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 100000000\r\n\r\n")
                chunk = b"x" * 65536
                for _ in range(100_000_000 // len(chunk)):
                    conn.sendall(chunk)
        except OSError:  # the deliverer cut the connection: what the test wants
            pass


@pytest.fixture
def raw_receiver() -> Iterator[Callable[[str], RawReceiver]]:
    servers: list[tuple[socket.socket, RawReceiver]] = []

    def start(mode: str) -> RawReceiver:
        state = RawReceiver(mode=mode)
        server = socket.create_server(("127.0.0.1", 0))
        server.settimeout(0.1)

        def serve() -> None:
            while not state.stop.is_set():
                try:
                    conn, _ = server.accept()
                except TimeoutError:
                    continue
                except OSError:
                    return
                threading.Thread(target=_answer, args=(state, conn), daemon=True).start()

        threading.Thread(target=serve, daemon=True).start()
        state.url = f"http://127.0.0.1:{server.getsockname()[1]}/hooks"
        servers.append((server, state))
        return state

    yield start
    for server, state in servers:
        state.stop.set()
        server.close()


@pytest.fixture
def bounded(api_settings: Settings) -> Settings:
    return api_settings.model_copy(
        update={
            "webhook_retry_delays_s": [0.0, 0.5, 60.0],
            "webhook_attempt_deadline_s": DEADLINE_S,
            "webhook_timeout_s": 10.0,  # each read's timeout alone would let a trickle run for ever
            "webhook_response_max_bytes": 65536,
        }
    )


@pytest.fixture
def job_to(bounded: Settings, tenant: TenantCredentials) -> Callable[[str], uuid.UUID]:
    def build(url: str) -> uuid.UUID:
        with session_scope(bounded) as session:
            new = NewJob(
                GenerationParams(prompt="a heron", seed=1),
                webhook_url=url,
                webhook_events_filter=["completed"],
            )
            job = add_job(session, tenant.tenant_id, new)
            job.status, job.started_at, job.finished_at = "succeeded", datetime.now(UTC), datetime.now(UTC)
            return job.id

    return build


def rows(settings: Settings, job_id: uuid.UUID) -> list[WebhookDelivery]:
    with session_scope(settings) as session:
        found = session.scalars(
            select(WebhookDelivery).where(WebhookDelivery.job_id == job_id).order_by(WebhookDelivery.attempt)
        ).all()
        session.expunge_all()
        return list(found)


@pytest.mark.parametrize("mode", ["trickle", "hang"])
def test_a_receiver_that_trickles_or_hangs_is_cut_at_the_deadline(
    mode: str,
    raw_receiver: Callable[[str], RawReceiver],
    bounded: Settings,
    job_to: Callable[[str], uuid.UUID],
) -> None:
    receiver = raw_receiver(mode)
    job_id = job_to(receiver.url)
    started = time.monotonic()
    outcome = deliver_webhook(settings=bounded, job_id=job_id, event=WebhookEvent.COMPLETED)
    took = time.monotonic() - started
    assert took < DEADLINE_S + 1.0, f"{mode}: the attempt ran {took:.1f} s past a {DEADLINE_S} s deadline"
    assert not outcome.delivered and outcome.retry_in == 0.5
    assert outcome.error is not None and "deadline" in outcome.error
    [row] = rows(bounded, job_id)
    assert (row.attempt, row.status_code, row.error) == (1, None, outcome.error)


def test_a_huge_answer_is_read_up_to_the_cap_and_its_status_decides(
    raw_receiver: Callable[[str], RawReceiver], bounded: Settings, job_to: Callable[[str], uuid.UUID]
) -> None:
    receiver = raw_receiver("huge")
    job_id = job_to(receiver.url)
    started = time.monotonic()
    outcome = deliver_webhook(settings=bounded, job_id=job_id, event=WebhookEvent.COMPLETED)
    assert outcome.delivered and outcome.status_code == 200
    assert time.monotonic() - started < DEADLINE_S  # 100 MB were not read


def test_two_consumers_send_one_attempt_once(
    raw_receiver: Callable[[str], RawReceiver], bounded: Settings, job_to: Callable[[str], uuid.UUID]
) -> None:
    receiver = raw_receiver("slow-ok")  # both deliverers are in flight at once
    job_id = job_to(receiver.url)
    outcomes = []
    barrier = threading.Barrier(2)

    def consume() -> None:
        barrier.wait()
        outcomes.append(deliver_webhook(settings=bounded, job_id=job_id, event=WebhookEvent.COMPLETED))

    consumers = [threading.Thread(target=consume) for _ in range(2)]
    for consumer in consumers:
        consumer.start()
    for consumer in consumers:
        consumer.join(timeout=10)
    assert len(receiver.requests) == 1
    assert sorted(o.delivered for o in outcomes) == [False, True]
    assert [row.attempt for row in rows(bounded, job_id)] == [1]


def test_a_killed_attempt_is_counted_and_its_successor_scheduled(
    raw_receiver: Callable[[str], RawReceiver], bounded: Settings, job_to: Callable[[str], uuid.UUID]
) -> None:
    receiver = raw_receiver("ok")
    job_id = job_to(receiver.url)
    msg_id = message_id(job_id, WebhookEvent.COMPLETED)
    now = datetime.now(UTC)
    with session_scope(bounded) as session:  # what a worker killed after its claim leaves behind
        claim_attempt(
            session,
            job_id=job_id,
            message_id=msg_id,
            event=WebhookEvent.COMPLETED.value,
            url=receiver.url,
            attempt=1,
            next_attempt_at=now + timedelta(seconds=1.5),
        )
    again = deliver_webhook(settings=bounded, job_id=job_id, event=WebhookEvent.COMPLETED, attempt=1)
    assert again.skipped == "attempt 1 was already made" and receiver.requests == []
    [row] = rows(bounded, job_id)
    assert (row.status_code, row.error) == (None, INTERRUPTED)
    with session_scope(bounded) as session:  # the reconciler sends attempt 2 once it is overdue
        due = due_retries(session, now=now + timedelta(minutes=10), long_wait_s=60, overdue_s=60)
        # and no endpoint's recovery sends it early: it is no failure waiting for its endpoint
        waiting = waiting_at(session, url_prefix=url_prefix(receiver.url), after=now)
    assert (job_id, WebhookEvent.COMPLETED.value, 1) in due
    assert [w for w in waiting if w.job_id == job_id] == []


def test_an_endpoint_whose_slots_are_taken_is_deferred_not_waited_for(
    raw_receiver: Callable[[str], RawReceiver],
    bounded: Settings,
    job_to: Callable[[str], uuid.UUID],
    broker: redis.Redis,
) -> None:
    receiver = raw_receiver("ok")
    job_id = job_to(receiver.url)
    settings = bounded.model_copy(update={"webhook_endpoint_concurrency": 1})
    slots = EndpointSlots(broker, capacity=1, deadline_s=DEADLINE_S)
    with slots.hold(receiver.url) as taken:  # another delivery to the endpoint is in flight
        assert taken
        outcome = run_delivery(
            settings=settings,
            job_id=job_id,
            event=WebhookEvent.COMPLETED,
            dispatcher=CeleryDispatcher(make_celery_app(settings)),
            broker=broker,
        )
    assert outcome.busy and outcome.skipped == ENDPOINT_BUSY and receiver.requests == []
    assert rows(settings, job_id) == []  # nothing claimed: the same attempt comes back
    queued = [json.loads(raw)["headers"] for raw in broker.lrange(Queue.WEBHOOKS.value, 0, -1)]
    mine = [h for h in queued if str(job_id) in h["argsrepr"]]
    assert [h["argsrepr"] for h in mine] == [repr([str(job_id), "generation.completed", 1])]
    assert mine[0]["eta"] is not None
    assert slots.in_use(receiver.url) == 0  # released at the block's end
    second = deliver_webhook(settings=settings, job_id=job_id, event=WebhookEvent.COMPLETED, slots=slots)
    assert second.delivered and len(receiver.requests) == 1


def test_an_endpoint_that_keeps_timing_out_is_paused_and_probed(
    raw_receiver: Callable[[str], RawReceiver],
    bounded: Settings,
    job_to: Callable[[str], uuid.UUID],
    broker: redis.Redis,
) -> None:
    receiver = raw_receiver("hang")
    settings = bounded.model_copy(update={"webhook_retry_delays_s": [0.0] * 5})
    pause = EndpointPause(broker, after=2, ttl_s=60)
    job_id = job_to(receiver.url)

    def attempt(number: int, *, probe: bool = False) -> DeliveryOutcome:
        return deliver_webhook(
            settings=settings,
            job_id=job_id,
            event=WebhookEvent.COMPLETED,
            attempt=number,
            pause=pause,
            probe=probe,
        )

    for number in (1, 2):  # two attempts cut at the deadline open the breaker
        assert "deadline" in (attempt(number).error or "")
    pause.observe(receiver.url, answered=False, timed_out=False)  # a refused connection counts nothing
    third = attempt(3)
    assert (third.error or "").startswith("paused") and third.retry_in == 0.0
    assert len(receiver.requests) == 2  # nothing sent to the paused endpoint
    assert [row.error for row in rows(settings, job_id)][-1] == third.error  # yet the attempt counts

    receiver.mode = "ok"  # the endpoint answers again: the reconciler's probe finds it
    assert attempt(4, probe=True).delivered and len(receiver.requests) == 3
    assert not pause.paused(receiver.url)  # any answer closes the breaker
