"""Scoring an image against its prompt: the one interface every quality scorer implements.

Two scorers implement it. The quality lab's judge (lab.judge.Judge) reads every attribute of a lab
image; its score is the share of the prompt's attributes it reads in the image, 0..1, and it has no
score (None) for a prompt that does not describe a scene of the lab's world. CLIP score
(workers.runtime.quality.ClipScore, NIRVANA 4.1 and MoDM 5.2) is 100 x cosine(image, prompt) in
CLIP's space, clipped at 0: 0..100, a score for every prompt. A serving worker holds the one its
models call for (workers.context.WorkerContext.scorer), and never needs to know which it is;
reports say which one produced a number by its `name` and `scale`.

Videos have theirs (VideoScorer): the lab's video judge on the lab's trained video model
(workers.context.WorkerContext.video_scorer).

A scorer that can also say how clearly it reads an image (the judge) implements ConfidenceReader:
the cascade's discriminator reads those confidences (DiffServe 3.2).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    from PIL import Image


@dataclass(frozen=True, slots=True)
class ScoreScale:
    """What a scorer's numbers mean: their range (higher is better) and their unit, in words."""

    low: float
    high: float
    unit: str

    def __str__(self) -> str:
        return f"{self.unit}, {self.low:g}..{self.high:g}"


JUDGE_SCALE = ScoreScale(0.0, 1.0, "share of the prompt's attributes the lab judge reads in the image")
CLIP_SCALE = ScoreScale(0.0, 100.0, "CLIPScore: 100 x cosine(image, prompt), clipped at 0")


class VideoScorer(Protocol):
    """Scores (video, prompt) pairs, a video being (F, H, W, 3) uint8 frames: the lab's video judge
    (lab.video.judge) on lab:video's videos, a share of the prompt's attributes read (JUDGE_SCALE)."""

    @property
    def name(self) -> str: ...

    def reads(self, prompt: str) -> bool:
        """Whether this scorer has a score for a video of `prompt` (a moving scene of the lab's world)."""
        ...

    def score(
        self, videos: Sequence[npt.NDArray[np.uint8]], prompts: Sequence[str]
    ) -> Sequence[float | None]:
        """One score per (videos[i], prompts[i]) pair; None for a prompt it does not read."""
        ...


@runtime_checkable
class Scorer(Protocol):
    """Scores (image, prompt) pairs: how well each image shows its prompt, higher is better.

    `name` says which scorer produced a number ("lab-judge", "clip-score") and `scale` its range:
    the lab judge's scores are shares of attributes read (JUDGE_SCALE, 0..1), CLIP score's are
    CLIPScore points (CLIP_SCALE, 0..100). Numbers of two scorers are not comparable.
    """

    @property
    def name(self) -> str: ...

    @property
    def scale(self) -> ScoreScale: ...

    def reads(self, prompt: str) -> bool:
        """Whether this scorer has a score for an image of `prompt` (CLIP score: every prompt; the
        judge: a prompt of a lab scene), so that a caller need not make an image only to learn that
        it goes unscored."""
        ...

    def score(self, images: Sequence[Image.Image], prompts: Sequence[str]) -> Sequence[float | None]:
        """One score per (images[i], prompts[i]) pair, in `scale`; None for a prompt this scorer
        cannot read (the judge: a prompt of no lab scene). Raises ValueError when the two sequences
        differ in length."""
        ...


@runtime_checkable
class ConfidenceReader(Protocol):
    """A scorer that also says how clearly it reads each image, without a prompt: the features the
    cascade's discriminator reads (DiffServe 3.2) where the light model's images are the lab's."""

    def confidences(self, images: Sequence[Image.Image]) -> npt.NDArray[np.float64]:
        """(n, features) floats, one row per image."""
        ...
