"""Blob stores: one interface (base.py), one file per backend."""

from db.blobs.base import BlobNotFound, BlobStore

__all__ = ["BlobNotFound", "BlobStore"]
