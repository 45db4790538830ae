"""What every data source hands to the pipeline: splits of examples (`Split`), and what the
inputs are (`InputSpec`). The pipeline (`pipeline.py`) turns any split into batches whose order
depends only on the seed and the epoch. Nothing here imports TensorFlow.

A source that divides its examples into training, validation and test itself does it by a hash
of each example's key (`split_keys`), so the split is the same on every machine and run,
whatever order the files are listed in, and an example never changes sides when others are added.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from mptrain.objective import LabelStats

if TYPE_CHECKING:  # numpy is imported where arrays are made, so `validate` starts fast
    import numpy as np

InputKind = Literal["image", "tokens", "vector", "named"]
# the labels of a split that has none (inputs alone: `data.labels`): an empty structure,
# which tf.data and tf.nest carry through every stage untouched
NO_LABELS = ()


@dataclass(frozen=True)
class NamedInput:
    """One of several inputs a model takes by name: a CSV's column (data.inputs: columns:
    shape (1,), its dtype as pandas types it, "string" for text), an .npz's x_train_NAME."""

    name: str
    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class InputSpec:
    """The shape of one example's input and what it is; `vocab_size` for token inputs;
    `pixels`: uint8 values as stored (0-255); `named`: the inputs of a model that takes
    several by name (kind "named"; `shape` is then their count)."""

    shape: tuple[int, ...]
    kind: InputKind
    vocab_size: int | None = None
    pixels: bool = False
    named: tuple[NamedInput, ...] = ()

    @staticmethod
    def of_named(inputs: dict[str, tuple[tuple[int, ...], str]]) -> InputSpec:
        """Several inputs by name: name → (shape of one example, dtype)."""
        named = tuple(NamedInput(name, shape, dtype) for name, (shape, dtype) in inputs.items())
        return InputSpec((len(inputs),), "named", named=named)

    @staticmethod
    def of(shape: tuple[int, ...], dtype: np.dtype, vocab_size: int | None = None) -> InputSpec:
        """Examples of `shape` and `dtype`: uint8 pixels, other integer (length,) token ids,
        else images (3-D) or vectors."""
        import numpy as np

        pixels = dtype == np.uint8
        if np.issubdtype(dtype, np.integer) and len(shape) == 1 and not pixels:
            return InputSpec(shape, "tokens", vocab_size)
        return InputSpec(shape, "image" if len(shape) == 3 else "vector", pixels=pixels)


@dataclass
class Split:
    """Exactly one of `arrays`, `load`, `stream`: whichever the source can offer cheaply."""

    size: int
    arrays: tuple[np.ndarray, np.ndarray] | None = None  # in memory, or memory-mapped from a cache
    load: Callable[[Any], tuple[Any, Any]] | None = None  # tf index → (x, y): a file, decoded by tf.data
    stream: Callable[[], Any] | None = None  # () → tf.data.Dataset of (x, y), read in order (CSV, TFDS)

    def __post_init__(self) -> None:
        if sum(part is not None for part in (self.arrays, self.load, self.stream)) != 1:
            raise ValueError("a Split is exactly one of arrays, load, stream")


@dataclass
class Dataset:
    train: Split
    val: Split | None
    test: Split
    spec: InputSpec
    # as stored; per output for a model with several; None: the inputs alone (`data.labels`)
    labels: LabelStats | dict[str, LabelStats] | None
    source: str
    files: dict[str, str] = field(default_factory=dict)  # name → text the run folder keeps
    notes: list[str] = field(default_factory=list)  # what the loader did (files left out...)
    # vector features fed as stored: (name, largest magnitude over the training rows) each,
    # for lint to name features on scales apart (empty: standardised, or not vectors)
    raw_features: tuple[tuple[str, float], ...] = ()
    # what the features were standardised with (data.normalize): (mean, std) per feature, the
    # Normalization a saved model takes its raw features through (`model.exported`)
    feature_scale: tuple[list[float], list[float]] | None = None


def largest(features: np.ndarray, names: Sequence[str]) -> tuple[tuple[str, float], ...]:
    """Each vector feature's largest magnitude over the `features` rows (N, k), by name: its
    scale as stored, what `Dataset.raw_features` holds (a largest magnitude, not a
    deviation: a pixel that is rarely lit is on the same scale as one often lit)."""
    import numpy as np

    top = np.abs(features).max(axis=0) if len(features) else np.zeros(len(names))
    return tuple((name, float(m)) for name, m in zip(names, top, strict=True))


def standardisation(seen: np.ndarray, names: Sequence[str], source: str):
    """Each feature's mean and deviation over the training rows `seen` (N, k), what
    `data.normalize` standardises the features with, as keras.io adapts a Normalization
    layer on its training split; and the run's note saying so, with the figures."""
    import numpy as np

    mean, std = seen.mean(axis=0), seen.std(axis=0)
    std = np.where(std > 0, std, 1.0)
    shown = ", ".join(f"{name} {m:,.4g} ± {d:,.4g}" for name, m, d in
                      list(zip(names, mean, std, strict=True))[:6])
    more = f", and {len(names) - 6} more" if len(names) > 6 else ""
    return mean, std, (f"{source}: features standardised with the training split's mean and "
                       f"deviation (data.normalize: {shown}{more}); a model saved from this run "
                       "takes features standardised so")


def split_sizes(cfg, train: int, test: int = 0) -> tuple[int, int, int]:
    """How many of `train` and `test` examples a run uses (the first `data.max_train_examples`,
    `data.max_test_examples`), and where validation starts among the training ones (like Keras'
    validation_split: the last fraction, taken before any shuffling): (train, cut, test)."""
    train = min(train, cfg.max_train_examples or train)
    return train, train - int(train * cfg.validation_split), min(test, cfg.max_test_examples or test)


def hash_fraction(key: str, salt: str) -> float:
    """A stable pseudo-random number in [0, 1) for `key`, independent of listing order."""
    return zlib.crc32(f"{salt}:{key}".encode()) / 2**32


def split_keys(keys: Sequence[str], fraction: float, salt: str) -> tuple[list[int], list[int]]:
    """Indices of `keys` kept, and those (about `fraction` of them) taken out."""
    taken = [hash_fraction(k, salt) < fraction for k in keys]
    return [i for i, out in enumerate(taken) if not out], [i for i, out in enumerate(taken) if out]


def train_and_test(cfg, keys: Sequence[str], tests: int | None) -> tuple[list[int], int, list[int]]:
    """Indices of the training examples among `keys` and of the test examples, each cut to
    `data.max_*_examples`, and where validation starts among the training ones (as
    `split_sizes`). The test examples are a separate set's `tests` (a data.test_path), or,
    with None, those of `keys` a hash picks for `data.test_split`."""
    train, test = (split_keys(keys, cfg.test_split, "test") if tests is None
                   else (list(range(len(keys))), list(range(tests))))
    n_train, cut, n_test = split_sizes(cfg, len(train), len(test))
    return train[:n_train], cut, test[:n_test]
