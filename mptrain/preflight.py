"""Checks of an experiment against the files it names, before anything heavy runs.

The schema (`config/schema.py`) checks each value on its own; here are the checks that look
at the disk or combine keys: does the data path exist, does the image folder have classes,
does the CSV have the label column, does the builder file define the function, does the
application accept images of this size. Nothing here imports TensorFlow, so `validate` stays
fast; the same checks run at the start of `run` and `compare`, and `model.check_model_fits`
repeats the shape checks on the data actually loaded.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from mptrain.config.schema import ExperimentConfig
from mptrain.data.dataset import InputSpec
from mptrain.errors import ConfigError, DataError

MIN_FREE_BYTES = 64 * 2**20


def check_experiment(config: ExperimentConfig) -> None:
    _check_data(config.data)
    _check_model(config)
    _check_output(config.output.dir)
    spec = static_input_spec(config.data)
    if spec is not None:
        from mptrain.model import check_model_fits

        check_model_fits(config, spec)
        check_sizes(config, spec)
    if config.data.dataset == "synthetic":
        check_batch_fits(config, config.data.train_size - int(config.data.train_size
                                                              * config.data.validation_split))


def check_batch_fits(config: ExperimentConfig, train_examples: int) -> None:
    if config.train.batch_size > train_examples:
        raise ConfigError(f"train.batch_size {config.train.batch_size} is larger than the "
                          f"{train_examples} training examples; lower it to at most {train_examples}")


def check_sizes(config: ExperimentConfig, spec: InputSpec) -> None:
    """Refuse a model (or batch) whose training state cannot fit in this machine's memory,
    before allocating it: with the estimate."""
    from mptrain.memory import machine_memory_bytes, static_training_bytes

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


def _check_data(data) -> None:
    kind = data.dataset
    path = getattr(data, "path", None)
    if kind == "npz" and not path.is_file():
        raise DataError(f"data.path {path}: no such file")
    if kind in ("mnist", "fashion_mnist") and path is not None:
        if not path.exists():
            raise DataError(f"data.path {path}: no such file or folder")
        from mptrain.data.arrays import check_given_path

        check_given_path(kind, path)
    if kind in ("image_folder", "text_folder"):
        from mptrain.data.folders import IMAGE_EXTENSIONS, TEXT_EXTENSIONS, list_classes

        images = kind == "image_folder"
        extensions, what = (IMAGE_EXTENSIONS, "image") if images else (TEXT_EXTENSIONS, "text")
        classes = list_classes(path, extensions, what).classes
        if data.test_path is not None:
            list_classes(data.test_path, extensions, what, classes)
    if kind == "csv":
        for csv_path in filter(None, (path, data.test_path)):
            if not csv_path.is_file():
                raise DataError(f"data.path {csv_path}: no such file")
    if kind == "tfds" and data.data_dir is not None and not data.data_dir.is_dir():
        raise DataError(f"data.data_dir {data.data_dir}: no such folder")


def _check_model(config: ExperimentConfig) -> None:
    model = config.model
    if model.kind == "python":
        from mptrain.model.python_builder import check_builder

        check_builder(model.builder)
    elif model.kind == "saved":
        from mptrain.model.saved import check_saved

        check_saved(model)
    elif model.kind == "application" and model.weights not in (None, "imagenet"):
        from pathlib import Path

        if not Path(model.weights).is_file():
            raise ConfigError(f"model.weights {model.weights}: no such file")
