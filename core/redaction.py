"""Secrets out of what people read: a URL's password is shown as ***."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

MASK = "***"


def redacted_url(url: str) -> str:
    """The URL with its password (if any) replaced by ***: safe to print or log."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{user}:{MASK}@{host}" + (f":{parts.port}" if parts.port is not None else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
