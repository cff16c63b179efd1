"""The stand-in video segmenter, 1-bit mask storage and FlexCache's stitching (4.2.2), on small
synthetic latents."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from core.errors import CodecError, LatentError
from workers.runtime.stitching import object_mask, pack_mask, stitch, unpack_mask

CHANNELS, FRAMES, HEIGHT, WIDTH = 4, 8, 16, 24
SIDE = 4  # the square's side in latent pixels


def square_masks(step: int, frames: int = FRAMES) -> npt.NDArray[np.bool_]:
    """Where a SIDE x SIDE square stands in each frame, moving `step` pixels right per frame."""
    masks = np.zeros((frames, HEIGHT, WIDTH), dtype=bool)
    for frame in range(frames):
        left = 1 + frame * step
        masks[frame, 6 : 6 + SIDE, left : left + SIDE] = True
    return masks


def video(
    masks: npt.NDArray[np.bool_], *, striped: bool, noise: float = 0.05, seed: int = 0
) -> npt.NDArray[np.float32]:
    """A (C, F, h, w) latent: a background of one tone (or vertical stripes) with noise, and the
    square in another tone where `masks` is set."""
    rng = np.random.default_rng(seed)
    base = np.array([0.2, -0.4, 0.1, 0.3])[:, None, None, None]
    latent = np.broadcast_to(base, (CHANNELS, *masks.shape)).copy()
    if striped:
        columns = (np.arange(WIDTH) // 2) % 2 == 1
        latent[:, :, :, columns] += np.array([0.9, 0.5, -0.6, 0.2])[:, None, None, None]
    latent += rng.normal(0.0, noise, latent.shape)
    square = np.array([1.4, 0.8, -0.9, -1.1])[:, None]
    latent[:, masks] = square + rng.normal(0.0, noise, (CHANNELS, int(masks.sum())))
    return latent.astype(np.float32)


def iou(found: npt.NDArray[np.bool_], truth: npt.NDArray[np.bool_]) -> float:
    return float((found & truth).sum() / (found | truth).sum())


@pytest.mark.parametrize("striped", [False, True])
def test_a_moving_square_is_found(striped: bool) -> None:
    truth = square_masks(step=2)
    found = object_mask(video(truth, striped=striped))
    assert found.shape == truth.shape and found.dtype == np.bool_
    assert iou(found, truth) > 0.8


def test_a_static_square_on_a_flat_background_is_found() -> None:
    truth = square_masks(step=0)
    assert iou(object_mask(video(truth, striped=False)), truth) > 0.8


def test_a_single_frame_reads_against_its_spatial_median() -> None:
    truth = square_masks(step=0, frames=1)
    assert iou(object_mask(video(truth, striped=False)), truth) > 0.8


def test_noise_alone_and_a_constant_latent_give_almost_no_object() -> None:
    empty = np.zeros((FRAMES, HEIGHT, WIDTH), dtype=bool)
    assert object_mask(video(empty, striped=False)).mean() < 0.02
    assert not object_mask(np.ones((CHANNELS, FRAMES, HEIGHT, WIDTH), dtype=np.float16)).any()


def test_object_mask_refuses_a_latent_that_is_not_a_video() -> None:
    with pytest.raises(LatentError):
        object_mask(np.zeros((CHANNELS, HEIGHT, WIDTH)))


@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 5, 7), (2, 40, 64), (1, 3, 3), (0, 4, 4)])
def test_pack_round_trips_at_one_bit_per_element(shape: tuple[int, int, int]) -> None:
    mask = np.random.default_rng(1).random(shape) < 0.3
    data = pack_mask(mask)
    assert len(data) == (mask.size + 7) // 8
    restored = unpack_mask(data, shape)
    assert restored.dtype == np.bool_ and np.array_equal(restored, mask)


def test_unpack_refuses_bytes_of_another_shape() -> None:
    data = pack_mask(np.ones((1, 3, 3), dtype=bool))  # 9 bits: 2 bytes, 7 bits padding
    with pytest.raises(CodecError):
        unpack_mask(data, (1, 2, 4))  # 8 bits: 1 byte
    with pytest.raises(CodecError):
        unpack_mask(pack_mask(np.ones((1, 4, 4), dtype=bool)), (1, 3, 3))  # padding bits set
    with pytest.raises(LatentError):
        pack_mask(np.ones((1, 3, 3), dtype=np.uint8))


def test_stitch_takes_the_object_entry_on_the_union_of_both_masks() -> None:
    shape = (2, 1, 1, 4)
    objects = np.full(shape, 1.0, dtype=np.float32)
    backgrounds = np.full(shape, 2.0, dtype=np.float32)
    object_mask_ = np.array([[[True, False, False, False]]])
    background_mask = np.array([[[True, True, False, False]]])  # its own object, partly uncovered
    stitched = stitch(objects, object_mask_, backgrounds, background_mask)
    assert stitched.dtype == np.float32
    # The object where it is; its entry's pixels where the old object stood (FlexCache's alien);
    # the background entry's everywhere else.
    assert stitched[:, 0, 0].tolist() == [[1.0, 1.0, 2.0, 2.0]] * 2


def test_stitch_of_the_square_videos_keeps_each_part() -> None:
    object_truth, background_truth = square_masks(step=2), square_masks(step=1)
    objects = video(object_truth, striped=False, seed=1)
    backgrounds = video(background_truth, striped=True, seed=2)
    masks = object_mask(objects), object_mask(backgrounds)
    stitched = stitch(objects, masks[0], backgrounds, masks[1])
    union = masks[0] | masks[1]
    assert np.array_equal(stitched[:, union], objects[:, union])
    assert np.array_equal(stitched[:, ~union], backgrounds[:, ~union])


@pytest.mark.parametrize(
    ("object_shape", "background_shape"),
    [((4, 8, 16, 24), (4, 6, 16, 24)), ((4, 8, 16, 24), (3, 8, 16, 24)), ((4, 8, 16, 24), (4, 8, 16, 20))],
)
def test_stitch_refuses_latents_of_different_shapes(
    object_shape: tuple[int, ...], background_shape: tuple[int, ...]
) -> None:
    masks = np.zeros(object_shape[1:], dtype=bool), np.zeros(background_shape[1:], dtype=bool)
    with pytest.raises(ValueError):
        stitch(np.zeros(object_shape), masks[0], np.zeros(background_shape), masks[1])


def test_stitch_refuses_masks_and_dtypes_that_do_not_fit() -> None:
    latent = np.zeros((4, 8, 16, 24), dtype=np.float32)
    mask = np.zeros((8, 16, 24), dtype=bool)
    with pytest.raises(LatentError):
        stitch(latent, mask[:4], latent, mask)
    with pytest.raises(LatentError):
        stitch(latent, mask.astype(np.uint8), latent, mask)
    with pytest.raises(LatentError):
        stitch(latent, mask, latent.astype(np.float16), mask)
