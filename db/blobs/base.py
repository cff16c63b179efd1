"""The blob store interface. Keys are '/'-separated; one entry's blobs share a prefix.

Key layout (db/blobs/keys.py): entries/<entry_id>/final.latent, entries/<entry_id>/k005.latent,
jobs/<job_id>/image.<format>. Deleting an entry = delete_prefix(entry_prefix(entry_id)).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator


class BlobNotFound(KeyError):
    """No blob under this key (evicted, or never written). Recoverable for cache reads: run as a miss."""


class BlobStore(ABC):
    """Contract: put is atomic (a reader sees the whole blob or none); get raises BlobNotFound;
    delete of a missing key is not an error; list yields keys under a prefix in sorted order."""

    @abstractmethod
    def put(self, key: str, data: bytes) -> None: ...

    @abstractmethod
    def get(self, key: str) -> bytes: ...

    @abstractmethod
    def exists(self, key: str) -> bool: ...

    @abstractmethod
    def list(self, prefix: str = "") -> Iterator[str]: ...

    @abstractmethod
    def delete(self, keys: Iterable[str]) -> None: ...

    def delete_prefix(self, prefix: str) -> int:
        """Delete every blob under prefix; return how many were deleted."""
        keys = list(self.list(prefix))
        self.delete(keys)
        return len(keys)
