"""A blob store in a local directory: one file per key, folders for the '/' segments."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from core.errors import BlobNotFound, BlobStoreMisconfigured
from db.blobs.base import BlobStore, check_key, check_prefix

_TEMP_PREFIX = ".tmp-"  # keys cannot start a segment with '.', so temp files never look like blobs
_PUT_ATTEMPTS = 3  # a concurrent delete may prune the folder between mkdir and the temp file


class LocalBlobStore(BlobStore):
    """Blobs as files under root. For one machine (tests, dev, single-node deployments).

    put writes a temporary file in the target's folder, fsyncs it and renames it over the
    key (os.replace), so readers see the old blob or the new one, and a crash leaves no
    half-written blob. delete removes folders left empty, up to (not including) root.
    A key cannot also be a folder of another key here ('a/b' and 'a/b/c'): put refuses it.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def __repr__(self) -> str:
        return f"LocalBlobStore({str(self.root)!r})"

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*check_key(key).split("/"))

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        for attempt in range(_PUT_ATTEMPTS):
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                self._write_atomic(path, data)
                return
            except (FileExistsError, NotADirectoryError, IsADirectoryError):
                raise ValueError(f"blob key {key!r} runs through an existing blob's path") from None
            except FileNotFoundError:
                if attempt == _PUT_ATTEMPTS - 1:
                    raise

    @staticmethod
    def _write_atomic(path: Path, data: bytes) -> None:
        fd, temp_name = tempfile.mkstemp(prefix=_TEMP_PREFIX, dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())  # durable before it becomes visible under the key
            os.replace(temp_name, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp_name)
            raise

    def get(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise BlobNotFound(key) from None

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def size(self, key: str) -> int:
        path = self._path(key)
        if not path.is_file():
            raise BlobNotFound(key)
        return path.stat().st_size

    def list(self, prefix: str = "") -> Iterator[str]:
        # Walk only the deepest folder the prefix names, then filter by the string prefix.
        folder, _, _ = check_prefix(prefix).rpartition("/")
        start = self.root.joinpath(*folder.split("/")) if folder else self.root
        keys: list[str] = []
        for dirpath, dirnames, filenames in os.walk(start):
            dirnames[:] = [name for name in dirnames if not name.startswith(".")]
            relative = Path(dirpath).relative_to(self.root).as_posix()
            base = "" if relative == "." else relative + "/"
            keys.extend(
                base + name
                for name in filenames
                if not name.startswith(".") and (base + name).startswith(prefix)
            )
        return iter(sorted(keys))

    def delete(self, keys: Iterable[str]) -> None:
        # Plain strings, not Paths: an eviction pass deletes thousands of keys.
        root = str(self.root)
        paths = [os.path.join(root, *check_key(key).split("/")) for key in keys]  # validate all first
        for path in paths:
            try:
                os.unlink(path)
            except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
                continue  # gone already, or a folder (never a blob): nothing to delete
            self._prune(Path(path).parent)

    def _prune(self, folder: Path) -> None:
        """Remove empty folders from folder up towards root; stop at the first non-empty one."""
        while folder != self.root:
            try:
                folder.rmdir()
            except OSError:  # not empty (or already gone, or raced with a put): leave it
                return
            folder = folder.parent

    def check(self) -> None:
        if not os.access(self.root, os.W_OK | os.X_OK):
            raise BlobStoreMisconfigured(
                f"blob directory {self.root} is not writable: fix its permissions or set REPRISE_BLOB_DIR"
            )
