"""Blob stores: one behaviour suite run on both backends, then what only one backend does.

The S3 backend runs against moto's standalone server (a real S3 API over HTTP, `s3_server`).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import boto3
import pytest

import db.blobs.s3 as s3_module
from core.errors import BlobNotFound, BlobStoreMisconfigured
from core.settings import load_settings
from core.vocabulary import BlobBackend
from db.blobs import keys
from db.blobs.base import BlobStore
from db.blobs.factory import blob_store_from_settings
from db.blobs.local import LocalBlobStore
from db.blobs.s3 import S3BlobStore
from db.images import ImageFormat

CREDENTIALS = {"access_key_id": "testing", "secret_access_key": "testing"}
ENTRY_A = uuid.UUID("00000000-0000-0000-0000-00000000000a")
ENTRY_B = uuid.UUID("00000000-0000-0000-0000-00000000000b")
BAD_KEYS = ["", "/abs", "a//b", "a/", "..", "a/../b", "a/./b", ".hidden", "a/.tmp-x", "a\\b", "a\x00b"]


def _s3_store(endpoint: str, *, bucket: str | None = None, prefix: str = "reprise/") -> S3BlobStore:
    return S3BlobStore(
        bucket=bucket or f"test-{uuid.uuid4().hex[:16]}", prefix=prefix, endpoint_url=endpoint, **CREDENTIALS
    )


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> BlobStore:
    if request.param == "local":
        return LocalBlobStore(tmp_path / "blobs")
    s3 = _s3_store(request.getfixturevalue("s3_server"))
    s3.ensure_bucket()
    return s3


# --- the contract, on both backends ------------------------------------------------------


def test_get_returns_exactly_what_was_put(store: BlobStore) -> None:
    every_byte = bytes(range(256)) * 3
    store.put("entries/x/final.latent", every_byte)
    store.put("jobs/y/image.png", b"")

    assert store.get("entries/x/final.latent") == every_byte
    assert store.get("jobs/y/image.png") == b""


def test_put_replaces_the_blob_under_the_key(store: BlobStore) -> None:
    store.put("a/b", b"old and longer")
    store.put("a/b", b"new")

    assert store.get("a/b") == b"new"
    assert list(store.list()) == ["a/b"]


def test_missing_key_raises_blob_not_found(store: BlobStore) -> None:
    store.put("a/present", b"1")

    with pytest.raises(BlobNotFound):
        store.get("a/absent")
    with pytest.raises(BlobNotFound):
        store.get("a")  # a folder-like prefix is not a blob
    with pytest.raises(KeyError):  # BlobNotFound stays a KeyError for callers that catch that
        store.size("a/absent")


def test_exists_and_size_follow_put_and_delete(store: BlobStore) -> None:
    assert not store.exists("a/b")
    store.put("a/b", b"12345")

    assert store.exists("a/b")
    assert not store.exists("a")
    assert store.size("a/b") == 5

    store.delete(["a/b"])
    assert not store.exists("a/b")
    with pytest.raises(BlobNotFound):
        store.get("a/b")


def test_list_is_sorted_and_filters_by_string_prefix(store: BlobStore) -> None:
    written = [
        "jobs/j1/image.png",
        "entries/ab/final.latent",
        "entries/a/k010.latent",
        "entries/a/final.latent",
        "entries/a/k005.latent",
        "entries/Z/final.latent",
    ]
    for key in written:
        store.put(key, key.encode())

    assert list(store.list()) == sorted(written)
    assert list(store.list("entries/a/")) == [
        "entries/a/final.latent",
        "entries/a/k005.latent",
        "entries/a/k010.latent",
    ]
    # A plain string prefix, as in S3: without the trailing '/' it also matches 'ab'.
    assert list(store.list("entries/a")) == [
        "entries/a/final.latent",
        "entries/a/k005.latent",
        "entries/a/k010.latent",
        "entries/ab/final.latent",
    ]
    assert list(store.list("entries/a/k")) == ["entries/a/k005.latent", "entries/a/k010.latent"]
    assert list(store.list("nothing/")) == []


def test_delete_skips_missing_keys_and_is_idempotent(store: BlobStore) -> None:
    store.put("a/1", b"1")
    store.put("a/2", b"2")

    store.delete(["a/1", "a/never-written"])
    store.delete(["a/1"])
    store.delete([])

    assert list(store.list()) == ["a/2"]


def test_delete_prefix_removes_one_entry_and_counts_it(store: BlobStore) -> None:
    for entry in (ENTRY_A, ENTRY_B):
        store.put(keys.final_latent_key(entry), b"f")
        for k in (5, 10):
            store.put(keys.state_key(entry, k), b"s")
    store.put(keys.image_key(ENTRY_A, ImageFormat.PNG), b"i")  # a job whose id shares the entry's

    assert store.delete_prefix(keys.entry_prefix(ENTRY_A)) == 3
    assert store.delete_prefix(keys.entry_prefix(ENTRY_A)) == 0

    assert list(store.list(keys.entry_prefix(ENTRY_A))) == []
    assert len(list(store.list(keys.entry_prefix(ENTRY_B)))) == 3
    assert store.exists(keys.image_key(ENTRY_A, ImageFormat.PNG))


@pytest.mark.parametrize("bad_key", BAD_KEYS)
def test_invalid_keys_are_refused_by_every_operation(store: BlobStore, bad_key: str) -> None:
    store.put("a/b", b"kept")

    with pytest.raises(ValueError):
        store.put(bad_key, b"x")
    with pytest.raises(ValueError):
        store.get(bad_key)
    with pytest.raises(ValueError):
        store.exists(bad_key)
    with pytest.raises(ValueError):
        store.delete(["a/b", bad_key])  # validated before anything is deleted

    assert store.get("a/b") == b"kept"


@pytest.mark.parametrize("bad_prefix", ["/a", "../", "a//", "a/../", ".", "a/."])
def test_invalid_prefixes_are_refused(store: BlobStore, bad_prefix: str) -> None:
    with pytest.raises(ValueError):
        list(store.list(bad_prefix))


# --- key layout ------------------------------------------------------------------------


def test_key_layout_puts_an_entrys_blobs_under_its_prefix() -> None:
    prefix = keys.entry_prefix(ENTRY_A)

    assert prefix == f"entries/{ENTRY_A}/"
    assert keys.state_key(ENTRY_A, 5) == f"{prefix}k005.latent"
    assert keys.final_latent_key(ENTRY_A) == f"{prefix}final.latent"
    assert keys.job_prefix("job-1") == "jobs/job-1/"
    assert keys.image_key("job-1", ImageFormat.JPEG) == "jobs/job-1/image.jpeg"
    assert keys.image_key(ENTRY_B, "webp") == f"jobs/{ENTRY_B}/image.webp"


def test_state_keys_sort_in_step_order() -> None:
    steps = [1, 5, 10, 25, 99, 100, 999]
    state_keys = [keys.state_key(ENTRY_A, k) for k in steps]

    assert sorted(state_keys) == state_keys


@pytest.mark.parametrize("k", [0, -5, 1000, True, 5.0])
def test_state_key_refuses_steps_outside_1_to_999(k: Any) -> None:
    with pytest.raises(ValueError, match="step k"):
        keys.state_key(ENTRY_A, k)


@pytest.mark.parametrize("bad_id", ["", "..", "a/b", "../etc", " a", "-a"])
def test_ids_that_would_escape_their_segment_are_refused(bad_id: str) -> None:
    with pytest.raises(ValueError):
        keys.entry_prefix(bad_id)
    with pytest.raises(ValueError):
        keys.job_prefix(bad_id)


@pytest.mark.parametrize("bad_format", ["", "PNG", "p/g", "png.exe", "../x"])
def test_image_key_refuses_odd_formats(bad_format: str) -> None:
    with pytest.raises(ValueError):
        keys.image_key("job-1", bad_format)


# --- local backend ------------------------------------------------------------------------


def test_local_put_that_fails_keeps_the_old_blob_and_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalBlobStore(tmp_path)
    store.put("a/b", b"old")

    def failing_replace(src: Any, dst: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        store.put("a/b", b"new")
    monkeypatch.undo()

    assert store.get("a/b") == b"old"
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["b"]


def test_local_list_hides_leftover_temp_files(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    store.put("a/b", b"1")
    (tmp_path / "a" / ".tmp-crashed").write_bytes(b"half")  # what a crash mid-put leaves

    assert list(store.list()) == ["a/b"]
    assert list(store.list("a/")) == ["a/b"]


def test_local_delete_prunes_empty_folders_but_not_the_root(tmp_path: Path) -> None:
    root = tmp_path / "blobs"
    store = LocalBlobStore(root)
    store.put(keys.state_key(ENTRY_A, 5), b"s")
    store.put(keys.final_latent_key(ENTRY_B), b"f")

    store.delete_prefix(keys.entry_prefix(ENTRY_A))
    assert not (root / "entries" / str(ENTRY_A)).exists()
    assert (root / "entries" / str(ENTRY_B)).is_dir()

    store.delete_prefix("")
    assert root.is_dir()
    assert list(root.iterdir()) == []


def test_local_key_cannot_be_both_a_blob_and_a_folder(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    store.put("a/b", b"1")
    store.put("c/d/e", b"2")

    with pytest.raises(ValueError, match="existing blob"):
        store.put("a/b/c", b"x")
    with pytest.raises(ValueError, match="existing blob"):
        store.put("c/d", b"x")
    assert store.get("a/b") == b"1"


# --- S3 backend ---------------------------------------------------------------------------


def test_s3_delete_sends_batches_no_larger_than_the_limit(
    s3_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _s3_store(s3_server)
    store.ensure_bucket()
    for i in range(5):
        store.put(f"a/{i}", b"x")
    batch_sizes: list[int] = []
    send = store._client.delete_objects

    def counting_delete_objects(**kwargs: Any) -> Any:
        batch_sizes.append(len(kwargs["Delete"]["Objects"]))
        return send(**kwargs)

    monkeypatch.setattr(s3_module, "DELETE_BATCH", 2)
    monkeypatch.setattr(store._client, "delete_objects", counting_delete_objects)

    assert store.delete_prefix("a/") == 5
    assert batch_sizes == [2, 2, 1]
    assert list(store.list()) == []


def test_s3_keys_live_under_the_prefix_and_stores_do_not_see_each_other(s3_server: str) -> None:
    bucket = f"test-{uuid.uuid4().hex[:16]}"
    first = _s3_store(s3_server, bucket=bucket, prefix="one/")
    second = _s3_store(s3_server, bucket=bucket, prefix="two")  # the '/' is added
    first.ensure_bucket()
    first.put("a/b", b"1")
    second.put("a/b", b"2")

    assert list(first.list()) == ["a/b"]
    assert second.get("a/b") == b"2"
    assert first.delete_prefix("") == 1
    assert second.get("a/b") == b"2"

    raw = boto3.client(
        "s3",
        endpoint_url=s3_server,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    listed = raw.list_objects_v2(Bucket=bucket).get("Contents", [])
    assert [item["Key"] for item in listed] == ["two/a/b"]


def test_s3_missing_bucket_is_a_clear_configuration_error(s3_server: str) -> None:
    store = _s3_store(s3_server, bucket="never-created")

    for operation in (
        lambda: store.check(),
        lambda: store.put("a/b", b"1"),
        lambda: store.get("a/b"),
        lambda: list(store.list()),
    ):
        with pytest.raises(BlobStoreMisconfigured, match="REPRISE_S3_BUCKET") as caught:
            operation()
        assert "never-created" in str(caught.value)


def test_s3_ensure_bucket_is_idempotent_and_makes_the_store_usable(s3_server: str) -> None:
    store = _s3_store(s3_server)
    store.ensure_bucket()
    store.ensure_bucket()

    store.check()
    store.put("a/b", b"1")
    assert store.get("a/b") == b"1"


def test_s3_store_needs_a_bucket_name() -> None:
    with pytest.raises(BlobStoreMisconfigured, match="REPRISE_S3_BUCKET"):
        S3BlobStore(bucket="")


# --- factory ------------------------------------------------------------------------------


def test_factory_builds_a_local_store_at_the_blob_root(tmp_path: Path) -> None:
    settings = load_settings(blob_backend=BlobBackend.LOCAL, blob_dir=tmp_path / "blobs")

    store = blob_store_from_settings(settings)
    store.put("a/b", b"1")

    assert isinstance(store, LocalBlobStore)
    assert (tmp_path / "blobs" / "a" / "b").read_bytes() == b"1"


def test_factory_builds_an_s3_store_from_the_s3_settings(s3_server: str) -> None:
    bucket = f"test-{uuid.uuid4().hex[:16]}"
    settings = load_settings(
        blob_backend=BlobBackend.S3,
        s3_bucket=bucket,
        s3_prefix="deploy-1/",
        s3_endpoint_url=s3_server,
        s3_region="eu-west-1",
        s3_access_key_id="testing",
        s3_secret_access_key="testing",
    )

    store = blob_store_from_settings(settings)
    assert isinstance(store, S3BlobStore)
    store.ensure_bucket()  # a non-default region takes the LocationConstraint path
    store.put("a/b", b"1")

    reader = _s3_store(s3_server, bucket=bucket, prefix="deploy-1/")
    assert reader.get("a/b") == b"1"
