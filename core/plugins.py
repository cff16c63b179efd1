"""The plugin registry: what a package beside the platform (the quality lab) provides to the runtime,
looked up by name, so that serving code never imports that package.

A plugin is a function `register(registry: Registry) -> None` named in the `reprise.plugins` entry point
group of an installed distribution (pyproject.toml: `lab = "lab.registration:register"`). The registry
calls every plugin once, on its first lookup. A name no plugin registered is a SettingsError naming
what is registered and how to add one: there is never a fallback.

What a plugin registers, each under the name the settings use, as a factory of the settings:
- model sources: a built model's id ("lab:large", "lab:video") -> its pipeline directory, built or
  assembled on first use (workers.runtime.loading, workers.runtime.video);
- image scorers, by the model set whose images they judge ("lab"; workers.runtime.quality);
- video scorers, by the video model whose videos they judge ("lab:video"; workers.context);
- the discriminator's feature readers, by core.vocabulary.DiscriminatorFeatures ("lab"; workers.cascade);
- image embedders, by REPRISE_OPEN_CLIP_MODEL ("lab:attributes"; workers.runtime.embedders.factory).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from core.errors import SettingsError
from core.settings import Settings

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from core.embedders import ImageEmbedder
    from core.scoring import Scorer, VideoScorer

ENTRY_POINT_GROUP = "reprise.plugins"

T = TypeVar("T")


class FeatureReader(Protocol):
    """Reads images for the cascade's discriminator (DiffServe 3.2): one row of features per image."""

    def features(self, images: Sequence[Any]) -> npt.NDArray[np.float64]: ...


class Kind(Generic[T]):
    """One kind of thing plugins provide: names -> factories that build it from the settings."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.factories: dict[str, Callable[[Settings], T]] = {}

    def add(self, name: str, factory: Callable[[Settings], T]) -> None:
        if name in self.factories:
            raise SettingsError(f"two plugins register the {self.what} {name!r}")
        self.factories[name] = factory


class Registry:
    """The kinds the runtime looks up, filled by the plugins of an entry point group on first lookup."""

    def __init__(self, group: str = ENTRY_POINT_GROUP) -> None:
        self.group = group
        self.models: Kind[Path] = Kind("model source")
        self.image_scorers: Kind[Scorer] = Kind("image scorer")
        self.video_scorers: Kind[VideoScorer] = Kind("video scorer")
        self.feature_readers: Kind[FeatureReader] = Kind("discriminator feature reader")
        self.image_embedders: Kind[ImageEmbedder] = Kind("image embedder")
        self._kinds: list[Kind[Any]] = [
            self.models,
            self.image_scorers,
            self.video_scorers,
            self.feature_readers,
            self.image_embedders,
        ]
        self._loaded = False
        self._loading = threading.Lock()

    def build(self, kind: Kind[T], name: str, settings: Settings) -> T:
        """What `name`'s factory builds from `settings`; SettingsError when no plugin registered it."""
        self.load()
        factory = kind.factories.get(name)
        if factory is None:
            registered = ", ".join(sorted(kind.factories)) or "none"
            raise SettingsError(
                f"no {kind.what} named {name!r} is registered (registered: {registered}); a package "
                f"registers one in a `register(registry)` function named in the {self.group!r} entry "
                "point group of its pyproject.toml (as lab.registration is), and is installed "
                "(`pip install -e .`)"
            )
        return factory(settings)

    def load(self) -> None:
        """Call every plugin of the group, once per process (several threads may look up at once)."""
        with self._loading:
            if self._loaded:
                return
            try:
                for point in entry_points(group=self.group):
                    point.load()(self)
            except BaseException:  # none half-registered: the next lookup tries them all again
                for kind in self._kinds:
                    kind.factories.clear()
                raise
            self._loaded = True


REGISTRY = Registry()


def model_path(settings: Settings, name: str) -> Path:
    """The pipeline directory of the built model `name` (e.g. 'lab:large'), built on first use."""
    return REGISTRY.build(REGISTRY.models, name, settings)


def image_scorer(settings: Settings, model_set: str) -> Scorer:
    """The scorer of the images of `model_set`'s models (e.g. 'lab': the lab's judge)."""
    return REGISTRY.build(REGISTRY.image_scorers, model_set, settings)


def video_scorer(settings: Settings, video_model: str) -> VideoScorer:
    """The scorer of `video_model`'s videos (e.g. 'lab:video': the lab's video judge)."""
    return REGISTRY.build(REGISTRY.video_scorers, video_model, settings)


def feature_reader(settings: Settings, features: str) -> FeatureReader:
    """What reads images for a discriminator of `features` (a DiscriminatorFeatures value, e.g. 'lab')."""
    return REGISTRY.build(REGISTRY.feature_readers, features, settings)


def image_embedder(settings: Settings, name: str) -> ImageEmbedder:
    """The joint text-image space REPRISE_OPEN_CLIP_MODEL names (e.g. 'lab:attributes')."""
    return REGISTRY.build(REGISTRY.image_embedders, name, settings)
