"""The diffusion runtime a model worker hosts: model loading per role, generation with latent
capture, resume (NIRVANA), refine (MoDM), decode (LatentBox), step-level batching of several jobs'
denoising runs, embedders and the quality score."""

from core.errors import BatchFull, RoleMismatch
from workers.runtime.batching import BATCH_ATOL, BatchMember, BatchStep, DenoisingBatch
from workers.runtime.denoising import ShouldStop
from workers.runtime.loading import TINY_NOTICE, ModelSources, VaeSource, resolve_model_sources
from workers.runtime.results import DecodeResult, GenerationResult, Latent
from workers.runtime.runtime import DiffusionRuntime
from workers.runtime.tiny import TinyModelPaths, ensure_tiny_models

__all__ = [
    "BATCH_ATOL",
    "TINY_NOTICE",
    "BatchFull",
    "BatchMember",
    "BatchStep",
    "DecodeResult",
    "DenoisingBatch",
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
