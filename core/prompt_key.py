"""The exact-prompt key: identical requests find their cached entry without an embedding.

Two requests are the same for the cache when their prompts are equal once case and runs of whitespace
are ignored, and they ask the same negative prompt, steps, size and guidance. The key is the sha256 of
those, indexed per scope; admission looks it up before embedding anything.
"""

from __future__ import annotations

import hashlib
import json

from core.params import GenerationParams


def normalised(text: str | None) -> str:
    """Case folded, whitespace collapsed and trimmed: "A  Red Fox " and "a red fox" are one prompt."""
    return " ".join((text or "").casefold().split())


def prompt_key(params: GenerationParams) -> str:
    fields = [
        normalised(params.prompt),
        normalised(params.negative_prompt),
        params.steps,
        params.width,
        params.height,
        round(float(params.guidance), 4),
    ]
    return hashlib.sha256(json.dumps(fields, ensure_ascii=False).encode()).hexdigest()
