"""The Python client of Reprise: `Client`, `AsyncClient`, the typed `Generation`, `verify_webhook`."""

from reprise_client.client import AsyncClient, Client
from reprise_client.errors import ApiError, RepriseError, WaitTimeout
from reprise_client.models import Generation, GenerationPage, Progress, QueuePlace
from reprise_client.webhooks import verify_webhook

__all__ = [
    "ApiError",
    "AsyncClient",
    "Client",
    "Generation",
    "GenerationPage",
    "Progress",
    "QueuePlace",
    "RepriseError",
    "WaitTimeout",
    "verify_webhook",
]
