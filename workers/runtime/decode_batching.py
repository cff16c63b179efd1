"""Decodes that arrive together run together: a decode node's threads (REPRISE_MAX_BATCH of them, as a
GPU worker's) hand their latents to one DecodeBatcher, which stacks those of one family and shape into
one VAE call (LatentBox 4's decode on read, batched as the GPU workers batch their denoising steps).

The first caller of a group (family and latent shape) opens it and leads it: it waits at most
`max_wait_ms` for other callers (less once `max_batch` latents are in), closes the group, runs one
decode of every latent in it and hands each caller its own image. A caller arriving after its group
closed opens the next one. An error of the decode is raised in every caller of that group, and every
group ends in images or an error, so no caller is left waiting. A lone caller pays at most
`max_wait_ms` more than its decode alone.

Exactness: the VAE's kernels see a batch dimension, as the UNet's do in a step-level batch
(workers.runtime.batching); each image is the decode of its own latent, GroupNorm normalises each sample
on its own, and the 8-bit rounding absorbs differences in the last bits: a batched decode of the lab's
VAE equals the decode alone pixel for pixel in the tests (tests/workers/runtime/test_decode_batching.py),
and DECODE_PIXEL_TOLERANCE (one level of 255) is the stated bound where a card's kernels differ.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Final

import torch
from PIL import Image

DECODE_PIXEL_TOLERANCE: Final = 1  # levels of 255 a batched decode may differ from the decode alone
DECODE_WAIT_MS: Final = 5.0  # what a lone read pays at most: under a VAE decode of the lab (4 to 400 ms)

GroupKey = tuple[str, tuple[int, ...]]
DecodeMany = Callable[[Sequence[torch.Tensor], str], list[Image.Image]]


@dataclass(eq=False)
class _Group:
    """The latents of callers of one family and shape, and their one result."""

    latents: list[torch.Tensor] = field(default_factory=list)
    closed: bool = False
    result: Future[list[Image.Image]] = field(default_factory=Future)


class DecodeBatcher:
    """Concurrent `decode` calls served by shared calls of `decode_many` (one VAE call per group)."""

    def __init__(
        self, decode_many: DecodeMany, *, max_batch: int, max_wait_ms: float = DECODE_WAIT_MS
    ) -> None:
        if max_batch < 1 or max_wait_ms < 0:
            raise ValueError(f"max_batch must be >= 1 and max_wait_ms >= 0, not {max_batch}, {max_wait_ms}")
        self._decode_many = decode_many
        self.max_batch = max_batch
        self.max_wait_s = max_wait_ms / 1e3
        self._changed = threading.Condition()
        self._open: dict[GroupKey, _Group] = {}
        self.calls = 0  # VAE calls made
        self.decoded = 0  # latents they decoded (the mean batch is decoded / calls)
        self.largest = 0  # the most latents one call decoded

    def decode(self, latent: torch.Tensor, family: str) -> Image.Image:
        """The image of one (1, C, h, w) latent of `family`, decoded with whatever arrives beside it."""
        key = (family, tuple(latent.shape))
        group, index, leads = self._join(key, latent)
        if leads:
            self._lead(key, group, family)
        return group.result.result()[index]

    def _join(self, key: GroupKey, latent: torch.Tensor) -> tuple[_Group, int, bool]:
        with self._changed:
            group, leads = self._open.get(key), False
            if group is None:
                group, leads = _Group(), True
                self._open[key] = group
            index = len(group.latents)
            group.latents.append(latent)
            if len(group.latents) >= self.max_batch:
                self._close(key, group)
            return group, index, leads

    def _close(self, key: GroupKey, group: _Group) -> None:
        """No caller joins `group` any more; its leader stops waiting. Holding the condition."""
        group.closed = True
        if self._open.get(key) is group:
            del self._open[key]
        self._changed.notify_all()

    def _lead(self, key: GroupKey, group: _Group, family: str) -> None:
        """Wait for the group to fill or for max_wait, then decode it: images or an error for all."""
        try:
            deadline = time.monotonic() + self.max_wait_s
            with self._changed:
                while not group.closed and (remaining := deadline - time.monotonic()) > 0:
                    self._changed.wait(remaining)
                self._close(key, group)
                self.calls += 1
                self.decoded += len(group.latents)
                self.largest = max(self.largest, len(group.latents))
            images = self._decode_many(group.latents, family)
            if len(images) != len(group.latents):
                raise ValueError(f"a decode of {len(group.latents)} latents returned {len(images)} images")
        except BaseException as error:  # every caller of the group gets it, the leader too
            group.result.set_exception(error)
        else:
            group.result.set_result(images)
