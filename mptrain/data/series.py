"""`timeseries`: windows of a time series in a CSV table, for forecasters.

The table is read once into memory (numbers only: a timestamp column is left out by name),
the timeline split by time into training, validation and test parts, and each part cut into
the windows `keras.utils.timeseries_dataset_from_array` makes: `sequence_length` rows taken
every `sampling_rate` rows, with the target columns `target_offset` rows after the window's
last row as its target (keras.io's weather forecasting offsets its targets the same way). A
window belongs to a part only when its first row and its target row both lie in it, so
nothing the test part holds is ever trained on. Windows are gathered by index as batches are
made, never materialised (a 420,000-row table at 120 steps of 7 features would be 1.4 GB).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mptrain.config.kinds import TimeseriesData
from mptrain.data.dataset import Dataset, InputSpec, Split, standardisation
from mptrain.data.source import Source
from mptrain.data.tabular import is_number, read_header, table_rows
from mptrain.errors import DataError
from mptrain.objective import label_stats


def read_series(cfg: TimeseriesData) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The feature columns' names, the features (rows, features) and the targets (rows,
    targets), as float32, every cell checked to be a finite number."""
    header = read_header(cfg.path, cfg.delimiter)
    targets = [cfg.target_columns] if isinstance(cfg.target_columns, str) else list(cfg.target_columns)
    features = cfg.feature_columns or [c for c in header if c != cfg.time_column]
    missing = [c for c in [*targets, *features, *([cfg.time_column] if cfg.time_column else [])]
               if c not in header]
    if missing:
        raise DataError(f"{cfg.path}: no column {missing[0]!r}; the columns are {', '.join(header)}")
    wanted = [header.index(c) for c in [*features, *targets]]
    values = []
    rows = table_rows(cfg.path, cfg.delimiter)
    next(rows, None)  # the header
    for line, row in rows:
        try:
            cells = [float(row[i]) for i in wanted]
        except (ValueError, IndexError):
            bad = next((i for i in wanted if i >= len(row) or not is_number(row[i])), wanted[0])
            shown = repr(row[bad]) if bad < len(row) else "nothing"
            raise DataError(f"{cfg.path}, line {line}, column {bad + 1} ({header[bad]}): {shown} is "
                            "not a number; a time series takes numbers (set time_column to the "
                            "timestamps' column)") from None
        if not all(map(math.isfinite, cells)):
            raise DataError(f"{cfg.path}, line {line}: a cell is NaN or infinite; fill the gap first")
        values.append(cells)
    table = np.asarray(values, np.float32).reshape(-1, len(wanted))
    return features, table[:, :len(features)], table[:, len(features):]


@dataclass(frozen=True)
class Windows:
    """A table cut into windows: its features (normalised when asked), its targets, and the
    first row of each training, validation and test window (numbers only: no TensorFlow, so
    `validate` reads it too)."""

    names: list[str]
    features: np.ndarray
    targets: np.ndarray  # (rows,) for one target column, else (rows, targets)
    starts: list[np.ndarray]  # train, validation, test
    offset: int  # a window's target row, from its first
    notes: list[str]
    scale: tuple[list[float], list[float]] | None = None  # (mean, std) the features were standardised with

    def stats(self, source: str):
        train, _, test = self.starts
        return label_stats(self.targets[train + self.offset],
                           self.targets[np.concatenate([train, test]) + self.offset], source)


def cut(cfg: TimeseriesData) -> Windows:
    """The table cut into windows. The rows are divided by time (validation and test are the
    timeline's later fractions), and a window and its target lie inside one part; the
    training and test windows are then cut to `data.max_*_examples`."""
    names, features, targets = read_series(cfg)
    reach = (cfg.sequence_length - 1) * cfg.sampling_rate  # a window's last row, from its first
    offset, rows = reach + cfg.target_offset, len(features)  # offset: its target row
    test_from = rows - int(rows * cfg.test_split)
    val_from = test_from - int(test_from * cfg.validation_split)
    train, val, test = (np.arange(begin, max(begin, end - offset), dtype=np.int64)
                        for begin, end in ((0, val_from), (val_from, test_from), (test_from, rows)))
    train, test = train[:cfg.max_train_examples], test[:cfg.max_test_examples]
    if not len(train) or not len(test):
        raise DataError(f"{cfg.path}: {rows} rows are too few for windows of "
                        f"{cfg.sequence_length} rows every {cfg.sampling_rate} with a target "
                        f"{cfg.target_offset} rows on, in both the training and the test parts")
    notes, scale = [], None
    if cfg.normalize:  # by the rows the training windows hold
        mean, std, note = standardisation(features[: train[-1] + reach + 1], names, str(cfg.path))
        features, notes, scale = (features - mean) / std, [note], (mean.tolist(), std.tolist())
    return Windows(names, features.astype(np.float32),
                   targets[:, 0] if targets.shape[1] == 1 else targets, [train, val, test], offset,
                   notes, scale)


class Timeseries(Source, dataset="timeseries"):
    files = {"path": "file"}

    def input_spec(self, cfg: TimeseriesData) -> InputSpec:
        header = read_header(cfg.path, cfg.delimiter)
        features = cfg.feature_columns or [c for c in header if c != cfg.time_column]
        return InputSpec((cfg.sequence_length, len(features)), "vector")

    def training_examples(self, cfg: TimeseriesData):
        windows = cut(cfg)
        return len(windows.starts[0]), windows.stats(f"{cfg.path} (data.target_columns)")

    def load(self, cfg: TimeseriesData, seed: int = 0, status=None) -> Dataset:
        import tensorflow as tf

        windows = cut(cfg)
        with tf.device("CPU:0"):  # held once, as host tensors: a window is gathered by index
            table, goals = tf.constant(windows.features), tf.constant(windows.targets)
        steps = tf.range(cfg.sequence_length, dtype=tf.int64) * cfg.sampling_rate

        def split(starts: np.ndarray) -> Split:
            with tf.device("CPU:0"):
                first = tf.constant(starts)

            def load(index):
                start = first[index]
                return tf.gather(table, start + steps), goals[start + windows.offset]

            return Split(len(starts), load=load)

        train, val, test = windows.starts
        return Dataset(
            train=split(train), val=split(val) if len(val) else None, test=split(test),
            spec=InputSpec((cfg.sequence_length, len(windows.names)), "vector"),
            labels=windows.stats(f"{cfg.path} (data.target_columns)"),
            source=str(cfg.path),
            notes=windows.notes,
            feature_scale=windows.scale,
        )
