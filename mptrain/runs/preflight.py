"""Checks of an experiment against the files it names, before anything heavy runs.

The schema (`config/schema.py`) checks each value on its own; here are the checks that look
at the disk or combine keys: does the data exist, does the image folder have classes, does
the CSV have the label column, does the builder file define the function, can a saved
model's layers be loaded here, does the application accept images of this size, is the batch
larger than the data. Nothing here imports TensorFlow, so `validate` stays fast; `run` makes
the same checks first, and repeats the shape checks on the data it actually loads.

Every error names the experiment file, the key, and the absolute path it looked at.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
import zipfile
from pathlib import Path

from mptrain.config.schema import ExperimentConfig
from mptrain.data.dataset import InputSpec
from mptrain.errors import ConfigError, DataError, MptrainError

MIN_FREE_BYTES = 64 * 2**20
MNIST_TRAIN_EXAMPLES = 60_000  # MNIST and Fashion-MNIST


def check_experiment(config: ExperimentConfig, thorough: bool = False) -> list[str]:
    """Raise on anything `run` would refuse; return notes on what it cannot know yet.

    `thorough` (validate) also reads what `run` reads anyway before its first step: every
    row of a CSV, every file name of a folder, the arrays' sizes in an .npz, so the batch
    size is checked against the real number of training examples."""
    try:
        notes = _check_data(config.data)
        _check_model(config)
        _check_output(config.output.dir)
        _check_tracking(config)
        spec = static_input_spec(config.data)
        if spec is not None:
            from mptrain.model import check_model_fits

            check_model_fits(config, spec)
            check_sizes(config, spec)
        examples = training_examples(config.data, thorough)
        if examples is not None:
            check_batch_fits(config, examples)
    except MptrainError as exc:
        raise type(exc)(f"{config.source}: {exc}") from exc.__cause__
    return notes


def check_batch_fits(config: ExperimentConfig, train_examples: int) -> None:
    if config.train.batch_size > train_examples:
        raise ConfigError(f"train.batch_size {config.train.batch_size} is larger than the "
                          f"{train_examples} training examples; lower it to at most {train_examples}")


def check_sizes(config: ExperimentConfig, spec: InputSpec) -> None:
    """Refuse a model (or batch) whose training state cannot fit in this machine's memory,
    before allocating it: with the estimate."""
    from mptrain.runs.memory import machine_memory_bytes, static_training_bytes

    estimate = static_training_bytes(config, spec)
    available = machine_memory_bytes()
    if estimate is not None and available and estimate > available:
        raise ConfigError(
            f"this experiment needs about {estimate / 2**30:,.1f} GiB to train (weights, "
            f"gradients, optimizer state and activations of batch {config.train.batch_size}) "
            f"and this machine has {available / 2**30:,.1f} GiB; make the model "
            "(model.hidden_units, model.filters, model.embed_dim...) or train.batch_size smaller")


def _check_output(folder: Path) -> None:
    """The output folder can be created and written, and its disk is not full: found now,
    not after an hour of training."""
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"output.dir {folder}: is a file; point output.dir at a folder")
    existing = folder
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"output.dir {folder}: cannot write in {existing} (permissions); "
                          "choose another output.dir")
    try:  # permissions are not the only obstacle (a read-only or virtual file system)
        os.rmdir(tempfile.mkdtemp(prefix=".mptrain-check-", dir=existing))
    except OSError as exc:
        raise ConfigError(f"output.dir {folder}: cannot create folders in {existing} "
                          f"({exc.strerror}); choose another output.dir") from None
    free = shutil.disk_usage(existing).free
    if free < MIN_FREE_BYTES:
        raise ConfigError(f"output.dir {folder}: only {free / 2**20:.0f} MiB free on its disk; "
                          f"a run needs at least {MIN_FREE_BYTES / 2**20:.0f} MiB (checkpoints, model)")


def _check_tracking(config: ExperimentConfig) -> None:
    """`output.mlflow` needs the package; found without importing it (an import costs a
    second or two, and `validate` stays fast)."""
    if config.output.mlflow is not None and importlib.util.find_spec("mlflow") is None:
        raise ConfigError("output.mlflow needs MLflow: pip install 'mptrain[mlflow]' (or set "
                          "output.mlflow: null to train without tracking)")


def static_input_spec(data) -> InputSpec | None:
    """What the inputs will look like, when the config alone says (None: only the data knows)."""
    kind = data.dataset
    if kind == "synthetic":
        shape = tuple(data.input_shape)
        return InputSpec(shape, "image" if len(shape) == 3 else "vector")
    if kind == "synthetic_text":
        return InputSpec((data.sequence_length,), "tokens", data.vocab_size)
    if kind in ("mnist", "fashion_mnist"):
        return InputSpec((28, 28, 1), "image")
    if kind == "image_folder":
        return InputSpec((*data.image_size, 3 if data.color_mode == "rgb" else 1), "image")
    if kind == "text_folder":
        return InputSpec((data.sequence_length,), "tokens", data.max_tokens)
    if kind == "csv":
        from mptrain.data.tabular import columns, read_header

        features, _ = columns(data, read_header(data.path, data.delimiter), data.path)
        return InputSpec((len(features),), "vector")
    return None


def training_examples(data, thorough: bool) -> int | None:
    """How many examples a run trains on, when that is cheap to know (or `thorough`); an
    .npz's training labels are checked on the way (they are read anyway)."""
    kind = data.dataset
    if kind in ("synthetic", "synthetic_text"):
        total = data.train_size
    elif kind in ("mnist", "fashion_mnist"):
        total = MNIST_TRAIN_EXAMPLES
    elif kind == "npz" and thorough:
        from mptrain.data.arrays import check_npz_labels, npz_length

        total = npz_length(data.path, "x_train")
        check_npz_labels(data)
    elif kind in ("image_folder", "text_folder") and thorough:
        from mptrain.data.folders import split_files

        return len(split_files(data).train[0])
    elif kind == "csv" and thorough:
        from mptrain.data.tabular import read_table

        return len(read_table(data).train_rows)
    else:
        return None
    if data.max_train_examples:
        total = min(total, data.max_train_examples)
    return total - int(total * data.validation_split)


def _check_data(data) -> list[str]:
    kind = data.dataset
    path = getattr(data, "path", None)
    if kind == "npz" and not path.is_file():
        raise DataError(f"data.path {path}: no such file")
    if kind in ("mnist", "fashion_mnist"):
        from mptrain.data.arrays import check_given_path, local_copy, looked_in

        if path is not None:
            if not path.exists():
                raise DataError(f"data.path {path}: no such file or folder")
            check_given_path(kind, path)
        elif local_copy(kind) is None:
            return [f"{kind} is not on this machine (looked in {looked_in(kind)}); `run` will "
                    "try Keras' download, which needs the internet (docs/data.md)"]
    if kind in ("image_folder", "text_folder"):
        from mptrain.data.folders import IMAGE_EXTENSIONS, TEXT_EXTENSIONS, list_classes

        images = kind == "image_folder"
        extensions, what = (IMAGE_EXTENSIONS, "image") if images else (TEXT_EXTENSIONS, "text")
        classes = list_classes(path, extensions, what, key="data.path").classes
        if data.test_path is not None:
            list_classes(data.test_path, extensions, what, classes, key="data.test_path")
    if kind == "csv":
        for key, csv_path in (("data.path", path), ("data.test_path", data.test_path)):
            if csv_path is not None and not csv_path.is_file():
                raise DataError(f"{key} {csv_path}: no such file")
    if kind == "tfds" and data.data_dir is not None and not data.data_dir.is_dir():
        raise DataError(f"data.data_dir {data.data_dir}: no such folder")
    return []


def _check_model(config: ExperimentConfig) -> None:
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
