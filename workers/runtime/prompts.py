"""Prompt embeddings kept per text encoder: a prompt goes through the text encoder once.

diffusers' `encode_prompt` (workers.runtime.denoising.encode_prompt) runs the text encoder twice for a
guided job: the prompt, then the negative prompt (empty unless the request sets one). The negative's
embedding depends on its own text alone (diffusers pads it to the length of the prompt's, which is the
tokenizer's length whatever the prompt), and almost every request sends the same one; and a prompt
sent again (a repeated request, a hit of the same prompt, an audit) needs no encoder call at all. Both
come from a small LRU kept for each text encoder, so a new prompt costs one encoder call and a repeated
one none. On a GPU worker of the lab's models on 2 CPU cores, prompt encoding was the largest part of
the task threads' own work beside the batched denoising.

The embeddings are the pipeline's own, computed by the same calls and kept, so a job's latents are
unchanged bit for bit (`tests/workers/runtime/test_prompts.py`). Keys are exact texts; an entry lives
as long as its encoder (a role switch that loads another model starts empty) and is never modified
(the callers concatenate it, or get a copy).
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch

from core.params import GenerationParams

PROMPTS_KEPT = 256
"""Prompts kept per text encoder: 256 x (77 x 768) float16 is 30 MB for Stable Diffusion 1.x on a GPU,
12 MB of the lab's (32 x 384 float32); enough for the repeats of a busy minute."""


class PromptEmbeddings:
    """encode_prompt with the prompts' and negative prompts' embeddings kept (the module docstring)."""

    def __init__(self, kept: int = PROMPTS_KEPT) -> None:
        self._kept = kept
        self._lock = threading.Lock()
        self._by_encoder: weakref.WeakKeyDictionary[Any, OrderedDict[tuple[str, str], torch.Tensor]]
        self._by_encoder = weakref.WeakKeyDictionary()
        self.encoder_calls = 0  # pipeline encode_prompt calls made (each one or two encoder passes)

    def encode(self, pipe: Any, params: GenerationParams, device: torch.device) -> tuple[torch.Tensor, bool]:
        """What encode_prompt returns: the embeddings ([negative, prompt] when guidance > 1) and whether
        the job is guided."""
        guided = params.guidance > 1.0
        positive = self._kept_or(
            pipe, ("prompt", params.prompt), lambda: pipe.encode_prompt(params.prompt, device, 1, False)[0]
        )
        if not guided:
            return positive.clone(), False
        negative = self._kept_or(
            pipe,
            ("negative", params.negative_prompt or ""),
            lambda: pipe.encode_prompt(
                params.prompt, device, 1, True, negative_prompt=params.negative_prompt
            )[1],
        )
        return torch.cat([negative, positive]), True

    def _kept_or(self, pipe: Any, key: tuple[str, str], compute: Callable[[], torch.Tensor]) -> torch.Tensor:
        with self._lock:
            kept = self._by_encoder.setdefault(pipe.text_encoder, OrderedDict())
            found = kept.get(key)
            if found is not None:
                kept.move_to_end(key)
                return found
        with torch.inference_mode():
            computed = compute()
        with self._lock:
            self.encoder_calls += 1
            kept[key] = computed
            while len(kept) > self._kept:
                kept.popitem(last=False)
        return computed
