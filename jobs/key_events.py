"""A revoked API key, announced on Redis to every API process, so that none keeps trusting it from its
key cache (REPRISE_AUTH_CACHE_S) and each closes the key's open event streams at once.

    reprise:key:revoked:<sha256 of the key>   a message when the key was revoked or its life shortened

Best effort: an API process that misses the message (Redis down, the process subscribing) still stops
trusting the key when its cache entry ends, at most REPRISE_AUTH_CACHE_S later; the key's row holds the
truth. The channel names the key's hash, never the key.
"""

from __future__ import annotations

import redis

KEY_REVOKED_PREFIX = "reprise:key:revoked:"


def key_revoked_channel(key_hash: str) -> str:
    return f"{KEY_REVOKED_PREFIX}{key_hash}"


def announce_revoked(client: redis.Redis, key_hash: str) -> int:
    """Tell every API process; returns how many subscribers heard it (Redis' answer to PUBLISH)."""
    return int(client.publish(key_revoked_channel(key_hash), "1"))
