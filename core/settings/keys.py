"""Server keys: the keys only the server holds, read from the environment. One signs output links
(jobs/output_links.py); the others encrypt tenants' webhook secrets at rest (db/secret_box.py), so that a
database dump or backup holds no secret that could sign a webhook. Unset, a process on one machine uses
a key it keeps under its data directory (core/server_keys.py)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode

from core.settings.credentials import PLACEHOLDER

# At least 32 characters: RFC 2104 asks that an HMAC key be no shorter than the hash's output (SHA-256's
# 32 bytes), and `openssl rand -base64 32` writes 44.
MIN_KEY_CHARS = 32


class KeySettings(BaseSettings):
    """Server keys: the output links' signing key and the keys that encrypt webhook secrets at rest.

    Every process that signs or checks a link (the API, the webhook workers) or reads a webhook secret
    (the API, the workers, `reprise keys`, migrations) needs the same keys: set them in the environment
    of every host. Left unset, each process uses a key generated once under its data directory
    (<data_dir>/keys/), which serves one machine only.
    """

    output_link_key: SecretStr | None = Field(
        None,
        description="Key (text of at least 32 characters, e.g. `openssl rand -base64 32`) with which the "
        "server signs output links (GET /v1/outputs/{id}, HMAC-SHA256): only the server can make one, "
        "whatever a webhook receiver knows. Changing it invalidates every link out. Unset: a key kept in "
        "<data_dir>/keys/output-link.key.",
    )
    output_link_max_ttl_s: float = Field(
        7 * 24 * 3600.0,
        gt=0,
        description="Longest life of an output link, seconds: a link whose expiry lies further from now is "
        "refused (403) whatever its signature, and REPRISE_OUTPUT_LINK_TTL_S may not exceed it. Default 7 "
        "days: the longest an S3 presigned URL may live (SigV4's X-Amz-Expires maximum, 604800 s), the "
        "bound delivery links already had; lower it to shorten what a leaked link exposes.",
    )
    webhook_secret_keys: Annotated[list[SecretStr], NoDecode] = Field(
        default_factory=list,
        description="Keys that encrypt tenants' webhook secrets in the database (Fernet, AES-128-CBC with "
        "HMAC-SHA256, under a key derived from each by HKDF-SHA256): each a text of at least 32 random "
        "characters, e.g. `openssl rand -base64 32`. Comma list: the first encrypts, every one decrypts, so "
        "a new key goes first and the old one stays until `reprise keys reencrypt` has run "
        "(docs/operations.md). Unset: a key kept in <data_dir>/keys/webhook-secrets.key.",
    )

    @field_validator("webhook_secret_keys", mode="before")
    @classmethod
    def _parse_keys(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("webhook_secret_keys")
    @classmethod
    def _check_secret_keys(cls, keys: list[SecretStr]) -> list[SecretStr]:
        for position, key in enumerate(keys, start=1):
            if _too_short(key):
                raise ValueError(
                    f"key {position} is shorter than {MIN_KEY_CHARS} characters; make one with "
                    "`openssl rand -base64 32`"
                )
        return keys

    @field_validator("output_link_key")
    @classmethod
    def _check_link_key(cls, key: SecretStr | None) -> SecretStr | None:
        if key is not None and _too_short(key):
            raise ValueError(f"use at least {MIN_KEY_CHARS} characters, e.g. `openssl rand -base64 32`")
        return key


def _too_short(key: SecretStr) -> bool:
    """Shorter than a key must be; a placeholder has its own message (core.settings.credentials)."""
    text = key.get_secret_value()
    return PLACEHOLDER not in text and len(text) < MIN_KEY_CHARS
