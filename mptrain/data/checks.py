"""Checks of the data an experiment names before anything heavy runs (no TensorFlow): one entry,
`check_data`; `validate` asks for the `thorough` answer, which reads what `run` reads anyway.
"""

from __future__ import annotations

from typing import NamedTuple

from mptrain.data.dataset import InputSpec, split_sizes
from mptrain.errors import DataError

MNIST_TRAIN_EXAMPLES = 60_000  # MNIST and Fashion-MNIST


class DataCheck(NamedTuple):
    notes: list[str]  # what cannot be known before `run` (a data set to download)
    spec: InputSpec | None  # the inputs, when the config alone (or a CSV's header) says
    train_examples: int | None  # the examples a run trains on, when cheap to know (or thorough)
    labels: object = None  # what the labels are (`objective.LabelStats`), when read (thorough)


def check_data(data, thorough: bool = False) -> DataCheck:
    """Raise a DataError on data `run` could not load; what the data will be, when known."""
    notes = _check_files(data)
    examples, labels = _training_examples(data, thorough)
    return DataCheck(notes, _input_spec(data), examples, labels)


def _input_spec(data) -> InputSpec | None:
    """What the inputs will look like, when the config alone says (None: only the data knows)."""
    kind = data.dataset
    if kind == "synthetic":
        shape = tuple(data.input_shape)
        return InputSpec(shape, "image" if len(shape) == 3 else "vector")
    if kind == "synthetic_text":
        return InputSpec((data.sequence_length,), "tokens", data.vocab_size)
    if kind in ("mnist", "fashion_mnist"):
        return InputSpec((28, 28, 1), "image", pixels=True)
    if kind == "image_folder" and data.image_size is not None:  # else the images' own size
        return InputSpec((*data.image_size, 3 if data.color_mode == "rgb" else 1), "image",
                         pixels=True)
    if kind == "text_folder":
        return InputSpec((data.sequence_length,), "tokens", data.max_tokens)
    if kind == "csv" and data.inputs == "columns":
        return None  # which columns hold text, only the whole table says
    if kind == "csv":
        from mptrain.data.tabular import columns, read_header

        features, _ = columns(data, read_header(data.path, data.delimiter), data.path)
        return InputSpec((len(features),), "vector")
    if kind == "timeseries":
        from mptrain.data.tabular import read_header

        header = read_header(data.path, data.delimiter)
        features = data.feature_columns or [c for c in header if c != data.time_column]
        return InputSpec((data.sequence_length, len(features)), "vector")
    return None


def _training_examples(data, thorough: bool):
    """How many examples a run trains on, when that is cheap to know (or `thorough`), and
    what the labels are when they were read on the way (an .npz's, a CSV's)."""
    kind = data.dataset
    if kind in ("synthetic", "synthetic_text"):
        total = data.train_size
    elif kind in ("mnist", "fashion_mnist"):
        total = MNIST_TRAIN_EXAMPLES
    elif kind == "npz" and thorough:
        from mptrain.data.arrays import npz_training_examples

        return npz_training_examples(data)
    elif kind in ("image_folder", "text_folder") and thorough:
        from mptrain.data.folders import split_files
        from mptrain.objective import label_stats

        splits = split_files(data)
        labels = splits.train[1]
        return len(splits.train[0]), label_stats(labels, labels + splits.val[1] + splits.test[1],
                                                 f"data.path {data.path}", splits.classes)
    elif kind == "csv" and thorough:
        from mptrain.data.tabular import read_table

        table = read_table(data)
        return len(table.train_rows), table.stats
    elif kind == "image_masks" and thorough:
        from mptrain.data.masks import mask_stats, split_pairs

        train, val, test = split_pairs(data)
        return len(train), mask_stats(data, train, val + test)[0]
    elif kind == "timeseries" and thorough:
        from mptrain.data.series import cut

        windows = cut(data)
        return len(windows.starts[0]), windows.stats(f"{data.path} (data.target_columns)")
    else:
        return None, None
    return split_sizes(data, total)[1], None


def _check_files(data) -> list[str]:
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
        from mptrain.data.folders import list_classes

        classes = list_classes(path, kind).classes
        if data.test_path is not None:
            list_classes(data.test_path, kind, classes, key="data.test_path")
    if kind == "image_masks":
        from mptrain.data.masks import pairs

        pairs(data)
    if kind == "timeseries" and not path.is_file():
        raise DataError(f"data.path {path}: no such file")
    if kind == "csv":
        for key, csv_path in (("data.path", path), ("data.test_path", data.test_path)):
            if csv_path is not None and not csv_path.is_file():
                raise DataError(f"{key} {csv_path}: no such file")
    if kind == "tfds" and data.data_dir is not None and not data.data_dir.is_dir():
        raise DataError(f"data.data_dir {data.data_dir}: no such folder")
    return []
