"""Blob stores: one interface (base.py), one file per backend."""

from core.errors import BlobNotFound
from db.blobs.base import BlobStore

__all__ = ["BlobNotFound", "BlobStore"]
