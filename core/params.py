"""Generation parameters of both kinds of job and their checks, done before any model work: an image
job's (GenerationParams), and a video job's (VideoParams: an image job's plus its frames and their
rate, FlexCache 5); and their mapping to and from a job row."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Protocol

from core.errors import InvalidInput, PromptError, SizeError, StepsError
from core.vocabulary import JobKind

VAE_SCALE_FACTOR = 8  # Stable Diffusion's VAE downsamples by 8; width and height must be multiples


@dataclass(frozen=True, slots=True)
class Limits:
    max_prompt_chars: int = 2000
    max_steps: int = 150
    max_side: int = 1024
    vae_scale_factor: int = VAE_SCALE_FACTOR


@dataclass(frozen=True, slots=True)
class GenerationParams:
    prompt: str
    seed: int = 0
    steps: int = 50
    width: int = 512
    height: int = 512
    guidance: float = 7.5
    negative_prompt: str | None = None


MAX_FRAMES = 128  # twice the paper's 64 (FlexCache 5); a latent of 128 frames at 320x512 is 5 MB
MAX_FPS = 60


@dataclass(frozen=True, slots=True)
class VideoParams(GenerationParams):
    """A video job's parameters. They extend GenerationParams, so the denoising loop, prompt encoding
    and check_params take them unchanged; only the noise (one more axis, F) and the output (frames, a
    WebP) differ. Defaults are FlexCache's (5, "Diffusion Model": VideoCrafter2 with FreeNoise):
    320x512 (height x width), 64 frames in 4 seconds (16 fps), 50 steps (GenerationParams' default)."""

    width: int = 512
    height: int = 320
    frames: int = 64
    fps: int = 16
    noise_window: int | None = None  # FreeNoise's window (5: 16 frames for VideoCrafter2); None: i.i.d.

    @property
    def seconds(self) -> float:
        return self.frames / self.fps


def check_params(params: GenerationParams, limits: Limits = Limits()) -> None:
    """Raise an InvalidInput subclass naming the field when the request cannot be served."""
    if not params.prompt.strip():
        raise PromptError("prompt is empty", field="prompt")
    if len(params.prompt) > limits.max_prompt_chars:
        raise PromptError(
            f"prompt has {len(params.prompt)} characters; the limit is {limits.max_prompt_chars}",
            field="prompt",
        )
    if params.negative_prompt is not None and len(params.negative_prompt) > limits.max_prompt_chars:
        raise PromptError(
            f"negative_prompt is longer than {limits.max_prompt_chars} characters", field="negative_prompt"
        )
    if not 1 <= params.steps <= limits.max_steps:
        raise StepsError(f"steps must be in 1..{limits.max_steps}, got {params.steps}", field="steps")
    for name, side in (("width", params.width), ("height", params.height)):
        if not limits.vae_scale_factor <= side <= limits.max_side:
            raise SizeError(
                f"{name} must be in {limits.vae_scale_factor}..{limits.max_side}, got {side}", field=name
            )
        if side % limits.vae_scale_factor:
            raise SizeError(
                f"{name} must be a multiple of {limits.vae_scale_factor} (the VAE factor), got {side}",
                field=name,
            )
    if not 0.0 <= params.guidance <= 50.0:
        raise InvalidInput(f"guidance must be in 0..50, got {params.guidance}", field="guidance")
    if not 0 <= params.seed < 2**63:
        raise InvalidInput(f"seed must be in 0..2^63-1, got {params.seed}", field="seed")


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


def check_k(k: int, steps: int) -> None:
    """k is the number of steps skipped: it must leave at least one step to run."""
    if not 1 <= k <= steps - 1:
        raise StepsError(f"k must be in 1..{steps - 1} for {steps} steps, got {k}", field="k")


# --- the job row's form of the parameters -------------------------------------------------------


class ParamsRow(Protocol):
    """What a job row holds of its parameters (db.models.Job satisfies it; core never imports db)."""

    prompt: str
    negative_prompt: str | None
    seed: int
    steps: int
    width: int
    height: int
    guidance: float


def params_from_row(row: ParamsRow) -> GenerationParams:
    """The parameters a stored job asked for: the one mapping from a job row to GenerationParams."""
    return GenerationParams(
        prompt=row.prompt,
        negative_prompt=row.negative_prompt,
        seed=row.seed,
        steps=row.steps,
        width=row.width,
        height=row.height,
        guidance=row.guidance,
    )


class VideoParamsRow(ParamsRow, Protocol):
    """What a video job's row holds of its parameters (db.models.Job satisfies it)."""

    frames: int | None
    fps: int | None
    noise_window: int | None


def video_params_from_row(row: VideoParamsRow) -> VideoParams:
    """A stored video job's parameters (the inverse of row_values, whose columns the dataclass's
    fields name, frames, fps and noise_window included)."""
    if row.frames is None or row.fps is None:
        raise InvalidInput("a video job's row has no frames or fps", field="frames")
    return VideoParams(
        **asdict(params_from_row(row)), frames=row.frames, fps=row.fps, noise_window=row.noise_window
    )


class JobRow(VideoParamsRow, Protocol):
    """A job row of either kind (db.models.Job satisfies it)."""

    kind: str


def job_params(row: JobRow) -> GenerationParams:
    """A stored job's parameters, of its kind: VideoParams for a video job, GenerationParams else."""
    return video_params_from_row(row) if row.kind == JobKind.VIDEO else params_from_row(row)


def row_values(params: GenerationParams) -> dict[str, str | int | float | None]:
    """The job row's columns for these parameters: the one mapping back (inverse of params_from_row;
    the dataclass's fields are the columns' names)."""
    return asdict(params)
