"""A video job's parameters (issue 18, FlexCache): an image job's plus the number of frames and
their rate, checked before any model work like core.params.

VideoParams extends GenerationParams, so the denoising loop, prompt encoding and check_params
take it unchanged; only the noise (one more axis, F) and the output (frames, a WebP) differ.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Protocol

from core.errors import InvalidInput
from core.params import GenerationParams, Limits, ParamsRow, check_params, params_from_row

MAX_FRAMES = 128  # twice the paper's 64 (FlexCache 5); a latent of 128 frames at 320x512 is 5 MB
MAX_FPS = 60


@dataclass(frozen=True, slots=True)
class VideoParams(GenerationParams):
    """Defaults are FlexCache's (5, "Diffusion Model": VideoCrafter2 with FreeNoise): 320x512
    (height x width), 64 frames in 4 seconds (16 fps), 50 steps (GenerationParams' default)."""

    width: int = 512
    height: int = 320
    frames: int = 64
    fps: int = 16
    noise_window: int | None = None  # FreeNoise's window (5: 16 frames for VideoCrafter2); None: i.i.d.

    @property
    def seconds(self) -> float:
        return self.frames / self.fps


def check_video_params(params: VideoParams, limits: Limits = Limits()) -> None:
    """check_params, then the frames and their rate; raises an InvalidInput subclass naming the field."""
    check_params(params, limits)
    if not 1 <= params.frames <= MAX_FRAMES:
        raise InvalidInput(f"frames must be in 1..{MAX_FRAMES}, got {params.frames}", field="frames")
    if not 1 <= params.fps <= MAX_FPS:
        raise InvalidInput(f"fps must be in 1..{MAX_FPS}, got {params.fps}", field="fps")
    if params.noise_window is not None and not 1 <= params.noise_window <= params.frames:
        raise InvalidInput(
            f"noise_window must be in 1..frames ({params.frames}), got {params.noise_window}",
            field="noise_window",
        )


class VideoParamsRow(ParamsRow, Protocol):
    """What a video job's row holds of its parameters (db.models.Job satisfies it)."""

    frames: int | None
    fps: int | None
    noise_window: int | None


def video_params_from_row(row: VideoParamsRow) -> VideoParams:
    """A stored video job's parameters (the inverse of core.params.row_values, whose columns the
    dataclass's fields name, frames, fps and noise_window included)."""
    if row.frames is None or row.fps is None:
        raise InvalidInput("a video job's row has no frames or fps", field="frames")
    return VideoParams(
        **asdict(params_from_row(row)), frames=row.frames, fps=row.fps, noise_window=row.noise_window
    )
