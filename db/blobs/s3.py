"""A blob store in an S3 bucket (AWS, MinIO, or any S3 API) through boto3."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import islice
from typing import TYPE_CHECKING

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from core.errors import BlobNotFound, BlobStoreMisconfigured
from db.blobs.base import BlobStore, check_key, check_prefix

if TYPE_CHECKING:
    from mypy_boto3_s3.client import S3Client

DELETE_BATCH = 1000  # DeleteObjects accepts at most 1000 keys per request
_MISSING_KEY_CODES = frozenset({"NoSuchKey", "404", "NotFound"})


def _error_code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


class S3BlobStore(BlobStore):
    """Blobs as objects in one bucket, every key under `prefix` (so one bucket can hold
    several deployments). The bucket must exist: operations on a missing bucket raise
    BlobStoreMisconfigured naming REPRISE_S3_BUCKET; `ensure_bucket` creates it (tests, dev).

    A single PutObject is atomic in S3, which gives the put contract. Credentials left as
    None come from boto3's default chain (environment, profile, instance role).
    """

    def __init__(
        self,
        *,
        bucket: str,
        prefix: str = "",
        endpoint_url: str | None = None,
        region: str = "us-east-1",
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
    ) -> None:
        if not bucket:
            raise BlobStoreMisconfigured("the S3 blob store needs a bucket: set REPRISE_S3_BUCKET")
        self.bucket = bucket
        self.prefix = check_prefix(self._normalise_prefix(prefix))
        self.endpoint_url = endpoint_url
        self.region = region
        config = Config(
            retries={"mode": "standard", "max_attempts": 5},
            # MinIO and other self-hosted endpoints rarely resolve bucket subdomains.
            s3={"addressing_style": "path" if endpoint_url else "auto"},
        )
        # A session per store: boto3's default session is not thread-safe to create clients from.
        session = boto3.session.Session(
            aws_access_key_id=access_key_id,
            aws_secret_access_key=secret_access_key,
            region_name=region,
        )
        self._client: S3Client = session.client("s3", endpoint_url=endpoint_url, config=config)

    @staticmethod
    def _normalise_prefix(prefix: str) -> str:
        prefix = prefix.strip("/")
        return prefix + "/" if prefix else ""

    def __repr__(self) -> str:
        where = f" at {self.endpoint_url}" if self.endpoint_url else ""
        return f"S3BlobStore(s3://{self.bucket}/{self.prefix}{where})"

    def _key(self, key: str) -> str:
        return self.prefix + check_key(key)

    def _misconfigured(self, error: ClientError) -> BlobStoreMisconfigured:
        where = f" at {self.endpoint_url}" if self.endpoint_url else ""
        return BlobStoreMisconfigured(
            f"S3 bucket {self.bucket!r} does not exist{where} ({_error_code(error)}): create it, "
            "or set REPRISE_S3_BUCKET to an existing bucket (and REPRISE_S3_ENDPOINT_URL to its endpoint)"
        )

    def put(self, key: str, data: bytes) -> None:
        try:
            self._client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data)
        except ClientError as error:
            if _error_code(error) == "NoSuchBucket":
                raise self._misconfigured(error) from error
            raise

    def get(self, key: str) -> bytes:
        try:
            response = self._client.get_object(Bucket=self.bucket, Key=self._key(key))
        except ClientError as error:
            code = _error_code(error)
            if code == "NoSuchBucket":
                raise self._misconfigured(error) from error
            if code in _MISSING_KEY_CODES:
                raise BlobNotFound(key) from None
            raise
        with response["Body"] as body:
            return body.read()

    def presigned_url(self, key: str, *, expires_s: int) -> str | None:
        """A presigned GetObject URL (signed locally: no request is made)."""
        return self._client.generate_presigned_url(
            "get_object", Params={"Bucket": self.bucket, "Key": self._key(key)}, ExpiresIn=expires_s
        )

    def _head_size(self, key: str) -> int | None:
        # HeadObject has no body, so a missing bucket also answers a bare 404 here:
        # exists() reads it as a missing key; `check` tells the two apart at startup.
        try:
            response = self._client.head_object(Bucket=self.bucket, Key=self._key(key))
        except ClientError as error:
            if _error_code(error) in _MISSING_KEY_CODES:
                return None
            raise
        return response["ContentLength"]

    def exists(self, key: str) -> bool:
        return self._head_size(key) is not None

    def size(self, key: str) -> int:
        size = self._head_size(key)
        if size is None:
            raise BlobNotFound(key)
        return size

    def list(self, prefix: str = "") -> Iterator[str]:
        full_prefix = self.prefix + check_prefix(prefix)
        paginator = self._client.get_paginator("list_objects_v2")
        try:
            # S3 lists in UTF-8 byte order, which is the sorted order the contract asks for.
            for page in paginator.paginate(Bucket=self.bucket, Prefix=full_prefix):
                for item in page.get("Contents", []):
                    yield item["Key"].removeprefix(self.prefix)
        except ClientError as error:
            if _error_code(error) == "NoSuchBucket":
                raise self._misconfigured(error) from error
            raise

    def delete(self, keys: Iterable[str]) -> None:
        full_keys = [self._key(key) for key in keys]  # validate all before deleting any
        batches = iter(full_keys)
        while batch := list(islice(batches, DELETE_BATCH)):
            try:
                response = self._client.delete_objects(
                    Bucket=self.bucket,
                    Delete={"Objects": [{"Key": key} for key in batch], "Quiet": True},
                )
            except ClientError as error:
                if _error_code(error) == "NoSuchBucket":
                    raise self._misconfigured(error) from error
                raise
            # Quiet mode reports only failures; a missing key is not one in S3.
            if errors := response.get("Errors"):
                details = ", ".join(f"{e.get('Key')}: {e.get('Code')} {e.get('Message')}" for e in errors[:5])
                raise RuntimeError(f"S3 refused to delete {len(errors)} of {len(batch)} blobs: {details}")

    def check(self) -> None:
        try:
            self._client.head_bucket(Bucket=self.bucket)
        except ClientError as error:
            if _error_code(error) in {"404", "NoSuchBucket", "NotFound"}:
                raise self._misconfigured(error) from error
            raise BlobStoreMisconfigured(
                f"cannot use S3 bucket {self.bucket!r} ({_error_code(error)}): check REPRISE_S3_BUCKET "
                "and the credentials (REPRISE_S3_ACCESS_KEY_ID, REPRISE_S3_SECRET_ACCESS_KEY)"
            ) from error

    def ensure_bucket(self) -> None:
        """Create the bucket if it does not exist (tests and development; production provisions it)."""
        try:
            self._client.head_bucket(Bucket=self.bucket)
            return
        except ClientError as error:
            if _error_code(error) not in {"404", "NoSuchBucket", "NotFound"}:
                raise
        try:
            if self.region == "us-east-1":  # the one region that refuses an explicit LocationConstraint
                self._client.create_bucket(Bucket=self.bucket)
            else:
                self._client.create_bucket(
                    Bucket=self.bucket,
                    CreateBucketConfiguration={"LocationConstraint": self.region},  # type: ignore[typeddict-item]
                )
        except ClientError as error:
            if _error_code(error) != "BucketAlreadyOwnedByYou":  # created by a concurrent caller
                raise
