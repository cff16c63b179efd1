"""Object masks of a video latent and the stitching of two cached latents: FlexCache's video
segmenter and cache stitcher (papers/flexcache-video-approximate-cache.txt 3.2 (6), 4.2.2, 4.3).

FlexCache segments the *final* video of a job with LangSAM (5 "Video segmenter") and applies the
masks to the earlier cached steps, "because the positions of these objects are never changed as
the denoising steps increase" (4.2.2, Fig. 2). LangSAM cannot run here, so `object_mask` is a
deterministic stand-in on the final latent itself, one bit per latent pixel per frame:

1. Background estimate: the temporal median of each latent pixel over the frames when the video
   moves, else the spatial median of each frame (per channel). "Moves" (ours): at least 3 frames
   and the largest distance from the temporal median is above MOTION_RATIO times the largest
   distance from the spatial median; a static object vanishes into its own temporal median, so
   a static video falls back to the spatial estimate. The temporal estimate assumes each pixel
   shows the background in more than half of the frames; the spatial one, a background of one
   tone (a textured background that does not move is read as object where it differs).
2. Distance: the L2 norm over channels of latent minus estimate, per (frame, y, x); channels
   are not rescaled, so a near-constant channel's noise cannot outvote the others.
3. Threshold: Otsu's method (OTSU_BINS bins over the distances of the whole video), raised to
   at least median + NOISE_MADS robust standard deviations (1.4826 MAD) so that a video with no
   object, only noise, is not split in half. An element is object when its distance is above
   the threshold; an empty mask is allowed (the caller may then not offer the entry as an
   object source). By construction the mask covers at most half of the elements.

`pack_mask`/`unpack_mask` store a mask at 1 bit per element (4.3: "1 bit for each pixel"),
numpy's packbits order (C order, most significant bit first), zero padding to a whole byte.

`stitch` (4.2.2, Fig. 11) takes the object entry's latent where its object mask is set and the
background entry's latent elsewhere, except where the background entry had its own object (its
mask set): those pixels would show the old object (the paper's alien on the Moon), so they come
from the object entry's latent too, "replaced by pixels in the object cache at the same
location". The latent taken from the object entry is therefore the union of the two masks
("FlexCache will combine the two masks in case they do not perfectly align"). The same masks
serve every cached step of the two entries: stitch each step's pair of latents with them.
"""

from __future__ import annotations

import math
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from core.errors import CodecError, LatentError

MOTION_RATIO: Final = 0.25  # ours: a moving object keeps most of its contrast to the temporal median
OTSU_BINS: Final = 256  # ours: the usual 8-bit histogram resolution of Otsu's method
NOISE_MADS: Final = 3.0  # ours: three robust standard deviations above the median is not noise
_MAD_TO_STD: Final = 1.4826  # the normal distribution's ratio of standard deviation to MAD

Latent = npt.NDArray[Any]  # (C, F, h, w), any float dtype
Mask = npt.NDArray[np.bool_]  # (F, h, w)


def object_mask(final_latent: Latent) -> Mask:
    """Which latent pixels of each frame show the object: a bool (F, h, w) array (module doc)."""
    latent = np.asarray(final_latent, dtype=np.float64)
    if latent.ndim != 4 or 0 in latent.shape:
        raise LatentError(f"a video latent is (C, F, h, w) and non-empty, not {latent.shape}")
    distance = _background_distance(latent)
    threshold = _threshold(distance)
    if threshold is None:
        return np.zeros(distance.shape, dtype=np.bool_)
    return np.asarray(distance > threshold, dtype=np.bool_)


def _background_distance(latent: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Per (frame, y, x): the channel-norm distance from the background estimate (step 1, 2)."""
    spatial = np.median(latent, axis=(2, 3), keepdims=True)
    from_spatial = np.linalg.norm(latent - spatial, axis=0)
    if latent.shape[1] < 3:
        return np.asarray(from_spatial, dtype=np.float64)
    temporal = np.median(latent, axis=1, keepdims=True)
    from_temporal = np.linalg.norm(latent - temporal, axis=0)
    moves = from_temporal.max() > MOTION_RATIO * from_spatial.max()
    return np.asarray(from_temporal if moves else from_spatial, dtype=np.float64)


def _threshold(distance: npt.NDArray[np.float64]) -> float | None:
    """Otsu's threshold, at least the noise floor (step 3); None when all distances are equal."""
    values = distance.ravel()
    low, high = float(values.min()), float(values.max())
    if not high > low:
        return None
    counts, edges = np.histogram(values, bins=OTSU_BINS, range=(low, high))
    centres = (edges[:-1] + edges[1:]) / 2
    below = np.cumsum(counts)[:-1].astype(np.float64)
    above = values.size - below
    below_sum = np.cumsum(counts * centres)[:-1]
    below_mean = below_sum / np.maximum(below, 1)
    above_mean = (float(np.sum(counts * centres)) - below_sum) / np.maximum(above, 1)
    between = below * above * (below_mean - above_mean) ** 2
    otsu = float(edges[1 + int(np.argmax(between))])
    median = float(np.median(values))
    floor = median + NOISE_MADS * _MAD_TO_STD * float(np.median(np.abs(values - median)))
    return max(otsu, floor)


def pack_mask(mask: Mask) -> bytes:
    """The mask at 1 bit per element (C order, packbits' big-endian bit order, zero padded)."""
    array = np.asarray(mask)
    if array.dtype != np.bool_:
        raise LatentError(f"a mask is a bool array, not {array.dtype}")
    return np.packbits(array, axis=None).tobytes()


def unpack_mask(data: bytes, shape: tuple[int, ...]) -> Mask:
    """The mask `pack_mask` stored for an array of `shape`. Raises CodecError when the bytes do
    not fit the shape (length, or padding bits set: a mask of another shape)."""
    if any(size < 0 for size in shape):
        raise CodecError(f"mask shape {shape} has a negative size")
    count = math.prod(shape)
    if len(data) != (count + 7) // 8:
        raise CodecError(f"a mask of shape {shape} takes {(count + 7) // 8} bytes, not {len(data)}")
    bits = np.unpackbits(np.frombuffer(data, dtype=np.uint8))
    if bits[count:].any():
        raise CodecError(f"mask bytes set padding bits past {count} elements: not a mask of shape {shape}")
    return np.asarray(bits[:count].reshape(shape), dtype=np.bool_)


def stitch(
    object_latent: Latent, object_mask: Mask, background_latent: Latent, background_mask: Mask
) -> Latent:
    """One latent from two entries' latents of the same step (module doc): the object entry's
    where either mask is set, the background entry's elsewhere.

    Raises LatentError (a ValueError) when the latents differ in shape (frames, channels or
    size) or dtype, or a mask is not bool of the latents' (F, h, w).
    """
    objects = np.asarray(object_latent)
    backgrounds = np.asarray(background_latent)
    if objects.ndim != 4 or objects.shape != backgrounds.shape:
        raise LatentError(
            f"stitched latents must both be (C, F, h, w) of one shape: object {objects.shape}, "
            f"background {backgrounds.shape}"
        )
    if objects.dtype != backgrounds.dtype:
        raise LatentError(f"stitched latents differ in dtype: {objects.dtype} and {backgrounds.dtype}")
    masks = [np.asarray(mask) for mask in (object_mask, background_mask)]
    for name, mask in zip(("object", "background"), masks, strict=True):
        if mask.dtype != np.bool_ or mask.shape != objects.shape[1:]:
            raise LatentError(
                f"the {name} mask must be bool {objects.shape[1:]}, not {mask.dtype} {mask.shape}"
            )
    from_object = masks[0] | masks[1]
    return np.where(from_object[np.newaxis], objects, backgrounds)
