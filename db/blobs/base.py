"""The blob store interface. Keys are '/'-separated; one entry's blobs share a prefix.

Key layout (db/blobs/keys.py): entries/<entry_id>/final.latent, entries/<entry_id>/k005.latent,
jobs/<job_id>/image.<format>. Deleting an entry = delete_prefix(entry_prefix(entry_id)).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator


def check_key(key: str) -> str:
    """Return key if it is a valid blob key, else raise ValueError.

    A key is one or more '/'-separated segments. Refused: the empty key, a leading '/',
    empty segments ('a//b', a trailing '/'), the segments '.' and '..', any segment starting
    with '.' (the local backend keeps its temporary files under such names), NUL and
    backslash. Both backends apply the same rule, so a key valid on one is valid on the other.
    """
    if not isinstance(key, str) or not key:
        raise ValueError(f"blob key must be a non-empty string, got {key!r}")
    if "\x00" in key or "\\" in key:
        raise ValueError(f"blob key {key!r} contains NUL or a backslash")
    for segment in key.split("/"):
        if not segment:
            raise ValueError(f"blob key {key!r} is absolute or has an empty segment")
        if segment.startswith("."):
            raise ValueError(f"blob key {key!r} has a segment starting with '.' ('.', '..' or hidden)")
    return key


def check_prefix(prefix: str) -> str:
    """Return prefix if it can start a valid key ('' and a trailing '/' allowed), else raise ValueError."""
    if prefix == "":
        return prefix
    head, _, tail = prefix.rpartition("/")
    if head or prefix.startswith("/"):
        check_key(head)
    if tail:
        check_key(tail)
    return prefix


class BlobStore(ABC):
    """Contract: put is atomic (a reader sees the whole blob or none, never a partial one);
    get raises BlobNotFound for a missing key; delete of a missing key is not an error;
    list yields the keys that start with prefix (plain string prefix, as S3 does: end it
    with '/' to mean a folder) in sorted order. Every method refuses invalid keys
    (`check_key`) with ValueError before any I/O."""

    @abstractmethod
    def put(self, key: str, data: bytes) -> None:
        """Store data under key, replacing any blob already there."""

    @abstractmethod
    def get(self, key: str) -> bytes:
        """The blob under key; BlobNotFound when there is none."""

    @abstractmethod
    def exists(self, key: str) -> bool: ...

    @abstractmethod
    def list(self, prefix: str = "") -> Iterator[str]:
        """Keys starting with prefix, sorted (by code point, which is S3's UTF-8 byte order)."""

    @abstractmethod
    def delete(self, keys: Iterable[str]) -> None:
        """Delete these keys; missing ones are skipped silently."""

    def delete_prefix(self, prefix: str) -> int:
        """Delete every blob under prefix; return how many were deleted."""
        keys = list(self.list(prefix))
        self.delete(keys)
        return len(keys)

    def size(self, key: str) -> int:
        """Size in bytes of the blob under key; BlobNotFound when there is none.

        Backends override this to read the size without fetching the blob.
        """
        return len(self.get(key))

    def presigned_url(self, key: str, *, expires_s: int) -> str | None:
        """A URL a client can GET the blob from directly for `expires_s` seconds; None when this store
        has no such URLs (local disk: the API serves the bytes itself)."""
        check_key(key)
        return None

    def check(self) -> None:  # noqa: B027 - an optional hook, not part of the abstract contract
        """Startup probe: raise BlobStoreMisconfigured if the store cannot be used. Default: no-op."""
