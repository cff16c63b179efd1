"""Webhook signing secrets (Standard Webhooks): their form and how a new one is made. Signing and
verifying live in jobs/webhooks.py; tenants (db/tenants.py) are created with a secret from here."""

from __future__ import annotations

import base64
import secrets

SECRET_PREFIX = "whsec_"


def generate_secret() -> str:
    """A new signing secret: 'whsec_' + base64 of 32 random bytes (the spec asks for 24 to 64)."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode("ascii")
