"""Services: where Reprise keeps its data, its Postgres, its Redis broker and its blob store (local
disk or S3). Unset URLs mean the embedded servers that `reprise services up` starts."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Self
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings

from core.redaction import redacted_url
from core.settings.credentials import secret_text
from core.vocabulary import BlobBackend

_MIB = 1024 * 1024
SENTINEL_SCHEME = "sentinel://"


def default_shared_buffers_mb() -> int:
    """A quarter of the machine's physical memory, clamped to 128 MiB .. 8 GiB."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 128
    return max(128, min(8192, total // 4 // _MIB))


class ServiceSettings(BaseSettings):
    """Services: the data directory, Postgres, Redis and the blob store.

    Postgres (with pgvector) holds jobs, the cache index and statistics; Redis is only the Celery
    broker; the blob store holds latents and images. Leave the URLs unset on one machine: `reprise
    services up` then starts an embedded Postgres and Redis under the data directory.
    """

    data_dir: Path = Field(
        Path(".reprise"),
        description="Directory for embedded servers' data, tiny models and local blobs.",
    )
    database_url: SecretStr | None = Field(
        None,
        description="SQLAlchemy URL of a Postgres with pgvector (postgresql+psycopg://...). "
        "Unset: `reprise services up` starts an embedded Postgres 18 + pgvector on pg_port.",
    )
    redis_url: SecretStr | None = Field(
        None,
        description="Redis URL for the Celery broker: redis://, rediss:// or unix://, or Redis Sentinel's "
        "sentinel://host:port[/db][;sentinel://host2:port...] (kombu's form: every sentinel, `;`-separated; "
        "the first one's password and db are the master's). Unset: an embedded redis-server on redis_port.",
    )
    redis_sentinel_master: str = Field(
        "mymaster",
        min_length=1,
        description="The master's name that the sentinels of a sentinel:// redis_url monitor ('mymaster', "
        "the name Redis' Sentinel docs and sentinel.conf use). Unused with any other URL.",
    )
    pg_port: int = Field(54329, ge=1024, le=65535, description="Port of the embedded Postgres.")
    redis_port: int = Field(63799, ge=1024, le=65535, description="Port of the embedded Redis.")
    pg_shared_buffers_mb: int | None = Field(
        None,
        ge=16,
        description="shared_buffers of the embedded Postgres, in MiB. Unset: a quarter of this machine's "
        "memory (Postgres' own advice for a dedicated server), between 128 MiB (its default) and 8 GiB: an "
        "eviction pass over a million entries reads index and heap pages that 128 MiB no longer holds. "
        "Applied when the server starts.",
    )

    blob_backend: BlobBackend = Field(BlobBackend.LOCAL, description="local directory or s3.")
    blob_dir: Path | None = Field(None, description="Local blob directory. Unset: <data_dir>/blobs.")
    s3_bucket: str | None = Field(None, description="S3 bucket (required when blob_backend=s3).")
    s3_prefix: str = Field("reprise/", description="Key prefix inside the bucket.")
    s3_endpoint_url: str | None = Field(None, description="S3 endpoint for MinIO and the like; unset: AWS.")
    s3_region: str = Field("us-east-1", description="S3 region.")
    s3_access_key_id: SecretStr | None = Field(
        None, description="S3 access key; unset: boto3's default chain."
    )
    s3_secret_access_key: SecretStr | None = Field(None, description="S3 secret key; unset: boto3's chain.")
    hostname: str | None = Field(
        None,
        min_length=1,
        pattern=r"^[^@\s]+$",
        description="This machine's name in its workers' names (<role>-<pid>@<host>, Celery's %h) and so in "
        "worker_roles and the decode ring. Unset: the machine's hostname. Workers on several hosts need "
        "blob_backend=s3: a worker with a local blob store refuses to start while workers on another host "
        "answer (docs/operations.md, 'More than one host').",
    )

    @field_validator("database_url")
    @classmethod
    def _check_database_url(cls, secret: SecretStr | None) -> SecretStr | None:
        value = secret_text(secret)
        if value is not None and not value.startswith(("postgresql://", "postgresql+psycopg://")):
            raise ValueError("must be a postgresql+psycopg://user:password@host:port/dbname URL")
        if value is not None and value.startswith("postgresql://"):
            return SecretStr("postgresql+psycopg://" + value.removeprefix("postgresql://"))
        return secret

    @field_validator("redis_url")
    @classmethod
    def _check_redis_url(cls, secret: SecretStr | None) -> SecretStr | None:
        value = secret_text(secret)
        if value is None or value.startswith(("redis://", "rediss://", "unix://")):
            return secret
        if value.startswith(SENTINEL_SCHEME):
            for node in value.split(";"):
                if not node.startswith(SENTINEL_SCHEME) or not urlsplit(node).hostname:
                    raise ValueError(
                        f"{redacted_url(node)!r} is not a sentinel://host:port: list every sentinel as "
                        "sentinel://host:port, separated by ';'"
                    )
            return secret
        raise ValueError(
            "must be a redis://host:port/db URL, or sentinel://host:port[;sentinel://host:port...]"
        )

    @model_validator(mode="after")
    def _check_services(self) -> Self:
        if self.blob_backend is BlobBackend.S3 and not self.s3_bucket:
            raise ValueError("blob_backend=s3 needs REPRISE_S3_BUCKET (the bucket name)")
        if self.pg_port == self.redis_port:
            raise ValueError("pg_port and redis_port must differ: set REPRISE_PG_PORT or REPRISE_REDIS_PORT")
        return self

    @property
    def embedded_database(self) -> bool:
        return self.database_url is None

    @property
    def embedded_redis(self) -> bool:
        return self.redis_url is None

    @property
    def broker_sentinel(self) -> bool:
        """Whether the broker is reached through Redis Sentinel (a sentinel:// redis_url)."""
        return self.broker_url.startswith(SENTINEL_SCHEME)

    @property
    def sqlalchemy_url(self) -> str:
        """The database URL in use: the configured one, or the embedded server's."""
        embedded = f"postgresql+psycopg://reprise@127.0.0.1:{self.pg_port}/reprise"
        return secret_text(self.database_url) or embedded

    @property
    def broker_url(self) -> str:  # the configured Redis, or the embedded one
        return secret_text(self.redis_url) or f"redis://127.0.0.1:{self.redis_port}/0"

    @property
    def worker_host(self) -> str:
        """The host part of this machine's worker names: REPRISE_HOSTNAME, else the machine's hostname."""
        return self.hostname or socket.gethostname()

    @property
    def blob_root(self) -> Path:
        return self.blob_dir if self.blob_dir is not None else self.data_dir / "blobs"

    @property
    def tiny_models_dir(self) -> Path:
        return self.data_dir / "models"
