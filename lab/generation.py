"""The lab's models' own images, made inside the lab: what the second judge is compared on and what the
discriminator learns "generated" from (DiffServe 3.2 trains on both models' outputs).

Each model is its assembled pipeline (lab.models.assemble), loaded with `from_pretrained` as the
workers load it and run as `reprise lab quality` runs it: DDIM, `steps` steps, classifier-free
guidance, one seeded generator per caption (crc32 of the caption, bench.quality.profile.seed_of's
rule), in float32 on the CPU, in batches.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import torch

from lab.captions import caption
from lab.world import Scene, render, sample_scene

BATCH: Final = 32
STEPS: Final = 50  # the service's default T (core.settings: NIRVANA 6's N = 50 DDIM steps)
GUIDANCE: Final = 7.5  # `reprise lab quality`'s default
GENERATORS: Final = ("large", "small")  # the cascade's heavy and light models (DiffServe 3.2: both)

Images = list[npt.NDArray[np.uint8]]


def captioned_scenes(count: int, seed: int) -> tuple[list[Scene], list[str], Images]:
    """`count` random scenes, a caption of each and a jittered true render of each."""
    rng = np.random.default_rng(seed)
    scenes = [sample_scene(rng) for _ in range(count)]
    captions = [caption(scene, rng) for scene in scenes]
    return scenes, captions, [render(scene, rng) for scene in scenes]


def caption_seed(text: str) -> int:
    """A caption's generation seed: its crc32, as the benchmarks seed a request from its prompt."""
    return zlib.crc32(text.encode())


def generate(
    pipeline_dir: Path,
    captions: Sequence[str],
    *,
    steps: int = STEPS,
    guidance: float = GUIDANCE,
    log: Callable[[str], None] | None = None,
) -> Images:
    """One image per caption from the pipeline in `pipeline_dir`, as uint8 (64, 64, 3) arrays."""
    from diffusers import StableDiffusionPipeline

    library: Any = StableDiffusionPipeline
    pipe: Any = library.from_pretrained(str(pipeline_dir), dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    images: Images = []
    for start in range(0, len(captions), BATCH):
        chunk = list(captions[start : start + BATCH])
        generators = [torch.Generator().manual_seed(caption_seed(text)) for text in chunk]
        with torch.inference_mode():
            out = pipe(
                chunk,
                num_inference_steps=steps,
                guidance_scale=guidance,
                generator=generators,
                output_type="np",
            )
        images += [(np.asarray(image) * 255).round().clip(0, 255).astype(np.uint8) for image in out.images]
        if log is not None:
            log(f"{pipeline_dir.name}: {len(images)}/{len(captions)} generated")
    return images
