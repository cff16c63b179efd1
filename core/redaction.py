"""Secrets out of what people read: a URL's password is shown as ***."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

MASK = "***"


def redacted_url(url: str) -> str:
    """The URL with its password (if any) replaced by ***: safe to print or log. A `;`-separated list
    (kombu's failover and Sentinel form, sentinel://h1:26379;sentinel://h2:26379) has each URL redacted."""
    parts = url.split(";")
    if len(parts) > 1 and all("://" in part for part in parts):  # not a ';' inside a password
        return ";".join(_redacted_one(part) for part in parts)
    return _redacted_one(url)


def _redacted_one(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{user}:{MASK}@{host}" + (f":{parts.port}" if parts.port is not None else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
