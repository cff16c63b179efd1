"""Generation parameters and their checks, done before any model work."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Protocol

from core.errors import InvalidInput, PromptError, SizeError, StepsError

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


def row_values(params: GenerationParams) -> dict[str, str | int | float | None]:
    """The job row's columns for these parameters: the one mapping back (inverse of params_from_row;
    the dataclass's fields are the columns' names)."""
    return asdict(params)
