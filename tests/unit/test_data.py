import gzip
import struct
from pathlib import Path

import numpy as np
import pytest

from mptrain.config.kinds import MnistData, NpzData, SyntheticData
from mptrain.data import load_dataset
from mptrain.data.arrays import FASHION_FILES, read_idx
from mptrain.data.synthetic import make_synthetic
from mptrain.errors import DataError


def DataConfig(dataset, **keys):  # noqa: N802  (reads like the config class it builds)
    return (NpzData if dataset == "npz" else MnistData)(dataset=dataset, **keys)


def xy(split):
    return split.arrays


def write_mnist_npz(path: Path, n_train=50, n_test=20, seed=0) -> Path:
    """An mnist.npz in Keras' layout: uint8 images (N, 28, 28), uint8 labels."""
    rng = np.random.default_rng(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(
        path,
        x_train=rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        y_train=rng.integers(0, 10, n_train, dtype=np.uint8),
        x_test=rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        y_test=rng.integers(0, 10, n_test, dtype=np.uint8),
    )
    return path


def write_idx_gz(path: Path, array: np.ndarray) -> None:
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(struct.pack(">I", d) for d in array.shape)
    with gzip.open(path, "wb") as fh:
        fh.write(header + array.astype(np.uint8).tobytes())


def write_fashion(folder: Path, n_train=30, n_test=10) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    folder.mkdir(parents=True, exist_ok=True)
    arrays = [
        rng.integers(0, 256, (n_train, 28, 28)),
        rng.integers(0, 10, n_train),
        rng.integers(0, 256, (n_test, 28, 28)),
        rng.integers(0, 10, n_test),
    ]
    for name, array in zip(FASHION_FILES, arrays, strict=True):
        write_idx_gz(folder / name, array)
    return dict(zip(FASHION_FILES, arrays, strict=True))


def test_mnist_from_explicit_path_is_preprocessed(tmp_path):
    path = write_mnist_npz(tmp_path / "mine" / "mnist.npz")
    data = load_dataset(DataConfig(dataset="mnist", path=path, validation_split=0.2), seed=0)
    (x_train, y_train), (x_val, _), (x_test, _) = xy(data.train), xy(data.val), xy(data.test)
    assert x_train.shape == (40, 28, 28, 1) and x_val.shape == (10, 28, 28, 1)
    # pixels stay as stored (a quarter of float32's memory); the pipeline scales them for the model
    assert x_train.dtype == np.uint8 and data.spec.pixels
    assert y_train.dtype == np.uint8 and x_test.shape == (20, 28, 28, 1)  # labels as stored
    assert (data.labels.whole, data.labels.shape, data.labels.high) == (True, (), 9.0)
    raw = np.load(path)
    # validation is the last 20% before shuffling, like Keras' validation_split
    np.testing.assert_array_equal(x_val[..., 0], raw["x_train"][40:])
    assert data.source == str(path) and data.spec.shape == (28, 28, 1) and data.spec.kind == "image"


def test_mnist_folder_path_and_env_dir_and_keras_cache(tmp_path, monkeypatch):
    folder = tmp_path / "folder"
    write_mnist_npz(folder / "mnist.npz", n_train=11)
    assert load_dataset(DataConfig(dataset="mnist", path=folder), 0).train.size == 11

    env = tmp_path / "env"
    write_mnist_npz(env / "mnist.npz", n_train=12)
    monkeypatch.setenv("MPTRAIN_DATA_DIR", str(env))
    assert load_dataset(DataConfig(dataset="mnist"), 0).train.size == 12

    monkeypatch.delenv("MPTRAIN_DATA_DIR")
    cache = tmp_path / "keras_home" / "datasets" / "mnist.npz"  # KERAS_HOME set by conftest
    write_mnist_npz(cache, n_train=13)
    data = load_dataset(DataConfig(dataset="mnist"), 0)
    assert data.train.size == 13 and data.source == str(cache)


def test_mnist_offline_error_says_where_it_looked(tmp_path, monkeypatch):
    import keras

    def offline(*args, **kwargs):
        raise OSError("network unreachable")

    monkeypatch.setattr(keras.datasets.mnist, "load_data", offline)
    with pytest.raises(DataError) as info:
        load_dataset(DataConfig(dataset="mnist"), 0)
    message = str(info.value)
    assert "looked in" in message and str(tmp_path / "keras_home") in message
    assert "network unreachable" in message and "MPTRAIN_DATA_DIR" in message


def test_mnist_explicit_path_missing_is_an_error(tmp_path):
    with pytest.raises(DataError, match="no mnist.npz there"):
        load_dataset(DataConfig(dataset="mnist", path=tmp_path / "nothing"), 0)


def test_fashion_mnist_idx_files(tmp_path, monkeypatch):
    arrays = write_fashion(tmp_path / "fm")
    data = load_dataset(DataConfig(dataset="fashion_mnist", path=tmp_path / "fm"), 0)
    assert xy(data.train)[0].shape == (30, 28, 28, 1) and xy(data.test)[0].shape == (10, 28, 28, 1)
    np.testing.assert_array_equal(xy(data.test)[1], arrays[FASHION_FILES[3]])
    monkeypatch.setenv("MPTRAIN_DATA_DIR", str(tmp_path))  # finds $DIR/fashion-mnist too
    write_fashion(tmp_path / "fashion-mnist", n_train=7)
    assert load_dataset(DataConfig(dataset="fashion_mnist"), 0).train.size == 7


def test_idx_reader_rejects_bad_files(tmp_path):
    bad = tmp_path / "bad.gz"
    with gzip.open(bad, "wb") as fh:
        fh.write(b"\x01\x02\x03\x04")
    with pytest.raises(DataError, match="bad magic"):
        read_idx(bad)
    short = tmp_path / "short.gz"
    with gzip.open(short, "wb") as fh:
        fh.write(bytes([0, 0, 8, 1]) + struct.pack(">I", 10) + b"\x00" * 3)
    with pytest.raises(DataError, match="holds 3 bytes"):
        read_idx(short)


def test_npz_dataset_and_its_errors(tmp_path):
    path = tmp_path / "d.npz"
    np.savez(path, x_train=np.ones((8, 3), np.float32), y_train=np.arange(8) % 2,
             x_test=np.ones((4, 3), np.float32), y_test=np.arange(4) % 2)
    data = load_dataset(DataConfig(dataset="npz", path=path), 0)
    assert data.spec.shape == (3,) and xy(data.train)[0].dtype == np.float32
    # what is missing is said before anything is loaded (an object array would not load)
    np.savez(tmp_path / "partial.npz", x_train=np.array([{}, []], dtype=object))
    with pytest.raises(DataError, match=r"missing arrays x_test \(found: x_train\)"):
        load_dataset(DataConfig(dataset="npz", path=tmp_path / "partial.npz"), 0)
    with pytest.raises(DataError, match="no such file"):
        load_dataset(DataConfig(dataset="npz", path=tmp_path / "none.npz"), 0)
    (tmp_path / "junk.npz").write_text("not a zip")
    with pytest.raises(DataError, match="not a readable"):
        load_dataset(DataConfig(dataset="npz", path=tmp_path / "junk.npz"), 0)


def test_synthetic_is_deterministic_and_shaped():
    cfg = SyntheticData(dataset="synthetic", train_size=64, test_size=16, input_shape=[4, 4, 2],
                        num_classes=3)
    (x1, y1), _ = make_synthetic(cfg, seed=5)
    (x2, y2), _ = make_synthetic(cfg, seed=5)
    (x3, _), _ = make_synthetic(cfg, seed=6)
    assert x1.shape == (64, 4, 4, 2) and x1.dtype == np.float32 and set(y1) <= {0, 1, 2}
    np.testing.assert_array_equal(x1, x2)
    np.testing.assert_array_equal(y1, y2)
    assert not np.array_equal(x1, x3)



@pytest.mark.parametrize(("dataset", "message"), [
    ("fashion_mnist", "expected the four Fashion-MNIST files"),
    ("mnist", "no mnist.npz there"),
])
def test_validate_checks_what_an_explicit_data_path_holds(tmp_path, dataset, message):
    """validate used to call an empty folder valid; only run found out."""
    from mptrain.config import validate
    from mptrain.runs.preflight import check_experiment

    config = validate({"name": "x", "data": {"dataset": dataset, "path": str(tmp_path)}}, "<test>")
    with pytest.raises(DataError, match=message):
        check_experiment(config)


def test_npz_float_sequences_keep_their_shape_and_grey_images_get_a_channel(tmp_path):
    """(N, 50, 1) float sequences go in as stored: a Conv1D's input, not an image."""
    path = tmp_path / "seq.npz"
    np.savez(path, x_train=np.ones((8, 50, 1), np.float32), y_train=np.arange(8) % 2,
             x_test=np.ones((4, 50, 1), np.float32), y_test=np.arange(4) % 2)
    data = load_dataset(DataConfig(dataset="npz", path=path), 0)
    assert data.spec.shape == (50, 1) and xy(data.train)[0].shape[1:] == (50, 1) and not data.notes
    np.savez(path, x_train=np.ones((8, 6, 5), np.uint8), y_train=np.arange(8) % 2,
             x_test=np.ones((4, 6, 5), np.uint8), y_test=np.arange(4) % 2)
    data = load_dataset(DataConfig(dataset="npz", path=path), 0)
    assert data.spec.shape == (6, 5, 1) and data.spec.pixels
    assert data.notes == [f"{path}: uint8 images of shape (6, 5) given a channel axis: (6, 5, 1), "
                          "as Conv2D takes them"]


def test_a_csv_whose_first_row_is_numbers_is_refused_as_headerless(tmp_path):
    from mptrain.data.tabular import read_header

    path = tmp_path / "FordA_TRAIN.tsv"
    path.write_text("-1\t0.5\t0.25\t1e-3\t7\n1\t0.1\t0.2\t0.3\t0.4\n")
    with pytest.raises(DataError, match=r"its first row is 5 numbers \(-1, 0.5, 0.25, ...\), not "
                                        r"column names: a CSV data set needs a header row"):
        read_header(path, "\t")
    path.write_text("label,x1\n1,0.5\n")
    assert read_header(path, ",") == ["label", "x1"]


def test_every_data_kind_has_one_source_that_checks_and_loads_it():
    """A kind the schema accepts but no source reads would fail only at `run`: each has one,
    and none is left over. (Its behaviour: the tests of each kind.)"""
    from mptrain.config.loading import DATA_KINDS
    from mptrain.data.source import Source, source_of, sources

    assert set(sources()) == set(DATA_KINDS)
    for kind, config_class in DATA_KINDS.items():
        source = source_of(config_class.model_construct(dataset=kind))
        assert isinstance(source, Source) and type(source).load is not Source.load, kind
