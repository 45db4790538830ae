"""The files people have: CSV exports, broken images, odd encodings, truncated archives, and
the run folder's own writes (nothing trains)."""

import zipfile
from pathlib import Path

import numpy as np
import pytest

from mptrain.config import validate
from mptrain.data.folders import check_images, split_files
from mptrain.data.tabular import read_table
from mptrain.errors import ConfigError, DataError
from mptrain.record import write_atomic
from tests import datafiles
from tests.helpers import tiny_raw


def csv_config(path: Path, *overrides: str):
    return validate(tiny_raw("data.dataset=csv", f"data.path={path}", "data.label_column=y",
                             *overrides), "<test>").data


def write(path: Path, text: str, encoding="utf-8") -> Path:
    path.write_bytes(text.encode(encoding))
    return path


def test_spreadsheet_exports_read_as_written(tmp_path):
    """Excel's "CSV UTF-8" (a byte-order mark), quoted cells, CRLF line ends, blank lines."""
    rows = "".join(f'"{i % 2}","{i}.5",{i}\r\n' for i in range(40))
    table = read_table(csv_config(write(tmp_path / "t.csv", "\ufeffy,a,b\r\n" + rows + "\r\n\r\n")))
    assert len(table.train_rows) + len(table.val_rows) + len(table.test_rows) == 40
    assert table.classes is None and table.stats.whole and table.stats.high == 1  # numbers
    assert table.feature_idx == [1, 2] and table.label_idx == [0]


def test_every_row_is_in_exactly_one_split_and_streamed_once(tmp_path):
    import tensorflow as tf

    from mptrain.data.tabular import Csv

    path = datafiles.csv_table(tmp_path / "t.csv", rows=97, label_column="y")
    cfg = csv_config(path, "data.validation_split=0.2")
    table = read_table(cfg)
    parts = [set(table.train_rows), set(table.val_rows), set(table.test_rows)]
    assert sum(map(len, parts)) == 97 and set().union(*parts) == set(range(97))
    data = Csv().load(cfg)
    for split in (data.train, data.val, data.test):
        streamed = list(split.stream().as_numpy_iterator())
        assert len(streamed) == split.size
    features = {tuple(np.round(x, 3)) for split in (data.train, data.val, data.test)
                for x, _ in split.stream().as_numpy_iterator()}
    assert len(features) == 97  # no row twice, none left out
    assert tf.is_tensor(next(iter(data.train.stream()))[0])


@pytest.mark.parametrize(("text", "message"), [
    ("y,a\n1,2\n,3\n", "t.csv, line 3, column 1 (y): an empty label"),
    ("y,a\n1,2\nnan,3\n", "line 3, column 1 (y): label 'nan'"),
    ("y,a\n1,2\n0,\n", "t.csv, line 3, column 2 (a): an empty cell"),
    ("y,a\n1,2\n0,inf\n", "line 3, column 2 (a): 'inf' is not a finite number"),
    ("y;a;b\n1;2;3\n", "no column 'y' (data.label_column); the columns are y;a;b (one column: the "
                       "file seems to use ';' between cells; set data.delimiter: ';')"),
    ("y\ta\n1\t2\n", 'the file seems to use "\\t" between cells; set data.delimiter: "\\t"'),
    ("", "empty file"),
])
def test_bad_tables_name_the_line_and_the_column(tmp_path, text, message):
    with pytest.raises(DataError) as error:
        read_table(csv_config(write(tmp_path / "t.csv", text)))
    assert message in str(error.value)


def test_a_table_that_is_not_utf8_says_so(tmp_path):
    path = write(tmp_path / "t.csv", "y,name\n1,café\n", encoding="latin-1")
    with pytest.raises(DataError, match="t.csv: not UTF-8 text .* save the table as UTF-8 CSV"):
        read_table(csv_config(path, "data.feature_columns=[name]"))


def test_a_folder_never_puts_one_file_in_two_splits(tmp_path):
    folder = datafiles.image_folder(tmp_path / "imgs", per_class=20)
    cfg = validate(tiny_raw("data.dataset=image_folder", f"data.path={folder}",
                            "data.validation_split=0.25"), "<test>").data
    splits = split_files(cfg)
    files = [set(splits.train[0]), set(splits.val[0]), set(splits.test[0])]
    assert sum(map(len, files)) == 60 and len(set().union(*files)) == 60
    assert all(files)


def broken_images(tmp_path: Path):
    folder = datafiles.image_folder(tmp_path / "imgs", per_class=6)
    good = next((folder / "circle").glob("*.png")).read_bytes()
    (folder / "circle" / "truncated.png").write_bytes(good[: len(good) // 2])
    (folder / "square" / "garbage.png").write_bytes(good[:16] + b"\x00" * 200)  # valid header
    return validate(tiny_raw("data.dataset=image_folder", f"data.path={folder}"), "<test>").data


def test_a_broken_image_is_found_before_training_with_its_name(tmp_path):
    cfg = broken_images(tmp_path)
    splits = split_files(cfg)
    with pytest.raises(DataError) as error:
        check_images(splits, skip_bad=False)
    message = str(error.value)
    # the first broken one in the splits' order (train, validation, test) is named, the other counted
    order = [Path(f).name for f in splits.train[0] + splits.val[0] + splits.test[0]]
    first, second = sorted(["truncated.png", "garbage.png"], key=order.index)
    assert f"{first}: not a readable image" in message and second not in message
    assert "(1 more broken)" in message and "data.skip_bad_files: true" in message


def test_skip_bad_files_leaves_them_out_and_the_check_is_cached(tmp_path, monkeypatch):
    import mptrain.data.folders as folders

    cfg = broken_images(tmp_path)
    checked = check_images(split_files(cfg), skip_bad=True)
    assert sorted(Path(s.split(":")[0]).name for s in checked.skipped) == ["garbage.png", "truncated.png"]
    kept = checked.train[0] + checked.val[0] + checked.test[0]
    assert len(kept) == 18 and not any("truncated" in f or "garbage" in f for f in kept)

    def must_not_decode(paths):
        raise AssertionError(f"decoded again: {paths}")

    monkeypatch.setattr(folders, "_decode_all", must_not_decode)
    again = check_images(split_files(cfg), skip_bad=True)  # every verdict from the cache
    assert again.skipped == checked.skipped
    touched = Path(next(f for f in kept if "stripes" in f))
    touched.write_bytes(touched.read_bytes() + b"")  # same size, new mtime: checked again
    import os

    os.utime(touched, ns=(1, 1))
    with pytest.raises(AssertionError, match="decoded again"):
        check_images(split_files(cfg), skip_bad=True)


def test_a_truncated_npz_is_a_clean_error_naming_it(tmp_path):
    from mptrain.data.arrays import read_npz

    path = tmp_path / "data.npz"
    np.savez(path, x_train=np.zeros((50, 4)), y_train=np.zeros(50), x_test=np.zeros((5, 4)),
             y_test=np.zeros(5))
    assert len(read_npz(path, labels_only=True)[0][1]) == 50
    path.write_bytes(path.read_bytes()[:300])
    for labels_only in (False, True):  # a run's read, and validate's count
        with pytest.raises(DataError, match="data.npz: not a readable .npz archive"):
            read_npz(path, labels_only)
    assert zipfile.is_zipfile(path) is False


def test_an_npz_gives_each_named_input_its_arrays_and_the_model_is_held_to_them(tmp_path):
    """x_train_INPUT and x_test_INPUT per input (keras.io's multi-input models take a dict by
    input name): read as dicts, each split's arrays of one length; a missing test array, or
    lengths apart, named; a model's inputs checked by name and by each input's shape (a size
    it leaves open takes any)."""
    import keras

    from mptrain.data.arrays import read_npz
    from mptrain.data.dataset import InputSpec
    from mptrain.model.checks import check_model_inputs

    path = tmp_path / "data.npz"
    arrays = dict(x_train_title=np.ones((6, 8), np.int64), x_train_tags=np.zeros((6, 3)),
                  y_train=np.arange(6) % 2, x_test_title=np.ones((2, 8), np.int64),
                  x_test_tags=np.zeros((2, 3)), y_test=np.array([0, 1]))
    np.savez(path, **arrays)
    (x_train, _), (x_test, _) = read_npz(path)
    assert list(x_train) == ["title", "tags"] and x_test["tags"].shape == (2, 3)
    np.savez(path, **{k: v for k, v in arrays.items() if k != "x_test_tags"})
    with pytest.raises(DataError, match="missing arrays x_test_tags .*x_train_INPUT and x_test_INPUT"):
        read_npz(path)
    np.savez(path, **{**arrays, "x_train_tags": np.zeros((5, 3))})
    with pytest.raises(DataError, match=r"the x_train and y_train arrays have different lengths \(5, 6\)"):
        read_npz(path)

    spec = InputSpec.of_named({"title": ((8,), "int32"), "tags": ((3,), "float32")})
    title, tags = keras.Input((None,), name="title"), keras.Input((3,), name="tags")
    joined = keras.layers.Concatenate()([keras.layers.Embedding(10, 2)(title)[:, 0], tags])
    check_model_inputs(keras.Model([title, tags], keras.layers.Dense(1)(joined)), spec)
    wrong = keras.Input((4,), name="tags")
    joined = keras.layers.Concatenate()([keras.layers.Embedding(10, 2)(title)[:, 0], wrong])
    with pytest.raises(ConfigError, match=r"it takes input 'tags' of shape \(4\) and the data's "
                                          r"examples have shape \(3\)"):
        check_model_inputs(keras.Model([title, wrong], keras.layers.Dense(1)(joined)), spec)
    with pytest.raises(ConfigError, match="it takes inputs named title and the data gives the inputs "
                                          "title, tags"):
        check_model_inputs(keras.Model(title, keras.layers.Embedding(10, 2)(title)), spec)


def test_an_npz_standardises_its_features_with_the_training_rows_when_asked(tmp_path):
    """data.normalize on an .npz: each feature by the training split's mean and deviation
    (validation and test rows by the same figures), said in the notes; off, as stored, each
    feature's largest magnitude kept for lint."""
    from mptrain.config.kinds import NpzData
    from mptrain.data.arrays import Npz

    rng = np.random.default_rng(0)
    x = rng.normal(5, 1, size=(100, 2)) * [1000.0, 0.01]
    np.savez(tmp_path / "data.npz", x_train=x[:80], y_train=np.arange(80) % 2, x_test=x[80:],
             y_test=np.arange(20) % 2)
    cfg = NpzData(dataset="npz", path=tmp_path / "data.npz", validation_split=0.25)
    as_stored = Npz().load(cfg)
    assert [name for name, _ in as_stored.raw_features] == ["x_train[:, 0]", "x_train[:, 1]"]
    scaled = Npz().load(cfg.model_copy(update={"normalize": True}))
    train, test = scaled.train.arrays[0], scaled.test.arrays[0]
    assert np.allclose(train.mean(axis=0), 0, atol=1e-5) and np.allclose(train.std(axis=0), 1, atol=1e-4)
    fitted = x[:60]  # the training rows: validation is the last 20 of the 80
    assert np.allclose(test, (x[80:] - fitted.mean(axis=0)) / fitted.std(axis=0), atol=1e-4)
    assert scaled.raw_features == () and "features standardised" in scaled.notes[-1]


def test_a_write_that_fails_halfway_leaves_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "summary.json"
    path.write_text("the old summary")

    real_open = open

    class Full:
        def __init__(self, *args, **kwargs):
            self.real = real_open(*args, **kwargs)  # noqa: SIM115

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.real.close()

        def write(self, text):
            self.real.write(text[: len(text) // 2])
            raise OSError(28, "No space left on device")

    monkeypatch.setattr("builtins.open", Full)
    with pytest.raises(OSError):
        write_atomic(path, "a new summary, longer than the old one")
    monkeypatch.undo()
    assert path.read_text() == "the old summary"


def test_a_file_in_two_splits_is_checked_and_counted_once(tmp_path):
    """data.test_path may be data.path itself: its files are then in training and test."""
    cfg = broken_images(tmp_path)
    splits = split_files(cfg)
    both = splits.__class__(splits.train, splits.val, splits.train, splits.classes)
    checked = check_images(both, skip_bad=True)
    kept = set(checked.train[0] + checked.val[0] + checked.test[0])
    assert checked.test == checked.train and sum(checked.sizes.values()) == len(kept)
    assert len(checked.skipped) == len(set(splits.train[0] + splits.val[0]) - kept)


def test_image_masks_keep_to_the_example_limits(tmp_path):
    """data.max_train_examples and max_test_examples cut image_masks' splits as every other
    kind's (they were ignored: every image trained on, every mask read)."""
    from mptrain.data.masks import ImageMasks, split_pairs

    images, masks = datafiles.masks_folders(tmp_path, count=40)
    cfg = validate(tiny_raw("data.dataset=image_masks", f"data.path={images}", f"data.masks_path={masks}",
                            "data.validation_split=0.25", "data.max_train_examples=12",
                            "data.max_test_examples=3"), "<test>").data
    train, val, test = split_pairs(cfg)
    assert len(train) + len(val) == 12 and len(test) == 3 and val
    assert ImageMasks().training_examples(cfg)[0] == len(train)


def test_a_csv_class_only_in_validation_rows_still_has_its_output(tmp_path):
    """The label stats count every row a run reads, validation's included (they left them
    out: a class all in validation got no output unit, and its labels were out of range)."""
    rows = "".join(f"{'cat' if i % 2 else 'dog'},{i}\n" for i in range(20))
    train = write(tmp_path / "train.csv", "y,a\n" + rows + "eel,99\n")  # one eel: validation's
    test = write(tmp_path / "test.csv", "y,a\ncat,1\ndog,2\n")
    table = read_table(csv_config(train, f"data.test_path={test}", "data.validation_split=0.6"))
    assert table.classes == ["cat", "dog", "eel"] and 20 in table.val_rows
    assert table.stats.high == 2  # three classes: ids 0 to 2
