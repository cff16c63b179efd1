"""A decode node's batched decodes (workers.runtime.decode_batching): reads decoded at the same time from
the node's threads share one VAE call per family and shape, each image equals its decode alone, and an
error reaches every caller of its call.

The batcher's grouping is pure logic (a recording decode function); the equality runs the tiny models'
VAE on a decode-role runtime, as a decode node hosts it."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np
import pytest
import torch
from PIL import Image

from core.settings import load_settings
from core.vocabulary import Role
from tests.workers.runtime.together import together
from workers.runtime import DiffusionRuntime
from workers.runtime.decode_batching import DECODE_PIXEL_TOLERANCE, DecodeBatcher


class Recording:
    """A decode of many that records each call's family and size; the image's colour is the latent's
    first value, so that each caller can tell its own image."""

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple[str, int]] = []
        self.fail = fail

    def __call__(self, latents: Sequence[torch.Tensor], family: str) -> list[Image.Image]:
        self.calls.append((family, len(latents)))
        if self.fail:
            raise RuntimeError("CUDA out of memory (a stand-in)")
        return [Image.new("L", (1, 1), int(latent.flatten()[0])) for latent in latents]


def _latent(value: int, side: int = 8) -> torch.Tensor:
    return torch.full((1, 4, side, side), float(value))


def test_reads_at_once_share_one_call_per_family_and_shape_and_each_gets_its_own_image() -> None:
    decode = Recording()
    batcher = DecodeBatcher(decode, max_batch=8, max_wait_ms=1_000)
    jobs: list[Callable[[], Image.Image]] = [
        *(lambda n=n: batcher.decode(_latent(n), "a") for n in range(4)),
        lambda: batcher.decode(_latent(9, side=16), "a"),  # another shape: a call of its own
        lambda: batcher.decode(_latent(7), "b"),  # another family: a call of its own
    ]
    images = together(jobs)
    assert [image.getpixel((0, 0)) for image in images if isinstance(image, Image.Image)] == [
        0,
        1,
        2,
        3,
        9,
        7,
    ]
    assert sorted(decode.calls) == [("a", 1), ("a", 4), ("b", 1)]
    assert (batcher.calls, batcher.decoded, batcher.largest) == (3, 6, 4)


def test_a_full_group_runs_at_once_and_a_lone_read_waits_at_most_max_wait() -> None:
    decode = Recording()
    full = DecodeBatcher(decode, max_batch=2, max_wait_ms=10_000)
    started = time.monotonic()
    together([lambda: full.decode(_latent(1), "a"), lambda: full.decode(_latent(2), "a")])
    assert time.monotonic() - started < 5  # closed by its size, not by the wait
    lone = DecodeBatcher(decode, max_batch=8, max_wait_ms=50)
    started = time.monotonic()
    assert lone.decode(_latent(3), "a").getpixel((0, 0)) == 3
    assert 0.04 <= time.monotonic() - started < 2


def test_a_failed_decode_reaches_every_caller_of_its_call_and_the_next_call_runs() -> None:
    decode = Recording(fail=True)
    batcher = DecodeBatcher(decode, max_batch=3, max_wait_ms=2_000)
    results = together([lambda n=n: batcher.decode(_latent(n), "a") for n in range(3)])  # type: ignore[misc]
    assert all(isinstance(result, RuntimeError) and "out of memory" in str(result) for result in results)
    decode.fail = False
    assert batcher.decode(_latent(5), "a").getpixel((0, 0)) == 5


@pytest.fixture(scope="module")
def decoders(tmp_path_factory: pytest.TempPathFactory) -> tuple[DiffusionRuntime, DiffusionRuntime]:
    """The tiny models' decode role twice: a node with four threads' batching, and one without."""
    data = tmp_path_factory.mktemp("decode")
    batched = DiffusionRuntime(
        load_settings(data_dir=data, device="cpu", model_set="tiny", max_batch=4), Role.DECODE
    )
    alone = DiffusionRuntime(
        load_settings(data_dir=data, device="cpu", model_set="tiny", max_batch=1), Role.DECODE
    )
    return batched, alone


def test_decodes_from_threads_at_once_run_in_one_vae_call_and_equal_each_decode_alone(
    decoders: tuple[DiffusionRuntime, DiffusionRuntime],
) -> None:
    batched, alone = decoders
    family = batched.family
    latents = [np.random.default_rng(seed).standard_normal((4, 8, 8)).astype(np.float32) for seed in range(4)]
    results = together([lambda latent=latent: batched.decode(latent, family=family) for latent in latents])  # type: ignore[misc]
    batcher = batched._decodes
    assert batcher is not None and batcher.largest >= 2 and batcher.calls < len(latents)
    for latent, result in zip(latents, results, strict=True):
        assert not isinstance(result, BaseException), result
        expected = np.asarray(alone.decode(latent, family=family).image, dtype=np.int16)
        got = np.asarray(result.image, dtype=np.int16)
        assert got.shape == expected.shape and np.abs(got - expected).max() <= DECODE_PIXEL_TOLERANCE
    assert alone._decodes is None  # without batching a decode runs in its caller, as before
