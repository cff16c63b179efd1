"""A tenant's webhook deliveries (/v1/webhook-deliveries): the typed delivery, its pages, and the
client methods that list them and redeliver failed ones (the dead letter), mixed into Client and
AsyncClient."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx

from reprise_client.errors import api_error
from reprise_client.retry import parse_retry_after

DELIVERY_STATUSES = frozenset({"delivered", "pending", "failed"})


@dataclass(frozen=True)
class WebhookDelivery:
    """One event of one job and its attempts: `id` is the webhook-id its receiver saw; `status` is
    delivered, pending (a next attempt is scheduled) or failed (the dead letter)."""

    id: str
    generation_id: str
    event: str
    url: str
    status: str
    attempts: int
    last_status_code: int | None
    last_error: str | None
    last_attempt_at: str
    next_attempt_at: str | None

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> WebhookDelivery:
        return cls(
            id=str(body["id"]),
            generation_id=str(body["generation_id"]),
            event=str(body["event"]),
            url=str(body["url"]),
            status=str(body["status"]),
            attempts=int(body["attempts"]),
            last_status_code=body.get("last_status_code"),
            last_error=body.get("last_error"),
            last_attempt_at=str(body["last_attempt_at"]),
            next_attempt_at=body.get("next_attempt_at"),
        )


@dataclass(frozen=True)
class WebhookDeliveryPage:
    results: list[WebhookDelivery]
    next: str | None


@dataclass(frozen=True)
class Redelivery:
    """The deliveries queued for one more attempt; `more`: failed ones of the range were left."""

    ids: list[str]
    more: bool


def _list_params(status: str | None, generation: str | None, limit: int) -> dict[str, str | int]:
    if status is not None and status not in DELIVERY_STATUSES:
        raise ValueError(f"status is one of {', '.join(sorted(DELIVERY_STATUSES))}, not {status!r}")
    params: dict[str, str | int] = {"limit": limit}
    if status is not None:
        params["status"] = status
    if generation is not None:
        params["generation"] = generation
    return params


def _page(response: httpx.Response) -> WebhookDeliveryPage:
    body = _ok(response).json()
    return WebhookDeliveryPage(
        [WebhookDelivery.from_json(item) for item in body["results"]], body.get("next")
    )


def _redelivery(response: httpx.Response) -> Redelivery:
    body = _ok(response).json()
    return Redelivery([str(each) for each in body["ids"]], bool(body["more"]))


def _ok(response: httpx.Response) -> httpx.Response:
    """The response when it is not an error; the typed ApiError with its problem+json otherwise."""
    if response.status_code >= 400:
        try:
            problem = response.json()
        except ValueError:
            problem = {"detail": response.text}
        raise api_error(
            response.status_code,
            problem if isinstance(problem, dict) else {"detail": problem},
            retry_after=parse_retry_after(response.headers.get("retry-after")),
        )
    return response


def _range(since: datetime, until: datetime | None) -> dict[str, str]:
    return {"since": since.isoformat(), **({"until": until.isoformat()} if until is not None else {})}


class WebhookDeliveries:
    """Client's webhook delivery methods."""

    def _request(self, method: str, url: str, *, retry: bool = True, **kwargs: Any) -> httpx.Response:
        raise NotImplementedError  # Client's

    def delivery_page(
        self,
        *,
        status: str | None = None,
        generation: str | None = None,
        limit: int = 20,
        cursor_url: str | None = None,
    ) -> WebhookDeliveryPage:
        if cursor_url:
            return _page(self._request("GET", cursor_url))
        params = _list_params(status, generation, limit)
        return _page(self._request("GET", "/v1/webhook-deliveries", params=params))

    def deliveries(
        self, *, status: str | None = None, generation: str | None = None, limit: int = 20
    ) -> Iterator[WebhookDelivery]:
        """Every delivery (status="failed": the dead letter), the latest attempt first, page after page."""
        page = self.delivery_page(status=status, generation=generation, limit=limit)
        while True:
            yield from page.results
            if page.next is None:
                return
            page = self.delivery_page(cursor_url=page.next)

    def delivery(self, delivery_id: str) -> WebhookDelivery:
        return WebhookDelivery.from_json(
            _ok(self._request("GET", f"/v1/webhook-deliveries/{delivery_id}")).json()
        )

    def redeliver(self, delivery_id: str) -> Redelivery:
        """Queue one more attempt of a failed delivery (Conflict-like ApiError 409 otherwise)."""
        return _redelivery(self._request("POST", f"/v1/webhook-deliveries/{delivery_id}/redeliver"))

    def redeliver_range(self, since: datetime, until: datetime | None = None) -> Redelivery:
        """Queue one more attempt of every failed delivery whose latest attempt fell in [since, until)."""
        return _redelivery(
            self._request("POST", "/v1/webhook-deliveries/redeliver", params=_range(since, until))
        )


class AsyncWebhookDeliveries:
    """AsyncClient's webhook delivery methods."""

    async def _request(self, method: str, url: str, *, retry: bool = True, **kwargs: Any) -> httpx.Response:
        raise NotImplementedError  # AsyncClient's

    async def delivery_page(
        self,
        *,
        status: str | None = None,
        generation: str | None = None,
        limit: int = 20,
        cursor_url: str | None = None,
    ) -> WebhookDeliveryPage:
        if cursor_url:
            return _page(await self._request("GET", cursor_url))
        params = _list_params(status, generation, limit)
        return _page(await self._request("GET", "/v1/webhook-deliveries", params=params))

    async def deliveries(
        self, *, status: str | None = None, generation: str | None = None, limit: int = 20
    ) -> AsyncIterator[WebhookDelivery]:
        page = await self.delivery_page(status=status, generation=generation, limit=limit)
        while True:
            for delivery in page.results:
                yield delivery
            if page.next is None:
                return
            page = await self.delivery_page(cursor_url=page.next)

    async def delivery(self, delivery_id: str) -> WebhookDelivery:
        response = await self._request("GET", f"/v1/webhook-deliveries/{delivery_id}")
        return WebhookDelivery.from_json(_ok(response).json())

    async def redeliver(self, delivery_id: str) -> Redelivery:
        return _redelivery(await self._request("POST", f"/v1/webhook-deliveries/{delivery_id}/redeliver"))

    async def redeliver_range(self, since: datetime, until: datetime | None = None) -> Redelivery:
        params = _range(since, until)
        return _redelivery(await self._request("POST", "/v1/webhook-deliveries/redeliver", params=params))
