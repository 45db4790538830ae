"""`csv`: a table with a label column, for tabular models.

One pass in Python reads the file before training: it counts the rows, finds the classes
(whole numbers are class ids; any other labels are class names, numbered in sorted order) and
checks that every feature is a finite number, so a bad cell is reported with its line and
column now rather than as a failed step later. Training then streams the file through
`tf.data.experimental.CsvDataset`, so the table never has to fit in memory.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from mptrain.config.schema import CsvData
from mptrain.data.dataset import Dataset, InputSpec, Split, hash_fraction
from mptrain.errors import DataError


def read_header(path: Path, delimiter: str) -> list[str]:
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            header = next(csv.reader(fh, delimiter=delimiter), None)
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot read as a UTF-8 CSV file ({exc})") from None
    if not header:
        raise DataError(f"{path}: empty file; a CSV data set needs a header row and data rows")
    return [name.strip() for name in header]


def columns(cfg: CsvData, header: list[str], path: Path) -> tuple[list[int], int]:
    """Indices of the feature columns and of the label column; unknown names are errors."""
    if cfg.label_column not in header:
        raise DataError(f"{path}: no column {cfg.label_column!r} (data.label_column); "
                        f"the columns are {', '.join(header)}")
    features = cfg.feature_columns or [c for c in header if c != cfg.label_column]
    missing = [c for c in features if c not in header]
    if missing:
        raise DataError(f"{path}: no columns {', '.join(missing)} (data.feature_columns); "
                        f"the columns are {', '.join(header)}")
    if not features:
        raise DataError(f"{path}: no feature columns besides the label {cfg.label_column!r}")
    return [header.index(c) for c in features], header.index(cfg.label_column)


def _scan(path: Path, cfg: CsvData, feature_idx: list[int], label_idx: int) -> list[str]:
    """Every row's label (as text); feature cells checked to be finite numbers."""
    labels = []
    width = max(feature_idx + [label_idx]) + 1
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh, delimiter=cfg.delimiter)
        next(reader)
        for line, row in enumerate(reader, start=2):
            if not row:
                continue
            if len(row) < width:
                raise DataError(f"{path}, line {line}: {len(row)} cells, the header has more")
            for i in feature_idx:
                try:
                    value = float(row[i])
                except ValueError:
                    value = math.nan
                if not math.isfinite(value):
                    raise DataError(f"{path}, line {line}, column {i + 1}: {row[i]!r} is not a "
                                    "finite number; features must be numbers")
            labels.append(row[label_idx].strip())
    if not labels:
        raise DataError(f"{path}: a header but no data rows")
    return labels


def load_csv(cfg: CsvData) -> Dataset:
    import tensorflow as tf

    header = read_header(cfg.path, cfg.delimiter)
    feature_idx, label_idx = columns(cfg, header, cfg.path)
    train_labels = _scan(cfg.path, cfg, feature_idx, label_idx)
    test_labels = None
    if cfg.test_path is not None:
        if read_header(cfg.test_path, cfg.delimiter) != header:
            raise DataError(f"{cfg.test_path}: its header differs from {cfg.path}'s")
        test_labels = _scan(cfg.test_path, cfg, feature_idx, label_idx)
    every = train_labels + (test_labels or [])
    numeric = all(v.isdigit() for v in every)
    classes = sorted(set(every), key=int if numeric else str)
    class_id = {name: int(name) if numeric else i for i, name in enumerate(classes)}

    def rows(path: Path, keep: np.ndarray):
        """Stream of (features, label) for the rows where `keep` is true, in file order."""
        keys, values = list(class_id), [class_id[k] for k in class_id]
        table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(
            tf.constant(keys), tf.constant(values, tf.int32)), default_value=-1)
        selected = sorted(feature_idx + [label_idx])
        defaults = [tf.constant("") if i == label_idx else tf.constant(0.0) for i in selected]
        label_at = selected.index(label_idx)
        mask = tf.constant(keep)

        def stream():
            lines = tf.data.experimental.CsvDataset(str(path), defaults, header=True,
                                                    field_delim=cfg.delimiter, select_cols=selected)
            kept = lines.enumerate().filter(lambda i, cells: mask[i]).map(lambda i, cells: cells)
            return kept.map(lambda *cells: (
                tf.stack([cells[j] for j in range(len(cells)) if j != label_at]),
                table.lookup(tf.strings.strip(cells[label_at]))))

        return stream

    n = len(train_labels)
    if test_labels is None:
        is_test = np.array([hash_fraction(str(i), "test") < cfg.test_split for i in range(n)])
        train_rows = np.flatnonzero(~is_test)
        test_mask, test_path = is_test, cfg.path
    else:
        train_rows = np.arange(n)
        test_mask, test_path = np.ones(len(test_labels), bool), cfg.test_path
    if cfg.max_train_examples:
        train_rows = train_rows[: cfg.max_train_examples]
    cut = len(train_rows) - int(len(train_rows) * cfg.validation_split)
    if cut == 0 or not test_mask.any():
        raise DataError(f"{cfg.path}: {n} rows are too few for the test and validation splits")
    if cfg.max_test_examples:
        test_mask &= np.cumsum(test_mask) <= cfg.max_test_examples

    def mask_of(indices: np.ndarray, size: int) -> np.ndarray:
        keep = np.zeros(size, bool)
        keep[indices] = True
        return keep

    val_rows = train_rows[cut:]
    return Dataset(
        train=Split(cut, stream=rows(cfg.path, mask_of(train_rows[:cut], n))),
        val=Split(len(val_rows), stream=rows(cfg.path, mask_of(val_rows, n))) if len(val_rows) else None,
        test=Split(int(test_mask.sum()), stream=rows(test_path, test_mask)),
        spec=InputSpec((len(feature_idx),), "vector"),
        num_classes_seen=max(class_id.values()) + 1,
        source=str(cfg.path),
        files={} if numeric else {"classes.txt": "\n".join(classes) + "\n"},
    )
