"""The Python client of Reprise: `Client`, `AsyncClient`, the typed `Generation`, the typed errors,
the `RetryPolicy` both clients follow, `verify_webhook`, and the typed webhook deliveries
(`Client.deliveries(status="failed")`, `Client.redeliver`)."""

from reprise_client.client import AsyncClient, Client
from reprise_client.deliveries import Redelivery, WebhookDelivery, WebhookDeliveryPage
from reprise_client.errors import (
    ApiError,
    ConfigurationError,
    ConnectionFailed,
    Forbidden,
    Gone,
    InvalidRequest,
    NotFound,
    RateLimited,
    RepriseError,
    ServerError,
    ServiceUnavailable,
    Unauthorized,
    WaitTimeout,
)
from reprise_client.models import Generation, GenerationPage, OnDeadline, Priority, Progress, QueuePlace
from reprise_client.retry import RetryPolicy
from reprise_client.webhooks import verify_webhook

__all__ = [
    "ApiError",
    "AsyncClient",
    "Client",
    "ConfigurationError",
    "ConnectionFailed",
    "Forbidden",
    "Generation",
    "GenerationPage",
    "Gone",
    "InvalidRequest",
    "NotFound",
    "OnDeadline",
    "Priority",
    "Progress",
    "QueuePlace",
    "RateLimited",
    "Redelivery",
    "RepriseError",
    "RetryPolicy",
    "ServerError",
    "ServiceUnavailable",
    "Unauthorized",
    "WaitTimeout",
    "WebhookDelivery",
    "WebhookDeliveryPage",
    "verify_webhook",
]
