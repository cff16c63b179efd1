"""The quality lab's attribute space in simulation: MoDM's text-to-image lookup
(lab.attribute_space, the lab's default) without generating images.

A prompt's vector is the service's own (its parsed attributes, `attribute_vector`). What a cached entry
is found by, the second judge's reading of the image the large model made for it, is drawn:

- from measured readings, when the profile the quality model reads holds them (`reprise profile k
  --mode image` on the lab keeps the reading of every cached image it generated, with the prompt it was
  made for): a reading of a prompt of the same attributes (one object or two) is drawn, and in each of
  its attribute blocks the coordinates of the value that prompt asked and of the value this one asks
  are swapped. The reading keeps what the judge read: its confidence, how its misreads fall together in
  one image, and the second object's weight, so simulated similarities spread as the stack's do;
- else as one-hot readings (profiles made before readings were kept): each attribute the prompt asks
  for is read as asked with probability `shown`, the share of asked attributes the judge reads in the
  large model's fresh images (a profile's fresh_quality), else as another value, uniformly; then
  similarities come in shares of the prompt's attributes (5/6, 8/9, ...), where the stack's are spread
  around them.

A prompt the lab's world cannot express (lab.captions.parse reads nothing in it, e.g. a DiffusionDB
prompt) gets the service's vector for it too: the space's last coordinate, orthogonal to every image
(attribute_vector(None)), so it finds no cached image by similarity, as on the stack; only the identical
prompt's entry serves it (admission's prompt key, bench.sim.cache). What the second judge would read in
the image the large model draws for it cannot be known without drawing it: its key is a reading that
favours no value (`outside_reading`, each attribute's probabilities even, the second object's blocks
weighted by the arrangements that show one), whose cosine with any lab prompt stays under 0.5, below
every row of the lab's image table (lab-t2i's 0.85), so it serves no lab prompt either.

The draw is seeded per prompt line, so a run repeats.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bench.workload.embeddings import TraceEmbeddings, Vectors
from bench.workload.trace import Prompts
from core.vocabulary import LAB_ATTRIBUTES

READING_DECIMALS = 4  # a reading's coordinates as a profile keeps them


@dataclass(frozen=True, slots=True)
class Reading:
    """The second judge's reading of the image made for a prompt asking `asked`, in the lab's space."""

    asked: dict[str, str]
    vector: npt.NDArray[np.float32]


def reading_record(prompt: str, vector: npt.NDArray[np.float32]) -> dict[str, Any]:
    """A reading as a profile keeps it: the prompt and the space's coordinates (without the trailing zeros
    of a wider column)."""
    from lab.attribute_space import space_size

    return {"prompt": prompt, "vector": [round(float(x), READING_DECIMALS) for x in vector[: space_size()]]}


def profiled_readings(records: Sequence[dict[str, Any]]) -> list[Reading]:
    """A profile's readings (`reading_record`), those of prompts of the lab's world."""
    from lab.captions import parse

    readings = []
    for record in records:
        asked = parse(str(record["prompt"]))
        if asked is not None:
            readings.append(Reading(asked, np.asarray(record["vector"], dtype=np.float32)))
    return readings


def readings_of(profile: Path) -> list[Reading]:
    """The readings a profile file keeps (none in one made before they were kept)."""
    data = json.loads(profile.read_text())
    return profiled_readings(data.get("readings", []))


def simulated_reading(asked: dict[str, str], shown: float, rng: np.random.Generator) -> dict[str, str]:
    """What a judge reads in a generated image of `asked`: each attribute kept with probability `shown`."""
    from lab.world import ATTRIBUTES

    reading = {}
    for name, value in asked.items():
        others = [other for other in ATTRIBUTES[name] if other != value]
        reading[name] = value if rng.random() < shown else others[int(rng.integers(len(others)))]
    return reading


def drawn_reading(
    asked: dict[str, str], readings: Sequence[Reading], rng: np.random.Generator, dim: int
) -> npt.NDArray[np.float32] | None:
    """A measured reading of a prompt of the same attributes as `asked`, moved onto its values; None
    when no reading has them."""
    from lab.attribute_space import value_coordinate

    alike = [reading for reading in readings if reading.asked.keys() == asked.keys()]
    if not alike:
        return None
    reading = alike[int(rng.integers(len(alike)))]
    vector = np.zeros(dim, dtype=np.float32)
    vector[: len(reading.vector)] = reading.vector
    for name, value in asked.items():
        read_for, wanted = value_coordinate(name, reading.asked[name]), value_coordinate(name, value)
        vector[[read_for, wanted]] = vector[[wanted, read_for]]
    normalised: npt.NDArray[np.float32] = vector / np.float32(np.linalg.norm(vector))
    return normalised


def outside_reading(dim: int) -> npt.NDArray[np.float32]:
    """The key of an image made for a prompt outside the lab's world (module docstring): the second
    judge's reading with every attribute's values equally likely, laid out as the service lays out a
    reading (lab.attribute_space: the second object's blocks weighted by the
    probability that the image shows two objects), unit length."""
    from lab.attribute_space import value_coordinate
    from lab.world import ATTRIBUTES, PAIR_LAYOUTS

    pair = len(PAIR_LAYOUTS) / len(ATTRIBUTES["arrangement"])  # even arrangement probabilities
    vector = np.zeros(dim, dtype=np.float32)
    for name, values in ATTRIBUTES.items():
        weight = pair if name.startswith("b_") else 1.0
        for value in values:
            vector[value_coordinate(name, value)] = weight / len(values)
    normalised: npt.NDArray[np.float32] = vector / np.float32(np.linalg.norm(vector))
    return normalised


def lab_space_embeddings(
    prompts: Prompts,
    indices: Sequence[int],
    *,
    shown: float,
    dim: int,
    readings: Sequence[Reading] = (),
) -> TraceEmbeddings:
    """Queries (every prompt's vector as the service embeds it) and keys (a drawn reading of its image)
    for the lines in `indices`; a prompt outside the lab's world lands where the service puts it, its
    image on `outside_reading` (module docstring)."""
    from lab.attribute_space import attribute_vector
    from lab.captions import parse

    size = len(prompts.lines)
    queries: Vectors = np.zeros((size, dim), dtype=np.float32)
    keys: Vectors = np.zeros((size, dim), dtype=np.float32)
    outside = 0
    for line in sorted(set(indices)):
        asked = parse(prompts.lines[line])
        if asked is None:
            queries[line] = attribute_vector(None, dim)
            keys[line] = outside_reading(dim)
            outside += 1
            continue
        rng = np.random.default_rng(zlib.crc32(prompts.lines[line].encode()))  # the request's seed (seed_of)
        queries[line] = attribute_vector(asked, dim)
        drawn = drawn_reading(asked, readings, rng, dim)
        if drawn is None:
            drawn = attribute_vector(simulated_reading(asked, shown, rng), dim)
        keys[line] = drawn
    describe = {
        "name": LAB_ATTRIBUTES,
        "lookup": "text-to-image in the lab's attribute space "
        + (f"({len(readings)} measured readings)" if readings else "(simulated one-hot readings)"),
        "shown": shown,
        "dim": dim,
        "outside_world": outside,  # distinct prompts the lab's world cannot express: they match no image
    }
    return TraceEmbeddings(vectors=queries, embed_ms_per_prompt=0.0, describe=describe, keys=keys)
