"""`csv`: a table with a label column (or several), for tabular models.

One pass in Python reads the file before training (`read_table`): it counts the rows, reads
the labels (numbers stay numbers: class ids, 0/1 labels or a regression's targets, as the
objective takes them; any other labels are class names, numbered in sorted order) and checks
that every feature is a finite number and every label is there, so a bad cell is reported
with its line and column now rather than as a failed step later.
`validate` makes the same pass. Training then streams the file through the same reader (the
`csv` module: quotes, CRLF line ends, blank lines and Excel's UTF-8 byte-order mark are read
as spreadsheets write them), so the rows trained on are exactly the rows checked, and the
table never has to fit in memory.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mptrain.config.kinds import CsvData
from mptrain.data.dataset import (
    Dataset,
    InputSpec,
    Split,
    hash_fraction,
    largest,
    split_keys,
    standardisation,
    train_and_test,
)
from mptrain.data.source import Source
from mptrain.errors import DataError
from mptrain.objective import LabelStats, label_stats

ENCODING = "utf-8-sig"  # UTF-8, without the byte-order mark spreadsheets put first
DELIMITERS = ",;\t|"


def table_rows(path: Path, delimiter: str) -> Iterator[tuple[int, list[str]]]:
    """(line number, cells) of every non-blank row, the header included."""
    try:
        with open(path, newline="", encoding=ENCODING) as fh:
            reader = csv.reader(fh, delimiter=delimiter)
            for row in reader:
                if row and any(cell.strip() for cell in row):
                    yield reader.line_num, row
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text (byte {exc.object[exc.start]:#04x}); save the "
                        "table as UTF-8 CSV") from None
    except csv.Error as exc:
        raise DataError(f"{path}: not a readable CSV file ({exc})") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror})") from None


def picked_rows(path: Path, delimiter: str, rows: np.ndarray) -> Iterator[list[str]]:
    """The cells of the data rows numbered `rows` (0: the row after the header), in file order."""
    wanted = set(rows.tolist())
    data = table_rows(path, delimiter)
    next(data, None)  # the header
    yield from (row for index, (_, row) in enumerate(data) if index in wanted)


def read_header(path: Path, delimiter: str) -> list[str]:
    first = next(table_rows(path, delimiter), None)
    if first is None:
        raise DataError(f"{path}: empty file; a CSV data set needs a header row and data rows")
    names = [name.strip() for name in first[1]]
    if all(is_number(name) for name in names):
        shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        raise DataError(
            f"{path}: its first row is {len(names)} numbers ({shown}), not column names: a CSV "
            "data set needs a header row naming its columns (data.label_column is one of them). "
            "Add one, e.g. label,x1,x2,... (keras.io's timeseries files have none: their first "
            "column is the label)")
    return names


def is_number(cell: str, finite: bool = False) -> bool:
    try:
        value = float(cell)
    except ValueError:
        return False
    return not finite or math.isfinite(value)


def columns(cfg: CsvData, header: list[str], path: Path) -> tuple[list[int], list[int]]:
    """Indices of the feature columns and of the label columns; unknown names are errors."""
    wanted = label_columns(cfg)
    absent = [c for c in wanted if c not in header]
    if absent:
        raise DataError(f"{path}: no column {absent[0]!r} (data.label_column); the "
                        f"columns are {', '.join(header)}{_delimiter_hint(header, cfg.delimiter)}")
    features = cfg.feature_columns or [c for c in header if c not in wanted]
    missing = [c for c in features if c not in header]
    if missing:
        raise DataError(f"{path}: no columns {', '.join(missing)} (data.feature_columns); "
                        f"the columns are {', '.join(header)}")
    if not features:
        raise DataError(f"{path}: no feature columns besides the label {', '.join(wanted)}")
    return [header.index(c) for c in features], [header.index(c) for c in wanted]


def label_columns(cfg: CsvData) -> list[str]:
    return [cfg.label_column] if isinstance(cfg.label_column, str) else list(cfg.label_column)


def _delimiter_hint(header: list[str], delimiter: str) -> str:
    """When the header reads as one column, the delimiter the file seems to use."""
    if len(header) != 1:
        return ""
    try:
        found = csv.Sniffer().sniff(header[0], delimiters=DELIMITERS.replace(delimiter, "")).delimiter
    except csv.Error:
        return ""
    shown = '"\\t"' if found == "\t" else f"'{found}'"  # as YAML reads it
    return (f" (one column: the file seems to use {shown} between cells; set "
            f"data.delimiter: {shown})")


@dataclass(frozen=True)
class Table:
    """What the pass over a CSV file found: its columns, labels and splits."""

    feature_idx: list[int]
    label_idx: list[int]
    columns: tuple[tuple[str, str], ...]  # each feature's (name, int64 | float32 | string)
    classes: list[str] | None  # class names, numbered in sorted order (None: numeric labels)
    stats: LabelStats  # what the training labels are (`objective.label_stats`)
    train_rows: np.ndarray  # data-row numbers in the training file, training split
    val_rows: np.ndarray
    test_rows: np.ndarray  # data-row numbers in the test file (the training file without test_path)

    def label(self, row: list[str]):
        """A row's label as the stream gives it: a class name's id, or its number(s)."""
        cells = [row[i].strip() for i in self.label_idx]
        if self.classes is not None:
            return np.int32(self.classes.index(cells[0]))
        values = np.array([float(c) for c in cells], np.float32)
        return values if len(values) > 1 else values[0]


def _scan(path: Path, cfg: CsvData, feature_idx: list[int], label_idx: list[int],
          dtypes: dict[int, str]) -> list[tuple[str, ...]]:
    """Every data row's label (as text), each feature checked to be a finite number; with
    `data.inputs: columns`, each column's type as pandas would read it (`dtypes`, widened as
    cells demand): whole numbers int64, other numbers float32, and a column with a cell that
    is not a number text, as keras.io's structured data models take them (IntegerLookup,
    Normalization, StringLookup)."""
    labels = []
    width = max(feature_idx + label_idx) + 1
    rows = table_rows(path, cfg.delimiter)
    _, header = next(rows, (0, []))
    for line, row in rows:
        if len(row) < width:
            raise DataError(f"{path}, line {line}: {len(row)} cells, the header has more")
        for i in feature_idx:
            cell = row[i].strip()
            if dtypes.get(i) == "string" or cfg.inputs == "columns" and cell and not is_number(cell):
                dtypes[i] = "string"
                continue
            if cfg.inputs == "columns" and not cell.lstrip("+-").isdigit():
                dtypes[i] = "float32"  # else int64 (not "string": those are skipped above)
            if not is_number(cell, finite=True):
                what = "an empty cell" if not cell else f"{row[i]!r} is not a finite number"
                hint = ("" if cfg.inputs == "columns" or not cell else
                        " (a text column: data.inputs: columns gives a model of your own one "
                        "input per column, text as strings)")
                raise DataError(f"{path}, line {line}, column {i + 1} ({header[i].strip()}): {what}; "
                                f"features must be finite numbers{hint}")
        for i in label_idx:
            label = row[i].strip()
            if not label or label.lower() in ("nan", "inf", "-inf", "null", "none", "na"):
                what = "an empty label" if not label else f"label {label!r}"
                raise DataError(f"{path}, line {line}, column {i + 1} ({header[i].strip()}): "
                                f"{what}; every row needs its label")
        labels.append(tuple(row[i].strip() for i in label_idx))
    if not labels:
        raise DataError(f"{path}: a header but no data rows")
    return labels


def read_table(cfg: CsvData) -> Table:
    """The whole pass: header, cells, labels, and which rows are training, validation, test
    (a hash of the row number, the same on every machine; validation by class: `_validation`)."""
    header = read_header(cfg.path, cfg.delimiter)
    feature_idx, label_idx = columns(cfg, header, cfg.path)
    dtypes: dict[int, str] = {}
    train_labels = _scan(cfg.path, cfg, feature_idx, label_idx, dtypes)
    test_labels = None
    if cfg.test_path is not None:
        if read_header(cfg.test_path, cfg.delimiter) != header:
            raise DataError(f"{cfg.test_path}: its header differs from {cfg.path}'s")
        test_labels = _scan(cfg.test_path, cfg, feature_idx, label_idx, dtypes)
    every = train_labels + (test_labels or [])
    numeric = all(is_number(cell, finite=True) for label in every for cell in label)
    if not numeric and len(label_idx) > 1:
        bad = next(cell for label in every for cell in label if not is_number(cell, finite=True))
        raise DataError(f"{cfg.path}: label {bad!r} is not a number; several label columns "
                        f"({', '.join(label_columns(cfg))}) hold numbers: 0/1 labels or targets")
    classes = None if numeric else sorted({label[0] for label in every})
    values = (np.array([[float(c) for c in label] for label in every], np.float64) if numeric
              else np.array([classes.index(label[0]) for label in every], np.int32)[:, None])
    if len(label_idx) == 1:
        values = values[:, 0]
    n = len(train_labels)
    train_rows, _, test_rows = train_and_test(cfg, [str(i) for i in range(n)],
                                              None if test_labels is None else len(test_labels))
    train_rows, test_rows = np.array(train_rows, dtype=int), np.array(test_rows, dtype=int)
    fit_rows, val_rows = _validation(train_rows, values[:n], cfg.validation_split)
    if not len(fit_rows) or not len(test_rows):
        raise DataError(f"{cfg.path}: {n} rows are too few for the test and validation splits")
    test_values = values[n:][test_rows] if test_labels is not None else values[test_rows]
    stats = label_stats(values[fit_rows], np.concatenate([values[train_rows], test_values]),
                        f"{cfg.path} (data.label_column {', '.join(label_columns(cfg))})", classes)
    return Table(feature_idx, label_idx, tuple((header[i], dtypes.get(i, "int64")) for i in feature_idx),
                 classes, stats, fit_rows, val_rows, test_rows)


def _validation(rows: np.ndarray, values: np.ndarray, fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """The training rows split into those trained on and the validation ones: with labels
    that are classes (names, or one whole number a row), the same share of each class, the
    rows of each chosen by a hash of their row number; with other labels (targets, several
    0/1 labels), a hash of the row number. Never the file's last rows: a file sorted by class
    would give validation one class (Keras' validation_split takes the last ones)."""
    if not fraction:
        return rows, rows[:0]
    keys = [str(r) for r in rows]
    per_row = values[rows]
    classes = per_row.ndim == 1 and np.all(np.equal(np.mod(per_row, 1), 0))
    if not classes:
        kept, taken = split_keys(keys, fraction, "validation")
        return rows[kept], rows[taken]
    taken = []
    for label in np.unique(per_row):
        members = np.flatnonzero(per_row == label)
        order = sorted(members, key=lambda i: hash_fraction(keys[i], "validation"))
        taken += order[:round(len(members) * fraction)]
    chosen = np.zeros(len(rows), bool)
    chosen[taken] = True
    return rows[~chosen], rows[chosen]


class Csv(Source, dataset="csv"):
    files = {"path": "file", "test_path": "file"}

    def input_spec(self, cfg: CsvData) -> InputSpec | None:
        if cfg.inputs == "columns":
            return None  # which columns hold text, only the whole table says
        features, _ = columns(cfg, read_header(cfg.path, cfg.delimiter), cfg.path)
        return InputSpec((len(features),), "vector")

    def training_examples(self, cfg: CsvData):
        table = read_table(cfg)
        return len(table.train_rows), table.stats

    def load(self, cfg: CsvData, seed: int = 0, status=None) -> Dataset:
        table = read_table(cfg)
        mean, std, notes, raw = _standardisation(cfg, table)

        def features(row: list[str]):
            if cfg.inputs == "vector":
                values = np.array([float(row[i]) for i in table.feature_idx])
                return ((values - mean) / std).astype(np.float32)
            read = {"string": str.strip, "int64": int, "float32": float}
            return {name: np.array([read[dtype](row[i])], object if dtype == "string" else dtype)
                    for (name, dtype), i in zip(table.columns, table.feature_idx, strict=True)}

        def split(path: Path, rows: np.ndarray) -> Split:
            """Those data rows, streamed as (features, label) in file order."""
            import tensorflow as tf

            def examples():
                return ((features(row), table.label(row)) for row in picked_rows(path, cfg.delimiter, rows))

            inputs = (tf.TensorSpec((len(table.feature_idx),), tf.float32) if cfg.inputs == "vector"
                      else {name: tf.TensorSpec((1,), dtype) for name, dtype in table.columns})
            labels = (tf.TensorSpec((), tf.int32) if table.classes is not None else
                      tf.TensorSpec(() if len(table.label_idx) == 1 else (len(table.label_idx),),
                                    tf.float32))
            return Split(len(rows), stream=lambda: tf.data.Dataset.from_generator(
                examples, output_signature=(inputs, labels)))

        return Dataset(
            train=split(cfg.path, table.train_rows),
            val=split(cfg.path, table.val_rows) if len(table.val_rows) else None,
            test=split(cfg.test_path or cfg.path, table.test_rows),
            spec=(InputSpec((len(table.columns),), "vector") if cfg.inputs == "vector"
                  else InputSpec.of_named({name: ((1,), dtype) for name, dtype in table.columns})),
            labels=table.stats,
            source=str(cfg.path),
            files={} if table.classes is None else {"classes.txt": "\n".join(table.classes) + "\n"},
            notes=notes,
            raw_features=raw,
            feature_scale=(list(mean), list(std)) if cfg.inputs == "vector" and cfg.normalize else None,
        )


def _standardisation(cfg: CsvData, table: Table):
    """Each feature's mean and deviation over the training rows (`data.normalize`, vector
    inputs), what the features are standardised with, as keras.io adapts a Normalization
    layer on its training split, and the note saying so; 0 and 1 (the features as stored)
    otherwise, with each vector feature's largest magnitude (`Dataset.raw_features`)."""
    if cfg.inputs != "vector":
        return 0.0, 1.0, [], ()
    seen = np.array([[float(row[i]) for i in table.feature_idx]
                     for row in picked_rows(cfg.path, cfg.delimiter, table.train_rows)])
    names = [name for name, _ in table.columns]
    if not cfg.normalize:
        return 0.0, 1.0, [], largest(seen, names)
    mean, std, note = standardisation(seen, names, str(cfg.path))
    return mean, std, [note], ()
