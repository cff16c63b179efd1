"""Errors the API maps to 4xx. Each says whether it is recoverable.

They live in jobs/ (no torch) so that api/ can map them without importing the model stack.
"""

from __future__ import annotations


class RepriseError(Exception):
    """Base of Reprise's own errors."""


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


class CodecError(RepriseError):
    """A stored blob cannot be decoded (unknown format version, corrupt header). Not recoverable."""


class ImageFormatError(InvalidInput):
    """An image format the service does not encode (accepted: png, webp, jpeg)."""


class GenerationCanceled(RepriseError):
    """The job was canceled while its model ran: the runtime stopped after `step` denoising steps
    of the schedule (counted from its start, so a resume from k stops at k or later).

    Not recoverable: the job ends as canceled; the partial work is dropped.
    """

    def __init__(self, message: str, *, step: int) -> None:
        super().__init__(message)
        self.step = step
