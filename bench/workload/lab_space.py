"""The quality lab's attribute space in simulation: MoDM's text-to-image lookup
(workers.runtime.embedders.lab_attributes, the lab's default) without generating images.

A prompt's vector is the service's own (its parsed attributes, `attribute_vector`). What a cached entry
is found by, the second judge's reading of the image the large model made for it, is drawn: each
attribute the prompt asks for is read as asked with probability `shown`, else as another value of
that attribute, uniformly. `shown` is the share of asked attributes the judge reads in the large
model's fresh images (a profile's fresh_quality: 0.69 on `lab/profiles/image-refine-small.json`). The
draw is seeded per prompt line, so a run repeats. A one-hot reading stands in for the judge's
probabilities: simulated similarities come in shares of the prompt's attributes (5/6, 7/9, ...), where
the stack's are spread around them.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np

from bench.workload.embeddings import TraceEmbeddings, Vectors
from bench.workload.trace import Prompts
from core.vocabulary import LAB_ATTRIBUTES


def simulated_reading(asked: dict[str, str], shown: float, rng: np.random.Generator) -> dict[str, str]:
    """What a judge reads in a generated image of `asked`: each attribute kept with probability `shown`."""
    from lab.world import ATTRIBUTES

    reading = {}
    for name, value in asked.items():
        others = [other for other in ATTRIBUTES[name] if other != value]
        reading[name] = value if rng.random() < shown else others[int(rng.integers(len(others)))]
    return reading


def lab_space_embeddings(
    prompts: Prompts, indices: Sequence[int], *, shown: float, dim: int
) -> TraceEmbeddings:
    """Queries (every prompt's attributes) and keys (a drawn reading of its image) for the lines in
    `indices`; ValueError naming the line when a prompt is not of the lab's world."""
    from lab.captions import parse
    from workers.runtime.embedders.lab_attributes import attribute_vector

    size = len(prompts.lines)
    queries: Vectors = np.zeros((size, dim), dtype=np.float32)
    keys: Vectors = np.zeros((size, dim), dtype=np.float32)
    for line in sorted(set(indices)):
        asked = parse(prompts.lines[line])
        if asked is None:
            raise ValueError(
                f"line {line + 1} is not a lab prompt ({prompts.lines[line]!r}): the lab's attribute space "
                "simulates lab traces only (`reprise lab trace`)"
            )
        rng = np.random.default_rng(zlib.crc32(prompts.lines[line].encode()))  # the request's seed (seed_of)
        queries[line] = attribute_vector(asked, dim)
        keys[line] = attribute_vector(simulated_reading(asked, shown, rng), dim)
    describe = {
        "name": LAB_ATTRIBUTES,
        "lookup": "text-to-image in the lab's attribute space (simulated readings)",
        "shown": shown,
        "dim": dim,
    }
    return TraceEmbeddings(vectors=queries, embed_ms_per_prompt=0.0, describe=describe, keys=keys)
