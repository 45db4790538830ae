"""What a data kind is, in one place: a `Source` checks the files an experiment names, says
what the inputs will be when that is known without loading, counts the training examples
(and reads the labels) when asked to be thorough, and loads the data set.

`check_data` (the preflight's and `validate`'s entry, no TensorFlow) and `load_dataset`
(`run`'s) ask the same source, found by `data.dataset` in `SOURCES`: adding a kind is its
config class (`config/kinds.py`), its source, and its line here.
"""

from __future__ import annotations

import importlib
from typing import NamedTuple

from mptrain.data.dataset import Dataset, InputSpec, split_sizes

# data.dataset → "module:Source class", imported when used
SOURCES = {
    "mnist": "mptrain.data.arrays:Mnist",
    "fashion_mnist": "mptrain.data.arrays:FashionMnist",
    "npz": "mptrain.data.arrays:Npz",
    "synthetic": "mptrain.data.arrays:Synthetic",
    "synthetic_text": "mptrain.data.arrays:SyntheticText",
    "image_folder": "mptrain.data.folders:ImageFolder",
    "text_folder": "mptrain.data.folders:TextFolder",
    "image_masks": "mptrain.data.masks:ImageMasks",
    "csv": "mptrain.data.tabular:Csv",
    "timeseries": "mptrain.data.series:Timeseries",
    "tfds": "mptrain.data.tfds_source:Tfds",
}


class Source:
    """One data kind. A kind overrides what it knows; the defaults say "only the data knows"."""

    def check_files(self, cfg) -> list[str]:
        """Raise a DataError on files `run` could not read; notes on what cannot be known yet
        (a data set to download)."""
        return []

    def input_spec(self, cfg) -> InputSpec | None:
        """The inputs, when the config alone (or a file's header) says."""
        return None

    def training_examples(self, cfg, thorough: bool) -> tuple[int | None, object]:
        """How many examples a run trains on, when cheap to know (or `thorough`: reading what
        `run` reads anyway), and the labels (`objective.LabelStats`) when read on the way."""
        return None, None

    def load(self, cfg, seed: int, status) -> Dataset:
        raise NotImplementedError


def counted(cfg, total: int) -> tuple[int, None]:
    """The examples trained on out of `total` stored, after the limits and the validation split."""
    return split_sizes(cfg, total)[1], None


def source_of(cfg) -> Source:
    module, _, name = SOURCES[cfg.dataset].partition(":")
    return getattr(importlib.import_module(module), name)()


class DataCheck(NamedTuple):
    notes: list[str]  # what cannot be known before `run` (a data set to download)
    spec: InputSpec | None  # the inputs, when the config alone (or a CSV's header) says
    train_examples: int | None  # the examples a run trains on, when cheap to know (or thorough)
    labels: object = None  # what the labels are (`objective.LabelStats`), when read (thorough)


def check_data(data, thorough: bool = False) -> DataCheck:
    """Raise a DataError on data `run` could not load; what the data will be, when known."""
    source = source_of(data)
    notes = source.check_files(data)
    examples, labels = source.training_examples(data, thorough)
    return DataCheck(notes, source.input_spec(data), examples, labels)
