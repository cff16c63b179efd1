"""Build the configured blob store from settings. The one place that reads blob settings."""

from __future__ import annotations

from core.settings import Settings
from core.settings.credentials import secret_text
from core.vocabulary import BlobBackend
from db.blobs.base import BlobStore
from db.blobs.local import LocalBlobStore
from db.blobs.s3 import S3BlobStore


def blob_store_from_settings(settings: Settings) -> BlobStore:
    """The store REPRISE_BLOB_BACKEND names: a LocalBlobStore at settings.blob_root, or an
    S3BlobStore for the REPRISE_S3_* settings. Makes no network call: run `store.check()`
    at process start to fail fast on a missing bucket or an unwritable directory."""
    if settings.blob_backend is BlobBackend.S3:
        return S3BlobStore(
            bucket=settings.s3_bucket or "",  # "" raises BlobStoreMisconfigured naming the variable
            prefix=settings.s3_prefix,
            endpoint_url=settings.s3_endpoint_url,
            region=settings.s3_region,
            access_key_id=secret_text(settings.s3_access_key_id),
            secret_access_key=secret_text(settings.s3_secret_access_key),
        )
    return LocalBlobStore(settings.blob_root)
