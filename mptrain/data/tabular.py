"""`csv`: a table with a label column, for tabular models.

One pass in Python reads the file before training (`read_table`): it counts the rows, finds
the classes (whole numbers are class ids; any other labels are class names, numbered in
sorted order) and checks that every feature is a finite number and every label is there, so a
bad cell is reported with its line and column now rather than as a failed step later.
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

from mptrain.config.schema import CsvData
from mptrain.data.dataset import Dataset, InputSpec, Split, check_learnable, split_keys, split_sizes
from mptrain.errors import DataError

ENCODING = "utf-8-sig"  # UTF-8, without the byte-order mark spreadsheets put first
DELIMITERS = ",;\t|"


def _lines(path: Path, delimiter: str) -> Iterator[tuple[int, list[str]]]:
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


def read_header(path: Path, delimiter: str) -> list[str]:
    first = next(_lines(path, delimiter), None)
    if first is None:
        raise DataError(f"{path}: empty file; a CSV data set needs a header row and data rows")
    names = [name.strip() for name in first[1]]
    if all(_is_number(name) for name in names):
        shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        raise DataError(
            f"{path}: its first row is {len(names)} numbers ({shown}), not column names: a CSV "
            "data set needs a header row naming its columns (data.label_column is one of them). "
            "Add one, e.g. label,x1,x2,... (keras.io's timeseries files have none: their first "
            "column is the label)")
    return names


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def columns(cfg: CsvData, header: list[str], path: Path) -> tuple[list[int], int]:
    """Indices of the feature columns and of the label column; unknown names are errors."""
    if cfg.label_column not in header:
        raise DataError(f"{path}: no column {cfg.label_column!r} (data.label_column); the "
                        f"columns are {', '.join(header)}{_delimiter_hint(header, cfg.delimiter)}")
    features = cfg.feature_columns or [c for c in header if c != cfg.label_column]
    missing = [c for c in features if c not in header]
    if missing:
        raise DataError(f"{path}: no columns {', '.join(missing)} (data.feature_columns); "
                        f"the columns are {', '.join(header)}")
    if not features:
        raise DataError(f"{path}: no feature columns besides the label {cfg.label_column!r}")
    return [header.index(c) for c in features], header.index(cfg.label_column)


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
    label_idx: int
    columns: tuple[tuple[str, str], ...]  # each feature's (name, int64 | float32 | string)
    classes: list[str]
    class_id: dict[str, int]
    numeric: bool  # labels are class ids, not names
    train_rows: np.ndarray  # data-row numbers in the training file, training split
    val_rows: np.ndarray
    test_rows: np.ndarray  # data-row numbers in the test file (the training file without test_path)


WIDER = {"int64": 0, "float32": 1, "string": 2}


def _scan(path: Path, cfg: CsvData, feature_idx: list[int], label_idx: int,
          dtypes: dict[int, str]) -> list[str]:
    """Every data row's label (as text), each feature checked to be a finite number; with
    `data.inputs: columns`, each column's type as pandas would read it (`dtypes`, widened as
    cells demand): whole numbers int64, other numbers float32, and a column with a cell that
    is not a number text, as keras.io's structured data models take them (IntegerLookup,
    Normalization, StringLookup)."""
    labels = []
    width = max(feature_idx + [label_idx]) + 1
    rows = _lines(path, cfg.delimiter)
    _, header = next(rows, (0, []))
    for line, row in rows:
        if len(row) < width:
            raise DataError(f"{path}, line {line}: {len(row)} cells, the header has more")
        for i in feature_idx:
            if dtypes.get(i) == "string":
                continue
            try:
                value = float(row[i])
            except ValueError:
                if cfg.inputs == "columns" and row[i].strip():
                    dtypes[i] = "string"
                    continue
                value = math.nan
            if cfg.inputs == "columns" and not row[i].strip().lstrip("+-").isdigit():
                dtypes[i] = max(dtypes.get(i, "int64"), "float32", key=WIDER.get)
            if not math.isfinite(value):
                what = "an empty cell" if not row[i].strip() else f"{row[i]!r} is not a finite number"
                name = f" ({header[i].strip()})" if i < len(header) else ""
                hint = ("" if cfg.inputs == "columns" or not row[i].strip() else
                        " (a text column: data.inputs: columns gives a model of your own one "
                        "input per column, text as strings)")
                raise DataError(f"{path}, line {line}, column {i + 1}{name}: {what}; features "
                                f"must be finite numbers{hint}")
        label = row[label_idx].strip()
        if not label or label.lower() in ("nan", "inf", "-inf", "null", "none", "na"):
            what = "an empty label" if not label else f"label {label!r}"
            raise DataError(f"{path}, line {line}, column {label_idx + 1} ({cfg.label_column}): {what}; "
                            "every row needs its class")
        labels.append(label)
    if not labels:
        raise DataError(f"{path}: a header but no data rows")
    return labels


def read_table(cfg: CsvData) -> Table:
    """The whole pass: header, cells, classes, and which rows are training, validation, test
    (a hash of the row number, the same on every machine)."""
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
    numeric = all(v.isdigit() for v in every)
    classes = sorted(set(every), key=int if numeric else str)
    class_id = {name: int(name) if numeric else i for i, name in enumerate(classes)}
    n = len(train_labels)
    if test_labels is None:
        kept, taken = split_keys([str(i) for i in range(n)], cfg.test_split, "test")
        train_rows, test_rows = np.array(kept, dtype=int), np.array(taken, dtype=int)
    else:
        train_rows, test_rows = np.arange(n), np.arange(len(test_labels))
    n_train, cut, n_test = split_sizes(cfg, len(train_rows), len(test_rows))
    train_rows, test_rows = train_rows[:n_train], test_rows[:n_test]
    if cut == 0 or not len(test_rows):
        raise DataError(f"{cfg.path}: {n} rows are too few for the test and validation splits")
    check_learnable([train_labels[i] for i in train_rows[:cut]],
                    f"{cfg.path} (label column {cfg.label_column!r})")
    return Table(feature_idx, label_idx, tuple((header[i], dtypes.get(i, "int64")) for i in feature_idx),
                 classes, class_id, numeric, train_rows[:cut], train_rows[cut:], test_rows)


def load_csv(cfg: CsvData) -> Dataset:
    table = read_table(cfg)

    def features(row: list[str]):
        if cfg.inputs == "vector":
            return np.array([float(row[i]) for i in table.feature_idx], np.float32)
        read = {"string": str.strip, "int64": int, "float32": float}
        return {name: np.array([read[dtype](row[i])], object if dtype == "string" else dtype)
                for (name, dtype), i in zip(table.columns, table.feature_idx, strict=True)}

    def stream(path: Path, rows: np.ndarray):
        """() → a tf.data stream of (features, label) of those data rows, in file order."""
        import tensorflow as tf

        wanted = set(rows.tolist())

        def examples():
            data = _lines(path, cfg.delimiter)
            next(data, None)  # the header
            for index, (_, row) in enumerate(data):
                if index in wanted:
                    yield features(row), np.int32(table.class_id[row[table.label_idx].strip()])

        inputs = (tf.TensorSpec((len(table.feature_idx),), tf.float32) if cfg.inputs == "vector"
                  else {name: tf.TensorSpec((1,), dtype) for name, dtype in table.columns})
        signature = (inputs, tf.TensorSpec((), tf.int32))
        return lambda: tf.data.Dataset.from_generator(examples, output_signature=signature)

    return Dataset(
        train=Split(len(table.train_rows), stream=stream(cfg.path, table.train_rows)),
        val=(Split(len(table.val_rows), stream=stream(cfg.path, table.val_rows))
             if len(table.val_rows) else None),
        test=Split(len(table.test_rows), stream=stream(cfg.test_path or cfg.path, table.test_rows)),
        spec=(InputSpec((len(table.columns),), "vector") if cfg.inputs == "vector"
              else InputSpec((len(table.columns),), "columns", columns=table.columns)),
        num_classes_seen=max(table.class_id.values()) + 1,
        source=str(cfg.path),
        files={} if table.numeric else {"classes.txt": "\n".join(table.classes) + "\n"},
    )
