"""Server keys: the keys only the server holds, read from the environment. One signs output links
(jobs/output_links.py); the others encrypt tenants' webhook secrets at rest (db/secret_box.py), so that a
database dump or backup holds no secret that could sign a webhook. Unset, a process on one machine uses
a key it keeps under its data directory (core/server_keys.py)."""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode

from core.settings.credentials import PLACEHOLDER

FERNET_KEY_BYTES = 32  # Fernet's key: 32 bytes, url-safe base64 (the cryptography package's spec)
MIN_LINK_KEY_CHARS = 32  # at least 32 characters, as RFC 2104 asks of an HMAC key: no shorter than the hash


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
        description="Keys that encrypt tenants' webhook secrets in the database (Fernet: AES-128-CBC with "
        "HMAC-SHA256; each 32 random bytes, url-safe base64, e.g. `python -c 'from cryptography.fernet "
        "import Fernet; print(Fernet.generate_key().decode())'`). Comma list: the first encrypts, every one "
        "decrypts, so a new key goes first and the old one stays until `reprise keys reencrypt` has run "
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
    def _check_fernet_keys(cls, keys: list[SecretStr]) -> list[SecretStr]:
        for position, key in enumerate(keys, start=1):
            text = key.get_secret_value()
            if PLACEHOLDER in text:
                continue  # refused with the placeholder's own message (core.settings.credentials)
            try:
                valid = len(base64.urlsafe_b64decode(text.encode())) == FERNET_KEY_BYTES
            except (binascii.Error, ValueError):
                valid = False
            if not valid:
                raise ValueError(
                    f"key {position} is not a Fernet key (32 bytes, url-safe base64, 44 characters); make "
                    "one with Fernet.generate_key()"
                )
        return keys

    @field_validator("output_link_key")
    @classmethod
    def _check_link_key(cls, key: SecretStr | None) -> SecretStr | None:
        text = key.get_secret_value() if key is not None else None
        if text is not None and PLACEHOLDER not in text and len(text) < MIN_LINK_KEY_CHARS:
            raise ValueError(f"use at least {MIN_LINK_KEY_CHARS} characters, e.g. `openssl rand -base64 32`")
        return key
