"""The dead letter on the live stack: a job whose webhook endpoint is down spends its attempts (the
stack's schedule is 0, 1, 1 s), its delivery is listed as failed through the API with its attempts and
last error, and once the endpoint is up a redelivery sends it, the same webhook-id, and the delivery
reads delivered."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from reprise_client import Client, WebhookDelivery

from db.tenants import TenantCredentials
from tests.e2e.conftest import Stack, free_port, make_tenant

pytestmark = pytest.mark.integration

PROMPT = "a lighthouse on a cliff at dusk, oil painting"


@pytest.fixture
def tenant(stack: Stack) -> TenantCredentials:
    return make_tenant(stack.settings, f"dead-letter-{uuid.uuid4().hex[:8]}")


def _until(read: Any, done: Any, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = read()
        if done(value) or time.monotonic() > deadline:
            return value
        time.sleep(0.5)


class Endpoint:
    """A receiver on a port that nothing listens on until `start`; keeps the webhook-ids it was sent."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/hook"
        self.received: list[str] = []
        self.server: ThreadingHTTPServer | None = None

    def start(self) -> None:
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", "0")))
                received.append(self.headers["webhook-id"])
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    down = Endpoint()
    yield down
    if down.server is not None:
        down.server.shutdown()
        down.server.server_close()


def test_a_dead_letter_is_listed_and_redelivered_on_the_live_stack(
    stack: Stack, tenant: TenantCredentials, endpoint: Endpoint
) -> None:
    with Client(stack.base_url, tenant.api_key) as reprise:  # nothing listens yet: attempts are refused
        job = reprise.create(PROMPT, seed=5, webhook=endpoint.url, webhook_events_filter=["completed"])
        assert reprise.wait(job.id, timeout=180).status == "succeeded"

        def failed() -> list[WebhookDelivery]:
            return list(reprise.deliveries(status="failed", generation=job.id))

        [dead] = _until(failed, lambda found: len(found) == 1)
        assert (dead.attempts, dead.last_status_code, dead.event) == (3, None, "generation.completed")
        assert dead.last_error is not None and "ConnectError" in dead.last_error

        endpoint.start()
        assert reprise.redeliver(dead.id).ids == [dead.id]
        after = _until(lambda: reprise.delivery(dead.id), lambda d: d.status == "delivered")
        assert (after.status, after.attempts, after.last_status_code) == ("delivered", 4, 204)
    assert endpoint.received == [dead.id]  # the same webhook-id, once
