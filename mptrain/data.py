"""Datasets as float32 NumPy arrays, prepared on the host.

As the guide says, input preprocessing (x/255, reshape) stays float32 on the host: the model's
first layer casts to the compute dtype, and a CPU does float16 arithmetic slower than float32.

Every loader looks in local places first (the experiment's `path`, `$MPTRAIN_DATA_DIR`, system
packages, Keras' cache) and downloads only as a last resort, so runs and tests work offline.
Nothing here imports TensorFlow except the download fallback.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mptrain.config import DataConfig, ExperimentConfig, SyntheticData
from mptrain.errors import DataError

DATA_DIR_ENV = "MPTRAIN_DATA_DIR"
DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
FASHION_FILES = (
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
)
MNIST_URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz"


@dataclass(frozen=True)
class Dataset:
    """Train/validation/test splits, images as float32 in [0, 1], labels as int32."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    source: str

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])

    @property
    def num_classes_seen(self) -> int:
        return int(max(self.y_train.max(), self.y_test.max())) + 1


def load_dataset(cfg: DataConfig, seed: int) -> Dataset:
    """Load the configured dataset, preprocess it and split off validation data."""
    if cfg.dataset == "synthetic":
        (x_train, y_train), (x_test, y_test) = make_synthetic(cfg.synthetic, seed)
        source = "synthetic"
    elif cfg.dataset == "npz":
        assert cfg.path is not None  # enforced by the schema
        (x_train, y_train), (x_test, y_test) = read_npz(cfg.path)
        source = str(cfg.path)
    elif cfg.dataset == "mnist":
        (x_train, y_train), (x_test, y_test), source = load_mnist(cfg.path)
    else:
        (x_train, y_train), (x_test, y_test), source = load_fashion_mnist(cfg.path)

    if cfg.max_train_examples:
        x_train, y_train = x_train[: cfg.max_train_examples], y_train[: cfg.max_train_examples]
    if cfg.max_test_examples:
        x_test, y_test = x_test[: cfg.max_test_examples], y_test[: cfg.max_test_examples]
    x_train, x_test = preprocess(x_train), preprocess(x_test)
    y_train, y_test = labels(y_train, source), labels(y_test, source)

    # Like Keras' validation_split: the last fraction, taken before any shuffling.
    cut = len(x_train) - int(len(x_train) * cfg.validation_split)
    return Dataset(
        x_train=x_train[:cut],
        y_train=y_train[:cut],
        x_val=x_train[cut:],
        y_val=y_train[cut:],
        x_test=x_test,
        y_test=y_test,
        source=source,
    )


def check_labels_fit_model(data: Dataset, config: ExperimentConfig) -> None:
    """Labels the model cannot output are an error before training, not a NaN loss in it."""
    if config.train.loss != "binary_crossentropy" and data.num_classes_seen > config.model.num_classes:
        raise DataError(
            f"{data.source}: labels go up to {data.num_classes_seen - 1} but model.num_classes is "
            f"{config.model.num_classes}; set model.num_classes to at least {data.num_classes_seen}"
        )


def preprocess(x: np.ndarray) -> np.ndarray:
    """Integer pixels → float32 in [0, 1]; a lone (N, H, W) image stack gets a channel axis."""
    if np.issubdtype(x.dtype, np.integer):
        x = x.astype(np.float32) / 255.0
    else:
        x = x.astype(np.float32, copy=False)
    if x.ndim == 3:
        x = x[..., np.newaxis]
    return x


def labels(y: np.ndarray, source: str) -> np.ndarray:
    y = np.asarray(y).reshape(-1)
    if not np.issubdtype(y.dtype, np.integer) and not np.all(np.equal(np.mod(y, 1), 0)):
        raise DataError(f"{source}: labels must be whole class numbers, got {y.dtype} values")
    if len(y) and y.min() < 0:
        raise DataError(f"{source}: labels must be >= 0, found {int(y.min())}")
    return y.astype(np.int32)


def make_synthetic(cfg: SyntheticData, seed: int):
    """Class-dependent Gaussian blobs: learnable, deterministic for a seed, no I/O."""
    rng = np.random.default_rng(seed)
    dim = int(np.prod(cfg.input_shape))
    centres = rng.normal(0.0, 1.0, size=(cfg.num_classes, dim)).astype(np.float32)

    def draw(n: int):
        y = rng.integers(0, cfg.num_classes, size=n).astype(np.int32)
        x = centres[y] + cfg.noise * rng.normal(0.0, 1.0, size=(n, dim)).astype(np.float32)
        return x.reshape((n, *cfg.input_shape)).astype(np.float32), y

    return draw(cfg.train_size), draw(cfg.test_size)


def read_npz(path: Path):
    """Arrays `x_train, y_train, x_test, y_test` from a NumPy archive (Keras' mnist.npz layout)."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            missing = [k for k in ("x_train", "y_train", "x_test", "y_test") if k not in archive]
            if missing:
                raise DataError(
                    f"{path}: missing arrays {', '.join(missing)} "
                    f"(found: {', '.join(archive.files) or 'none'}); "
                    "an npz dataset needs x_train, y_train, x_test, y_test"
                )
            arrays = {k: archive[k] for k in ("x_train", "y_train", "x_test", "y_test")}
    except DataError:
        raise
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: not a readable .npz archive ({exc})") from None
    for split in ("train", "test"):
        if len(arrays[f"x_{split}"]) != len(arrays[f"y_{split}"]):
            raise DataError(f"{path}: x_{split} and y_{split} have different lengths")
    if len(arrays["x_train"]) == 0 or len(arrays["x_test"]) == 0:
        raise DataError(f"{path}: x_train and x_test must not be empty")
    return (arrays["x_train"], arrays["y_train"]), (arrays["x_test"], arrays["y_test"])


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


def keras_cache_dir() -> Path:
    return Path(os.environ.get("KERAS_HOME", Path.home() / ".keras")) / "datasets"


def _env_dir() -> Path | None:
    value = os.environ.get(DATA_DIR_ENV)
    return Path(value) if value else None


def load_mnist(path: Path | None):
    """mnist.npz from `path`, `$MPTRAIN_DATA_DIR`, Keras' cache, else Keras' download."""
    candidates = []
    for base in (path, _env_dir(), keras_cache_dir()):
        if base is not None:
            candidates.append(base if base.suffix == ".npz" else base / "mnist.npz")
    if path is not None and not candidates[0].is_file():
        raise DataError(f"data.path {path}: no mnist.npz there (expected Keras' mnist.npz file)")
    for candidate in candidates:
        if candidate.is_file():
            return (*read_npz(candidate), str(candidate))
    return _keras_download(
        "mnist", "MNIST", candidates,
        f"fetch {MNIST_URL} on a connected machine and put it in one of those places, "
        f"set data.path to the file, or set ${DATA_DIR_ENV} to its folder.",
    )


def load_fashion_mnist(path: Path | None):
    """The four IDX .gz files from `path`, `$MPTRAIN_DATA_DIR`, Debian's package, Keras' cache."""
    env = _env_dir()
    candidates = [d for d in (path, env, env / "fashion-mnist" if env else None) if d is not None]
    candidates += [DEBIAN_FASHION_MNIST, keras_cache_dir() / "fashion-mnist"]
    if path is not None and not _has_fashion_files(path):
        raise DataError(f"data.path {path}: expected the four Fashion-MNIST files {', '.join(FASHION_FILES)}")
    for folder in candidates:
        if _has_fashion_files(folder):
            x_train, y_train, x_test, y_test = (read_idx(folder / name) for name in FASHION_FILES)
            return (x_train, y_train), (x_test, y_test), str(folder)
    return _keras_download(
        "fashion_mnist", "Fashion-MNIST", candidates,
        "`apt-get install dataset-fashion-mnist` (Debian/Ubuntu), or put the four IDX .gz "
        f"files in a folder and set data.path or ${DATA_DIR_ENV} to it.",
    )


def _keras_download(module: str, title: str, looked: list[Path], fix: str):
    """Last resort: Keras' own downloader. Any failure (offline, proxy, bad hash) becomes an
    error that lists where we looked and how to fix it."""
    import importlib

    from mptrain.tf_runtime import import_tensorflow

    try:
        import_tensorflow()
        loader = importlib.import_module(f"keras.datasets.{module}")
        with contextlib.redirect_stdout(sys.stderr):  # keep stdout for --json
            train, test = loader.load_data()
    except Exception as exc:
        where = ", ".join(str(p) for p in looked)
        raise DataError(
            f"{title} not found locally (looked in: {where}) and the download failed ({exc}).\n"
            f"Fix: {fix}"
        ) from None
    return train, test, "keras download"


def _has_fashion_files(folder: Path) -> bool:
    return all((folder / name).is_file() for name in FASHION_FILES)
