"""The Python client of Reprise: `Client`, `AsyncClient`, the typed `Generation`, the typed errors,
the `RetryPolicy` both clients follow, and `verify_webhook`."""

from reprise_client.client import AsyncClient, Client
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
from reprise_client.models import Generation, GenerationPage, Progress, QueuePlace
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
    "Progress",
    "QueuePlace",
    "RateLimited",
    "RepriseError",
    "RetryPolicy",
    "ServerError",
    "ServiceUnavailable",
    "Unauthorized",
    "WaitTimeout",
    "verify_webhook",
]
