"""In-memory data sets, a `Source` each: mnist, fashion_mnist, npz (and the generated ones in
`synthetic.py`).

Pixels (uint8) stay uint8 here, a quarter of float32's memory; the pipeline makes them float32
(`pipeline._finish`).

Every loader looks in local places first (the experiment's `path`, `$MPTRAIN_DATA_DIR`, system
packages, Keras' cache) and downloads only as a last resort, so runs and tests work offline.
Nothing here imports TensorFlow except the download fallback.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import sys
import zipfile
from pathlib import Path

import numpy as np

from mptrain.config.kinds import MnistData, NpzData
from mptrain.data.dataset import NO_LABELS, Dataset, InputSpec, Split, largest, split_sizes, standardisation
from mptrain.data.source import Source
from mptrain.errors import DataError
from mptrain.objective import label_stats

DATA_DIR_ENV = "MPTRAIN_DATA_DIR"
DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
FASHION_FILES = (
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
)
MNIST_URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz"
MNIST_TRAIN_EXAMPLES = 60_000  # MNIST and Fashion-MNIST


class InMemory(Source):
    """The kinds held in memory: each gives its arrays (`arrays(cfg, seed)`: ((x, y) train,
    (x, y) test, where they came from)), then the same preprocessing, limits and validation
    split (`load`)."""

    says_channel = False  # whether giving (N, H, W) uint8 images a channel axis is news

    def load(self, cfg, seed: int = 0, status=None) -> Dataset:
        """Preprocess and check the arrays; apply the limits and split off validation. The
        labels stay as stored (`objective.label_stats` says what they are); an .npz may give a
        model with several outputs its labels per output (y_train_OUTPUT, y_test_OUTPUT), and
        one with several inputs its arrays per input (x_train_INPUT, x_test_INPUT)."""
        (x_train, y_train), (x_test, y_test), source = self.arrays(cfg, seed)
        n_train, cut, n_test = split_sizes(cfg, rows(x_train), rows(x_test))
        if y_train is not NO_LABELS:
            y_train, y_test = each(y_train, lambda y: y[:n_train]), each(y_test, lambda y: y[:n_test])
        notes, raw, scale = [], (), None
        if isinstance(x_train, dict):
            x_train, x_test, spec = _named(x_train, x_test, n_train, n_test, source)
        else:
            x_train, x_test, spec = self._one_input(x_train[:n_train], x_test[:n_test], source, notes)
            if spec.kind == "vector" and x_train.ndim == 2 and not spec.pixels:
                normalize = getattr(cfg, "normalize", False)
                x_train, x_test, raw, scale = _features(x_train, x_test, cut, normalize, source, notes)

        def rows_of(start: int, stop: int) -> Split:
            return Split(stop - start, arrays=(each(x_train, lambda x: x[start:stop]),
                                               y_train if y_train is NO_LABELS else
                                               each(y_train, lambda y: y[start:stop])))

        return Dataset(
            train=rows_of(0, cut),
            val=rows_of(cut, n_train) if cut < n_train else None,
            test=Split(rows(x_test), arrays=(x_test, y_test)),
            spec=spec,
            labels=stats_of(y_train, y_test, cut, source),
            source=source,
            notes=notes,
            raw_features=raw,
            feature_scale=scale,
        )

    def _one_input(self, x_train, x_test, source: str, notes: list[str]):
        """The inputs as one array: preprocessed (`_both`), MNIST's grey (N, H, W) images given
        their channel axis (said in `notes`); with their `InputSpec`."""
        x_train, x_test = _both(x_train, x_test, source)
        if x_train.dtype == np.uint8 and x_train.ndim == 3:  # (N, H, W): MNIST's grey images
            x_train, x_test = x_train[..., np.newaxis], x_test[..., np.newaxis]
            if self.says_channel:
                notes.append(f"{source}: uint8 images of shape {x_train.shape[1:3]} given a channel "
                             f"axis: {x_train.shape[1:]}, as Conv2D takes them")
        tokens = x_train.dtype == np.int32  # `preprocess`'s token ids
        vocab_size = int(max(x_train.max(), x_test.max())) + 1 if tokens else None
        return x_train, x_test, InputSpec.of(x_train.shape[1:], x_train.dtype, vocab_size)


def _both(x_train, x_test, source: str):
    """One input's training and test arrays, each preprocessed (`preprocess`), of one shape."""
    x_train, x_test = preprocess(x_train, source), preprocess(x_test, source)
    if x_train.shape[1:] != x_test.shape[1:]:
        raise DataError(f"{source}: training examples have shape {x_train.shape[1:]} but test "
                        f"examples {x_test.shape[1:]}")
    return x_train, x_test


def _features(x_train, x_test, cut: int, normalize: bool, source: str, notes: list[str]):
    """(N, features) numbers: standardised with the first `cut` (training) rows' mean and
    deviation (an .npz's data.normalize, said in `notes`), or as stored, with each feature's
    largest magnitude (`Dataset.raw_features`, which lint reads); and the (mean, std) used."""
    names = [f"x_train[:, {i}]" for i in range(x_train.shape[1])]
    if not normalize:
        return x_train, x_test, largest(x_train[:cut], names), None
    mean, std, note = standardisation(x_train[:cut], names, source)
    notes.append(note)
    return (((x_train - mean) / std).astype(np.float32), ((x_test - mean) / std).astype(np.float32), (),
            (mean.tolist(), std.tolist()))


def _named(x_train: dict, x_test: dict, n_train: int, n_test: int, source: str):
    """Several inputs by name (an .npz's x_train_INPUT): each preprocessed as one input is,
    as stored otherwise (a model that takes them by name does its own shaping)."""
    train, test = {}, {}
    for name in x_train:
        train[name], test[name] = _both(x_train[name][:n_train], x_test[name][:n_test],
                                        f"{source} (x_train_{name}, x_test_{name})")
    return train, test, InputSpec.of_named({name: (x.shape[1:], str(x.dtype)) for name, x in train.items()})


class Npz(InMemory, dataset="npz"):
    files = {"path": "file"}
    says_channel = True

    def arrays(self, cfg: NpzData, seed: int):
        return *read_npz(cfg.path), str(cfg.path)

    def training_examples(self, cfg: NpzData):
        """Only the labels are read (not the inputs): they count the examples."""
        (x_train, y_train), (_, y_test) = read_npz(cfg.path, labels_only=True)
        if y_train is NO_LABELS:  # the inputs alone: they count the examples
            return split_sizes(cfg, rows(x_train))[1], None
        cut = split_sizes(cfg, min(each(y_train, len).values()) if isinstance(y_train, dict)
                          else len(y_train))[1]
        return cut, stats_of(y_train, y_test, cut, str(cfg.path))


def each(arrays, fn):
    """`fn` on the array, or on each of a dict's (by input or output name)."""
    return {name: fn(v) for name, v in arrays.items()} if isinstance(arrays, dict) else fn(arrays)


def rows(arrays) -> int:
    """How many examples an array (or each of a dict's) holds."""
    return len(next(iter(arrays.values())) if isinstance(arrays, dict) else arrays)


def stats_of(y_train, y_test, cut: int, source: str):
    """What the labels are (`objective.label_stats`), per output when there are several;
    None for inputs alone."""
    if y_train is NO_LABELS:
        return None
    if isinstance(y_train, dict):
        return {name: label_stats(y_train[name][:cut], np.concatenate([y_train[name], y_test[name]]),
                                  f"{source} (y_train_{name})") for name in y_train}
    return label_stats(y_train[:cut], np.concatenate([y_train, y_test]), source)


def preprocess(x: np.ndarray, source: str) -> np.ndarray:
    """uint8 pixels stay as stored; other integer (N, L) arrays are token ids and stay
    integers; floats keep the shape they were stored in (an (N, 500, 1) sequence is a Conv1D's
    input, not an image). Non-finite inputs are refused: they would turn the first step's loss
    into NaN."""
    if x.dtype == np.uint8:
        return x
    if np.issubdtype(x.dtype, np.integer):
        if x.ndim != 2:
            raise DataError(f"{source}: integer inputs of shape {x.shape[1:]}: use uint8 for "
                            "images or (N, length) integers for token ids")
        if x.size and x.min() < 0:
            raise DataError(f"{source}: token ids must be >= 0, found {int(x.min())}")
        return x.astype(np.int32)
    if not np.issubdtype(x.dtype, np.floating):
        raise DataError(f"{source}: inputs of type {x.dtype} are not numbers")
    x = x.astype(np.float32, copy=False)
    if not np.isfinite(x).all():
        bad = int(np.count_nonzero(~np.isfinite(x)))
        raise DataError(f"{source}: {bad} input values are NaN or infinite; clean the data "
                        "first (a single one makes the loss NaN)")
    return x


def read_npz(path: Path, labels_only: bool = False):
    """Arrays `x_train, y_train, x_test, y_test` from a NumPy archive (Keras' mnist.npz
    layout); for a model with several inputs, `x_train_INPUT, x_test_INPUT` for each instead
    of `x_train, x_test`, and for one with several outputs, `y_train_OUTPUT, y_test_OUTPUT`
    instead of `y_train, y_test` (returned as dicts by name). An archive of x arrays alone has
    no labels (`NO_LABELS`: for a model that needs none). `labels_only`: the x arrays are not
    loaded (None), unless there are no labels (they count the examples then)."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            found = archive.files
            inputs = [k.removeprefix("x_train_") for k in found if k.startswith("x_train_")]
            outputs = sorted(k.removeprefix("y_train_") for k in found if k.startswith("y_train_"))
            named_in, named_out = inputs and "x_train" not in found, outputs and "y_train" not in found
            # no y array at all: the inputs alone (`data.labels`), for a model that needs none
            labelled = any(k.startswith("y_") for k in found)
            wanted = [*([f"x_{s}_{i}" for i in inputs for s in ("train", "test")] if named_in
                        else ["x_train", "x_test"]),
                      *([f"y_{s}_{o}" for o in outputs for s in ("train", "test")] if named_out
                        else ["y_train", "y_test"] if labelled else [])]
            missing = [k for k in wanted if k not in found]
            arrays = {} if missing else {k: archive[k] for k in wanted
                                         if not (labels_only and labelled and k.startswith("x_"))}
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        # NumPy takes any file that is not a zip or .npy for a pickle, and says so
        reason = "not a zip archive" if "pickled" in str(exc) else str(exc) or type(exc).__name__
        raise DataError(f"{path}: not a readable .npz archive ({reason}); write one with "
                        "numpy.savez(path, x_train=..., y_train=..., x_test=..., y_test=...)") from None
    if missing:  # said before anything is loaded
        raise DataError(f"{path}: missing arrays {', '.join(missing)} (found: {', '.join(found) or 'none'}); "
                        "an npz dataset needs x_train, y_train, x_test, y_test (x_train and x_test "
                        "alone for a model that needs no labels; for a model with several inputs, "
                        "x_train_INPUT and x_test_INPUT for each; several outputs, y_train_OUTPUT "
                        "and y_test_OUTPUT for each)")

    def split_of(letter: str, names, split: str):
        return ({n: arrays[f"{letter}_{split}_{n}"] for n in names} if names
                else arrays[f"{letter}_{split}"])

    labels = {split: split_of("y", outputs if named_out else (), split) if labelled else NO_LABELS
              for split in ("train", "test")}
    if labels_only and labelled:
        return (None, labels["train"]), (None, labels["test"])
    xs = {split: split_of("x", inputs if named_in else (), split) for split in ("train", "test")}
    for split in ("train", "test"):
        lengths = {len(v) for part in (xs[split], labels[split] if labelled else {})
                   for v in (part.values() if isinstance(part, dict) else [part])}
        if len(lengths) != 1:
            raise DataError(f"{path}: the x_{split} and y_{split} arrays have different lengths "
                            f"({', '.join(map(str, sorted(lengths)))})")
    if rows(xs["train"]) == 0 or rows(xs["test"]) == 0:
        raise DataError(f"{path}: x_train and x_test must not be empty")
    return (xs["train"], labels["train"]), (xs["test"], labels["test"])


def read_idx(path: Path) -> np.ndarray:
    """One IDX file (the MNIST family's format), gzip-compressed or not."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as fh:
            raw = fh.read()
    except (OSError, EOFError) as exc:
        raise DataError(f"{path}: cannot read IDX file ({exc})") from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise DataError(f"{path}: not an unsigned-byte IDX file (bad magic number)")
    ndim = raw[3]
    header = 4 + 4 * ndim
    dims = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    if len(raw) - header != int(np.prod(dims)):
        raise DataError(f"{path}: header says shape {dims} but the file holds {len(raw) - header} bytes")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims)


class MnistFamily(InMemory):
    """`mnist` and `fashion_mnist`: found in the first local place that holds them, else
    Keras' download. Each kind says where it looks (`places(path)`, in order, an explicit
    data.path's place first), whether a place `holds` it, how to `read` a place that does
    (((x, y) train, (x, y) test)), its `title` in messages, what an explicit data.path must
    hold (`expected`), and how to get it when Keras' download fails (`offline_fix`)."""

    counts_cheaply = True  # a fixed 60,000

    def local_copy(self, path: Path | None) -> Path | None:
        """The place an explicit data.path names (an error unless it holds what the kind
        reads), else the first place that holds the data set, or None: then only a download
        can get it."""
        if path is None:
            return next((p for p in self.places(None) if self.holds(p)), None)
        if not self.holds(given := self.places(path)[0]):
            raise DataError(f"data.path {path}: {self.expected}")
        return given

    def looked_in(self) -> str:
        return ", ".join(str(p) for p in self.places(None))

    def check_files(self, cfg: MnistData) -> list[str]:
        if cfg.path is not None and not cfg.path.exists():
            raise DataError(f"data.path {cfg.path}: no such file or folder")
        if self.local_copy(cfg.path) is None:
            return [f"{cfg.dataset} is not on this machine (looked in {self.looked_in()}); `run` "
                    "will try Keras' download, which needs the internet (docs/data.md)"]
        return []

    def input_spec(self, cfg: MnistData) -> InputSpec:
        return InputSpec((28, 28, 1), "image", pixels=True)

    def training_examples(self, cfg: MnistData):
        return split_sizes(cfg, MNIST_TRAIN_EXAMPLES)[1], None

    def arrays(self, cfg: MnistData, seed: int):
        found = self.local_copy(cfg.path)
        if found is None:
            return self._keras_download(cfg.dataset)
        return *self.read(found), str(found)

    def _keras_download(self, dataset: str):
        """Last resort: Keras' own downloader. Any failure (offline, proxy, bad hash) becomes
        an error that lists where we looked and how to fix it."""
        import importlib

        from mptrain.hardware.runtime import import_tensorflow

        try:
            import_tensorflow()
            loader = importlib.import_module(f"keras.datasets.{dataset}")
            with contextlib.redirect_stdout(sys.stderr):  # keep stdout for --json
                train, test = loader.load_data()
        except Exception as exc:
            raise DataError(
                f"{self.title} not found locally (looked in: {self.looked_in()}) and the "
                f"download failed ({exc}).\nFix: {self.offline_fix}") from None
        return train, test, "keras download"


def _keras_cache() -> Path:
    return Path(os.environ.get("KERAS_HOME", Path.home() / ".keras")) / "datasets"


def _data_dir() -> Path | None:
    value = os.environ.get(DATA_DIR_ENV)
    return Path(value) if value else None


class Mnist(MnistFamily, dataset="mnist"):
    """Keras' mnist.npz."""

    title = "MNIST"
    expected = "no mnist.npz there (expected Keras' mnist.npz file)"
    offline_fix = (f"fetch {MNIST_URL} on a connected machine and put it in one of those "
                   f"places, set data.path to the file, or set ${DATA_DIR_ENV} to its folder.")

    def places(self, path: Path | None) -> list[Path]:
        return [base if base.suffix == ".npz" else base / "mnist.npz"
                for base in (path, _data_dir(), _keras_cache()) if base is not None]

    def holds(self, place: Path) -> bool:
        return place.is_file()

    def read(self, place: Path):
        return read_npz(place)


class FashionMnist(MnistFamily, dataset="fashion_mnist"):
    """A folder of Fashion-MNIST's four IDX .gz files (Debian's dataset-fashion-mnist has one)."""

    title = "Fashion-MNIST"
    expected = f"expected the four Fashion-MNIST files {', '.join(FASHION_FILES)}"
    offline_fix = ("`apt-get install dataset-fashion-mnist` (Debian/Ubuntu), or put the four IDX "
                   f".gz files in a folder and set data.path or ${DATA_DIR_ENV} to it.")

    def places(self, path: Path | None) -> list[Path]:
        env = _data_dir()
        folders = [d for d in (path, env, env / "fashion-mnist" if env else None) if d is not None]
        return folders + [DEBIAN_FASHION_MNIST, _keras_cache() / "fashion-mnist"]

    def holds(self, place: Path) -> bool:
        return all((place / name).is_file() for name in FASHION_FILES)

    def read(self, place: Path):
        x_train, y_train, x_test, y_test = (read_idx(place / name) for name in FASHION_FILES)
        return (x_train, y_train), (x_test, y_test)
