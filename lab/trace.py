"""The lab trace: requests for the lab's world with the locality of real traffic.

A pool of `scenes` scenes is drawn from the seed; each request picks a scene by a Zipf law over the
pool's ranks (exponent `zipf`: a few scenes asked often, a long tail asked once) and words it with
a fresh caption (templates and synonyms: a repeat of a scene is a paraphrase, rarely the same
words). Scenes of the pool that differ in one attribute are near-misses of each other. Arrival
times come from a CSV of `arrival_ms,prompt_idx` (bench/data/arrivals/); the trace keeps their
times and numbers its own prompts in file order, so `--order trace` and `--order file-index` replay
the same sequence.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lab.captions import caption
from lab.world import sample_scene

DEFAULT_SCENES = 1500
DEFAULT_ZIPF = (
    1.0  # s of the Zipf law over scene ranks; 1.0 is the classic web-cache skew (Breslau et al. 1999)
)


@dataclass(frozen=True, slots=True)
class LabTrace:
    prompts: list[str]
    arrival_ms: list[float]
    scene_of: list[int]  # the pool index of each request's scene

    def write(self, directory: Path) -> tuple[Path, Path]:
        """prompts.txt (one per line, in request order) and arrivals.csv (arrival_ms,prompt_idx)."""
        directory.mkdir(parents=True, exist_ok=True)
        prompts, arrivals = directory / "prompts.txt", directory / "arrivals.csv"
        prompts.write_text("\n".join(self.prompts) + "\n")
        arrivals.write_text("".join(f"{ms:.1f},{i}\n" for i, ms in enumerate(self.arrival_ms)))
        return prompts, arrivals


def read_arrival_times(path: Path) -> list[float]:
    times = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            times.append(float(line.split(",")[0]))
        except ValueError:
            raise ValueError(f"{path}:{number}: {line!r} is not 'arrival_ms,prompt_idx'") from None
    return times


def lab_trace(
    arrival_ms: list[float], *, scenes: int = DEFAULT_SCENES, zipf: float = DEFAULT_ZIPF, seed: int = 0
) -> LabTrace:
    """One request per arrival time (see the module doc)."""
    if scenes < 1 or zipf < 0:
        raise ValueError("scenes must be at least 1 and zipf at least 0")
    rng = np.random.default_rng(seed)
    pool = [sample_scene(rng) for _ in range(scenes)]
    weights = 1.0 / np.arange(1, scenes + 1) ** zipf
    chosen = rng.choice(scenes, size=len(arrival_ms), p=weights / weights.sum())
    prompts = [caption(pool[int(index)], rng) for index in chosen]
    return LabTrace(prompts=prompts, arrival_ms=list(arrival_ms), scene_of=[int(i) for i in chosen])
