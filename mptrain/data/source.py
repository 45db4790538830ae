"""What a data kind is, in one place: a `Source` checks the files an experiment names, says
what the inputs will be when that is known without loading, counts the training examples
(and reads the labels) when asked to be thorough, and loads the data set.

The preflight (`runs.preflight`: `validate`'s and `run`'s checks, no TensorFlow) and
`load_dataset` (`run`'s load) ask the same source, found by `data.dataset` (`source_of`). A
source registers itself by the name it reads (`class Npz(InMemory, dataset="npz")`), as Keras'
serializables do: adding a kind is its config class (`config/kinds.py`) and its source in a
module of this package.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache
from pathlib import Path
from typing import ClassVar

from mptrain.data.dataset import Dataset, InputSpec
from mptrain.errors import DataError

SOURCES: dict[str, type[Source]] = {}  # data.dataset → its source, as each registers itself


class Source:
    """One data kind. A kind overrides what it knows; the defaults say "only the data knows".
    A subclass given `dataset=NAME` is the source of that kind (a base of several gives none)."""

    def __init_subclass__(cls, dataset: str | None = None, **kwargs):
        super().__init_subclass__(**kwargs)
        if dataset is not None:
            SOURCES[dataset] = cls

    files: ClassVar[dict[str, str]] = {}  # data.KEY → "file" or "folder": what it must name

    def check_files(self, cfg) -> list[str]:
        """Raise a DataError on files `run` could not read; notes on what cannot be known yet
        (a data set to download). By default: each of `files` given names one."""
        for key, what in self.files.items():
            path = getattr(cfg, key)
            if path is not None and not (path.is_file() if what == "file" else path.is_dir()):
                raise DataError(f"data.{key} {path}: no such {what}")
        return []

    def input_spec(self, cfg) -> InputSpec | None:
        """The inputs, when the config alone (or a file's header) says."""
        return None

    counts_cheaply: ClassVar[bool] = False  # its count needs no reading: said even when not thorough

    def training_examples(self, cfg) -> tuple[int | None, object]:
        """How many examples a run trains on (reading what `run` reads anyway), and the
        labels (`objective.LabelStats`) when read on the way; None where only the data knows."""
        return None, None

    def load(self, cfg, seed: int, status) -> Dataset:
        raise NotImplementedError


@cache
def sources() -> dict[str, type[Source]]:
    """Every kind's source: this package's modules imported (once), each registering its own;
    imported by name, so a module that holds no kind costs its import and nothing else."""
    for module in pkgutil.iter_modules([str(Path(__file__).parent)]):
        importlib.import_module(f"{__package__}.{module.name}")
    return SOURCES


def source_of(cfg) -> Source:
    return sources()[cfg.dataset]()
