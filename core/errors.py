"""The one error hierarchy: every error Reprise raises on purpose derives from RepriseError.

`recoverable` says what a caller may do: True means the same work can succeed later or elsewhere
(retry, reroute, run as a miss); False means a person or the client must change something first.
The API maps InvalidInput to 422 and a few others to their own status (api/problems.py). This module
sits in core/ so that every floor, the API included, can raise and catch without importing torch.
"""

from __future__ import annotations


class RepriseError(Exception):
    """Base of Reprise's own errors."""

    recoverable: bool = False


class InvalidInput(RepriseError, ValueError):
    """The request cannot be served as given; the client must change it. Not recoverable.

    `field` names the offending input so the API can point at it (problem+json `errors`).
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class PromptError(InvalidInput):
    """Empty or over-long prompt."""


class StepsError(InvalidInput):
    """Steps out of range, or k outside 1..T-1."""


class SizeError(InvalidInput):
    """Width or height out of range or not a multiple of the VAE factor."""


class LatentError(InvalidInput):
    """A latent of the wrong shape, dtype or model family."""


class SourceVanished(RepriseError):
    """The cache entry or state a hit was routed to is gone (evicted). Recoverable: run as a miss."""

    recoverable = True


class CodecError(RepriseError):
    """A stored blob cannot be decoded (unknown format version, corrupt header). Not recoverable."""


class ImageFormatError(InvalidInput):
    """An image format the service does not encode (accepted: png, webp, jpeg)."""


class BatchFull(RepriseError):
    """A step-level batch (workers.runtime.batching) was asked to admit a member while it holds
    max_batch of them. Recoverable: step the batch until a member retires, then admit it."""

    recoverable = True


class GenerationCanceled(RepriseError):
    """The job was canceled while its model ran: the runtime stopped after `step` denoising steps
    of the schedule (counted from its start, so a resume from k stops at k or later).

    Not recoverable: the job ends as canceled; the partial work is dropped.
    """

    def __init__(self, message: str, *, step: int) -> None:
        super().__init__(message)
        self.step = step


# --- moved here from the floors that raise them (one hierarchy, one base) ---


# raised in db.jobs
class InflightLimitExceeded(RepriseError):
    """The tenant has as many unfinished jobs as it may. Recoverable: retry when some finish."""

    recoverable = True

    def __init__(self, limit: int) -> None:
        super().__init__(f"{limit} jobs are already starting or processing, the limit of this tenant")
        self.limit = limit


class HighPriorityLimitExceeded(RepriseError):
    """The tenant has as many unfinished `high` jobs as it may. Recoverable: retry when some finish, or
    submit at `normal`."""

    recoverable = True

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"{limit} high-priority jobs are already starting or processing, the limit of this tenant; "
            'submit with "priority": "normal", or retry when some finish'
        )
        self.limit = limit


# raised in db.blobs.base
class BlobNotFound(RepriseError, KeyError):
    """No blob under this key (evicted, or never written). Recoverable for cache reads: run as a miss."""

    recoverable = True


# raised in db.blobs.base
class BlobStoreMisconfigured(RepriseError, RuntimeError):
    """The store cannot be used as configured (missing bucket, unwritable root).

    Not recoverable without changing the settings; the message names the variable to fix.
    """


# raised in reprise.migrate
class EmbeddingDimensionMismatch(RepriseError):
    """The database's embedding columns disagree with the configured embedders. Not recoverable."""


# raised in jobs.dispatch
class NoDecodeNode(RepriseError):
    """No decode node can be asked (none alive, or the read path's Redis is down). Recoverable: retry
    later (the API sends 503, or the stored image when there is one)."""

    recoverable = True


# raised in jobs.policies.k_selection
class ThresholdTableError(RepriseError, ValueError):
    """A threshold table cannot be used as given. Not recoverable: fix the configuration."""


# raised in jobs.webhooks
class WebhookVerificationError(RepriseError):
    """A webhook's headers or signature do not check out. Not recoverable: drop the message."""


# raised in workers.runtime.runtime
class RoleMismatch(RepriseError, RuntimeError):
    """An operation was asked of a role that does not host the model it needs (e.g. generate on
    the decode role). A routing bug, not the client's fault. Recoverable: send the task to the
    right pool."""

    recoverable = True


# raised in workers.generation
class LeaseBusy(RepriseError):
    """Another worker holds the job's lease; retry the task after `retry_in_s`. Recoverable."""

    recoverable = True

    def __init__(self, retry_in_s: float) -> None:
        super().__init__(f"job leased by another worker; retry in {retry_in_s:.0f}s")
        self.retry_in_s = retry_in_s


# raised in workers.lease
class LeaseLost(RepriseError):
    """The run no longer holds its job's lease (another worker took the job, or renewals failed for a
    whole lease): it stops before writing anything; the job runs again elsewhere. Recoverable."""

    recoverable = True


# raised in workers.role_switch
class NotThisPool(RepriseError):
    """The worker's role no longer takes this task's queue (it was moved while the task was on its
    way): hand the message back to the broker for a worker of the right pool. Recoverable."""

    recoverable = True


# raised in reprise.services.common
class ServiceError(RepriseError):
    """A service cannot be used; the message says what is missing and the fix. Not recoverable."""


# raised in core.settings
class DatabaseUnavailable(RepriseError):
    """Postgres refused or lost the connection while a batch of submissions was written (jobs.intake).
    Recoverable: the API answers 503 and the client retries."""

    recoverable = True


class SettingsError(RepriseError):
    """Settings are invalid. Not recoverable without changing the environment."""


# raised in bench.run.costs
class CostsError(RepriseError, ValueError):
    """A costs file cannot be used. Not recoverable: fix the file or leave --costs out."""


# raised in bench.workload.trace
class TraceError(RepriseError, ValueError):
    """A prompts or arrivals file, or an arrival option, cannot be used. Not recoverable: fix the input."""


# raised in bench.run.outcomes
class UnknownModel(RepriseError, ValueError):
    """A job reports evaluations of a model the costs do not know. Not recoverable: pass --costs."""


# raised in db.keys
class UnknownKey(RepriseError, LookupError):
    """No such API key or tenant, or the key cannot be rotated. Not recoverable: the message names
    the command that lists them."""
