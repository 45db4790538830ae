"""Checks of the model an experiment names, made before anything heavy runs (no TensorFlow).

One entry, `check_model`: does the builder file define the function, can a saved model's
layers be loaded here, does a weights file exist, and (given the data's inputs) does the
model accept them: image size, channels, vocabulary, sequence length.
"""

from __future__ import annotations

import importlib.util
import json
import zipfile
from pathlib import Path

from mptrain.config.schema import ExperimentConfig
from mptrain.data.dataset import InputSpec
from mptrain.errors import ConfigError


def check_model(config: ExperimentConfig, spec: InputSpec | None) -> None:
    """Raise a ConfigError on a model `run` could not build; with `spec`, on inputs the
    model cannot take."""
    _check_files(config)
    if spec is not None:
        check_model_fits(config, spec)


def check_model_fits(config: ExperimentConfig, spec: InputSpec) -> None:
    """Before training: does the data's input suit the model (image size, channels,
    vocabulary, sequence length)? An error names the key to change."""
    kind = config.model.kind
    if kind == "application":
        from mptrain.model.applications import check_application_fits

        check_application_fits(config.model, spec)
    elif kind == "transformer":
        from mptrain.model.transformer import check_transformer_fits

        check_transformer_fits(config.model, spec)
    elif kind == "cnn" and len(spec.shape) != 3:
        raise ConfigError(f"model.kind cnn needs image inputs (height, width, channels); this "
                          f"data set's examples have shape {spec.shape}")


def _check_files(config: ExperimentConfig) -> None:
    model = config.model
    if model.kind == "python":
        from mptrain.model.python_builder import check_builder

        check_builder(model.builder)
    elif model.kind == "saved":
        from mptrain.model.saved import check_saved

        check_saved(model)
        _check_saved_layers(model.path)
    elif model.kind == "application" and model.weights not in (None, "imagenet") \
            and not Path(model.weights).is_file():
        raise ConfigError(f"model.weights {model.weights}: no such file")



def _check_saved_layers(path: Path) -> None:
    """Every class a saved model names can be found here: Keras' own, or one from a module
    that imports. A custom layer saved from a script (not registered in an importable module)
    cannot be loaded, and `run` would fail on it."""
    try:
        with zipfile.ZipFile(path) as archive:
            saved = json.loads(archive.read("config.json"))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as exc:
        raise ConfigError(f"model.path {path}: not a readable .keras file ({exc})") from None
    missing = sorted({name for name, module in _classes(saved) if not _importable(module)})
    if missing:
        raise ConfigError(
            f"model.path {path}: the model uses {', '.join(missing)}, which cannot be loaded "
            "here: a custom layer must be registered (keras.saving.register_keras_serializable) "
            "in a module this Python can import, e.g. the package of your builder")



def _classes(node) -> list[tuple[str, str | None]]:
    """(class name, module) of every object in a saved model's config."""
    found = []
    if isinstance(node, dict):
        if "class_name" in node and "module" in node:
            found.append((node.get("registered_name") or node["class_name"], node["module"]))
        for value in node.values():
            found += _classes(value)
    elif isinstance(node, list):
        for value in node:
            found += _classes(value)
    return found



def _importable(module: str | None) -> bool:
    if module is None or module in ("__main__", "builtins"):
        return False
    if module == "keras" or module.startswith("keras."):
        return True
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False
