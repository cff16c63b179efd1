"""Worker roles: which model a worker process hosts."""

from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    LARGE = "large"  # full generations (cache_miss), and hits when idle
    SMALL = "small"  # cache hits: refine/resume for T-k steps
    DECODE = "decode"  # VAE decode of stored latents on read (LatentBox)
    ADMIT = "admit"  # CPU: embed, predict, look up, route
    IO = "io"  # CPU: webhooks and maintenance


GPU_ROLES = frozenset({Role.LARGE, Role.SMALL, Role.DECODE})
