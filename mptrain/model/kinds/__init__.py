"""What a model kind is, in one place: a `ModelKind` checks the files its config names (no
TensorFlow), whether the data's inputs suit it, builds the model, bounds its training memory
from the config alone, and says which key changes a layer's size (lint's hint).

Every caller asks the kind found by `model.kind` (`model_kind`), never compares the name. A kind
registers itself by the name it reads (`class CNN(ModelKind, kind="cnn")`), as data sources
do: adding a kind is its config class (`config/kinds.py`) and its module in this package.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache
from pathlib import Path
from typing import Any, ClassVar

REGISTERED: dict[str, type[ModelKind]] = {}  # model.kind → its class, as each registers itself


class ModelKind:
    """One model kind; the defaults are a kind's that has nothing of its own to say. A
    subclass given `kind=NAME` is that kind (a base of several gives none)."""

    def __init_subclass__(cls, kind: str | None = None, **kwargs):
        super().__init_subclass__(**kwargs)
        if kind is not None:
            REGISTERED[kind] = cls

    # runs the user's code (a builder): it may read the training data, may compile the model
    # itself (then its compile can decide the objective), and travels to another process only
    # as a file
    runs_code: ClassVar[bool] = False

    def check(self, cfg) -> None:
        """Raise a ConfigError on files the config names that `run` could not read."""

    def check_fits(self, cfg, spec) -> None:
        """Raise a ConfigError where the data's inputs (`InputSpec`) cannot suit the kind."""

    def build(self, config, spec, objective, train_inputs=None) -> tuple[Any, list[str]]:
        """The keras.Model under the current policy, and notes on what mptrain did to it."""
        raise NotImplementedError

    def parameters_and_activations(self, config, spec) -> tuple[int, int] | None:
        """Parameters, and activation values kept for the backward pass per batch, from the
        config alone (`size.training_bytes_lower_bound`); None where only the built model
        knows."""
        return None

    def resize_hint(self, layer: str, what: str) -> str:
        """Which key changes the size of `layer` (lint's advice on dimensions)."""
        return "change it in the model's definition (builder kwargs, or the architecture)"


@cache
def kinds() -> dict[str, type[ModelKind]]:
    """Every kind: this package's modules imported (once), each registering its own; none
    imports Keras before it builds."""
    for module in pkgutil.iter_modules([str(Path(__file__).parent)]):
        importlib.import_module(f"{__package__}.{module.name}")
    return REGISTERED


def model_kind(cfg) -> ModelKind:
    """The kind of a model config (`config.model`: the schema admits only registered kinds)."""
    return kinds()[cfg.kind]()
