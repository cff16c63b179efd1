"""The diffusion runtime a model worker hosts: model loading per role, generation with latent
capture, resume (NIRVANA), refine (MoDM), decode (LatentBox), embedders and the quality score."""

from core.errors import RoleMismatch
from workers.runtime.denoising import ShouldStop
from workers.runtime.loading import TINY_NOTICE, ModelSources, VaeSource, resolve_model_sources
from workers.runtime.results import DecodeResult, GenerationResult, Latent
from workers.runtime.runtime import DiffusionRuntime
from workers.runtime.tiny import TinyModelPaths, ensure_tiny_models

__all__ = [
    "TINY_NOTICE",
    "DecodeResult",
    "DiffusionRuntime",
    "GenerationResult",
    "Latent",
    "ModelSources",
    "RoleMismatch",
    "ShouldStop",
    "TinyModelPaths",
    "VaeSource",
    "ensure_tiny_models",
    "resolve_model_sources",
]
