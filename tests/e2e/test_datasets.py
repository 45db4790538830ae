"""Every data kind streams into real training through the command line; bad data is refused
before training with the key to change."""

import json
from pathlib import Path

import numpy as np
import pytest

from tests import datafiles
from tests.helpers import CNN, experiment, refuses, run_json


def test_image_folder_with_augmentation_trains(tmp_path):
    folder = datafiles.image_folder(tmp_path / "shapes")
    config = experiment(tmp_path, "data.dataset=image_folder", f"data.path={folder}",
                        "data.image_size=[12, 12]", "data.random_flip=horizontal",
                        "data.random_crop=2", "policy=mixed_bfloat16", *CNN, "train.epochs=4",
                        "train.batch_size=8", "train.optimizer.kwargs={learning_rate: 3e-3}")
    s = run_json(tmp_path, config)
    assert s["status"] == "finished" and s["test_accuracy"] > 0.6  # 3 classes
    run_dir = Path(s["run_dir"])
    assert (run_dir / "classes.txt").read_text().split() == ["circle", "square", "stripes"]
    assert s["dataset"] == str(folder)


def test_image_folder_cache_gives_the_same_batches(tmp_path):
    """Decoded every epoch, cached in memory, or memory-mapped from a cache file: the same
    pixels in the same order (the file cache is reused by the next run)."""
    import tensorflow as tf

    from mptrain.config import validate, variant
    from mptrain.data import load_dataset
    from mptrain.data.pipeline import hold_on_host, make_batches
    from tests.helpers import tiny_raw

    folder = datafiles.image_folder(tmp_path / "shapes", per_class=6)
    streams = {}
    for cache in ("none", "memory", str(tmp_path / "cache" / "shapes"), str(tmp_path / "cache" / "shapes")):
        config = validate(tiny_raw("data.dataset=image_folder", f"data.path={folder}",
                                   "data.image_size=[10, 10]", f"data.cache={cache}",
                                   "data.validation_split=0.2"), "<test>")
        data = load_dataset(config.data, seed=3)
        batches = make_batches(hold_on_host(data), variant(config, {"train.batch_size": 5,
                                                                     "train.epochs": 2, "seed": 3}),
                               lambda tf, y: y)
        streams[len(streams)] = [(x.numpy(), y.numpy()) for x, y in batches.train]
        # files decoded in parallel are autotuned; arrays in memory (or mapped) have nothing to
        # tune, and autotuning's thread once held a multi-epoch fit's end for seconds
        for pipeline in (batches.train, batches.test):
            assert pipeline.options().autotune.enabled is (cache == "none"), cache
    assert isinstance(data.train.arrays[0], np.memmap)
    assert sorted(p.name for p in (tmp_path / "cache").iterdir())[0] == "shapes.test.json"
    for other in (1, 2, 3):
        for (x0, y0), (x1, y1) in zip(streams[0], streams[other], strict=True):
            np.testing.assert_array_equal(y0, y1)
            np.testing.assert_allclose(x0, x1, atol=1e-6)
    assert streams[0][0][0].dtype == tf.float32.as_numpy_dtype and streams[0][0][0].max() <= 1.0


def test_text_folder_is_tokenised_in_the_pipeline(tmp_path):
    """Under a 16-bit policy: it is set before the data loads, and the tokenizer (a Keras
    layer) must still give integer ids."""
    folder = datafiles.text_folder(tmp_path / "news")
    config = experiment(tmp_path, "policy=mixed_bfloat16", "data.dataset=text_folder", f"data.path={folder}",
                        "data.sequence_length=20", "data.max_tokens=100", "model.kind=transformer",
                        "model.num_layers=1", "model.num_heads=2", "model.embed_dim=16",
                        "model.mlp_dim=32", "model.num_classes=3", "train.epochs=4",
                        "train.batch_size=8", "train.optimizer.kwargs={learning_rate: 3e-3}")
    s = run_json(tmp_path, config)
    assert s["policy"] == "mixed_bfloat16" and s["test_accuracy"] > 0.7
    vocabulary = (Path(s["run_dir"]) / "vocabulary.txt").read_text().split("\n")
    assert vocabulary[:2] == ["", "[UNK]"] and "goal" in vocabulary and len(vocabulary) <= 101


def test_csv_with_named_classes_streams(tmp_path):
    table = datafiles.csv_table(tmp_path / "iris.csv")
    config = experiment(tmp_path, "data.dataset=csv", f"data.path={table}",
                        "data.label_column=species", "data.validation_split=0.1",
                        "model.hidden_units=[16]", "model.num_classes=3", "train.epochs=3",
                        "train.batch_size=16", "train.optimizer.kwargs={learning_rate: 1e-2}")
    s = run_json(tmp_path, config)
    assert s["test_accuracy"] > 0.8
    assert (Path(s["run_dir"]) / "classes.txt").read_text().split() == ["setosa", "versicolor", "virginica"]
    # 240 rows: about 20% test, 10% of the rest validation; every row used once
    metrics = json.loads((Path(s["run_dir"]) / "metrics.jsonl").read_text().splitlines()[0])
    assert "val_accuracy" in metrics["metrics"]


def test_tfds_prepared_offline_trains(tmp_path):
    import tensorflow_datasets  # noqa: F401  (a broken install fails here, never skips)
    data_dir = datafiles.tfds_dataset(tmp_path / "tfds")
    config = experiment(tmp_path, "data.dataset=tfds", "data.name=tiny_shapes",
                        f"data.data_dir={data_dir}", *CNN, "train.epochs=3", "train.batch_size=16",
                        "train.optimizer.kwargs={learning_rate: 1e-2}")
    s = run_json(tmp_path, config)
    assert s["test_accuracy"] > 0.8 and s["dataset"].startswith("tfds:tiny_shapes")


def test_tfds_not_prepared_says_how_to_prepare(tmp_path):
    import tensorflow_datasets  # noqa: F401  (a broken install fails here, never skips)
    (tmp_path / "empty").mkdir()
    config = experiment(tmp_path, "data.dataset=tfds", "data.name=mnist",
                        f"data.data_dir={tmp_path / 'empty'}")
    refuses(tmp_path, config, "'mnist' is not prepared in", "download_and_prepare", command="run")


@pytest.mark.parametrize(("make", "overrides", "messages"), [
    (lambda p: (p / "flat").mkdir(), ["data.dataset=image_folder", "data.path={tmp}/flat"],
     ["no class sub-folders", "in its own sub-folder"]),
    (lambda p: (p / "few" / "a").mkdir(parents=True), ["data.dataset=image_folder", "data.path={tmp}/few"],
     ["no image files"]),
    (lambda p: datafiles.csv_table(p / "t.csv"), ["data.dataset=csv", "data.path={tmp}/t.csv",
                                                   "data.label_column=label"],
     ["no column 'label' (data.label_column); the columns are sepal_length"]),
    (lambda p: None, ["data.dataset=npz", "data.path={tmp}/none.npz"], ["no such file"]),
    (lambda p: None, ["data.dataset=csv", "data.path={tmp}/none.csv", "data.label_column=y"],
     ["no such file"]),
])
def test_bad_data_is_refused_before_anything_runs(tmp_path, make, overrides, messages):
    make(tmp_path)
    config = experiment(tmp_path, *(o.format(tmp=tmp_path) for o in overrides))
    refuses(tmp_path, config, *messages)


def test_broken_files_are_found_before_training(tmp_path):
    folder = datafiles.image_folder(tmp_path / "shapes", per_class=4)
    (folder / "circle" / "truncated.png").write_bytes(b"")
    config = experiment(tmp_path, "data.dataset=image_folder", f"data.path={folder}", *CNN)
    refuses(tmp_path, config, "truncated.png: empty file; remove or replace it, or set "
            "data.skip_bad_files: true", command="run")
    table = datafiles.csv_table(tmp_path / "t.csv", rows=20)
    lines = table.read_text().splitlines()
    lines[5] = lines[5].replace(lines[5].split(",")[0], "nan", 1)
    table.write_text("\n".join(lines) + "\n")
    config = experiment(tmp_path, "data.dataset=csv", f"data.path={table}",
                        "data.label_column=species", name="csv.yaml")
    refuses(tmp_path, config, "t.csv, line 6, column 1 (sepal_length): 'nan' is not a finite number",
            command="run")
