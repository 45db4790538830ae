"""Real Keras examples, as keras.io writes them (issue 42): the model's own `train_step` is
the training step under every policy, user code cannot corrupt a measurement, models that
cannot learn or cannot take the data are refused before training, and sequences keep their
shape."""

import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow  # noqa: F401  (a broken install fails here, never skips)

from mptrain.measure.compare import CompareRecord
from tests.helpers import experiment, mptrain, refuses, run_json

# keras.io's "Customizing what happens in fit()": a functional model of a subclass that
# brings its own step. FrozenModel's never updates the weights, so any training the loss or
# accuracy shows was done by another step. Its builder prints (keras.io's scripts keep
# model.summary()) and sets KERAS_BACKEND as the keras.io ViT does.
CUSTOM_STEP = '''
import os

import keras
import tensorflow as tf
from keras import layers


class CustomModel(keras.Model):
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(y=y, y_pred=y_pred)
            {scaled}
        gradients = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply(gradients, self.trainable_variables)
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(y, y_pred)
        return {{m.name: m.result() for m in self.metrics}}


class FrozenModel(keras.Model):
    def train_step(self, data):
        x, y = data
        y_pred = self(x, training=False)
        loss = self.compute_loss(y=y, y_pred=y_pred)
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(y, y_pred)
        return {{m.name: m.result() for m in self.metrics}}


def build(input_shape, num_classes, frozen=False):
    os.environ["KERAS_BACKEND"] = "jax"
    inputs = keras.Input(input_shape)
    x = layers.Dense(32, activation="relu")(inputs)
    outputs = layers.Dense(num_classes, activation="softmax")(x)
    model = (FrozenModel if frozen else CustomModel)(inputs, outputs)
    model.summary()
    print("built", model.name)
    return model
'''


@pytest.fixture(autouse=True)
def _keras_backend_restored(monkeypatch):
    """CUSTOM_STEP's builder sets KERAS_BACKEND in the process that calls it (this one, for
    `run` through the CLI in-process): restored after each test, for the processes later
    tests start."""
    monkeypatch.setenv("KERAS_BACKEND", "tensorflow")


def custom_step_experiment(tmp_path: Path, *overrides: str, scaled: bool = False) -> Path:
    (tmp_path / "custom.py").write_text(CUSTOM_STEP.format(
        scaled="loss = self.optimizer.scale_loss(loss)" if scaled else "pass"))
    return experiment(tmp_path, "model={kind: python, builder: 'custom.py:build'}", *overrides)


def epoch_losses(summary: dict) -> list[float]:
    lines = (Path(summary["run_dir"]) / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line)["metrics"]["loss"] for line in lines]


def test_a_frozen_train_step_stays_frozen_under_16_bits_in_a_compare_that_user_prints_cannot_break(
        tmp_path):
    """The issue's compare: float32 against mixed_bfloat16 of a model whose train_step never
    updates its weights. Both variants train with that step (neither learns: the same test
    accuracy, up to bfloat16's rounding), although the builder prints on stdout and sets
    KERAS_BACKEND=jax, which Keras in each variant's process would have read."""
    config = custom_step_experiment(tmp_path, "model.kwargs={frozen: true}", "train.epochs=3")
    done = mptrain("compare", str(config), "--policies", "float32,mixed_bfloat16", "--json",
                   cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    record = CompareRecord.model_validate(json.loads(done.stdout))  # stdout: the JSON alone
    f32, bf16 = (row.summary for row in record.variants)
    assert f32.status == bf16.status == "finished"
    assert bf16.compute_dtype == "bfloat16" and bf16.output_dtype == "float32"
    assert abs(bf16.test_accuracy - f32.test_accuracy) <= 0.03, (f32.test_accuracy, bf16.test_accuracy)
    for summary in (f32, bf16):
        losses = epoch_losses(summary.model_dump(mode="json"))
        assert len(losses) == 3 and max(losses) - min(losses) < 1e-3, losses  # nothing learned
    assert any("its own FrozenModel.train_step" in note for note in bf16.notes), bf16.notes


def test_a_train_step_of_its_own_learns_under_mixed_float16_when_it_scales_the_loss(tmp_path):
    """keras.io's CustomModel with the loss scaled, as Keras' own step scales it, learns under
    mixed_float16 with its class kept; `run --json` prints the JSON alone, the builder's
    model.summary() going to stderr."""
    config = custom_step_experiment(tmp_path, "policy=mixed_float16", "train.epochs=3", scaled=True)
    done = mptrain("run", str(config), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert "built" in done.stderr and "Total params" in done.stderr
    losses = epoch_losses(summary)
    assert losses[-1] < 0.8 * losses[0], losses
    assert summary["output_dtype"] == "float32" and summary["test_accuracy"] > 0.5
    assert any("keeping CustomModel and its training step" in note for note in summary["notes"])


@pytest.mark.parametrize("overrides, scaled, message", [
    (["train.loop=custom"], True, "train.loop custom trains with mptrain's own step, and the "
                                  "model defines CustomModel.train_step"),
    (["policy=mixed_bfloat16", "model.fused_layers=true"], True, "model.fused_layers rebuilds the "
                                                                  "model as a plain Keras model"),
], ids=["custom-loop", "fused"])
def test_what_would_drop_a_models_own_step_is_refused_before_training(tmp_path, overrides, scaled,
                                                                       message):
    config = custom_step_experiment(tmp_path, *overrides, scaled=scaled)
    refuses(tmp_path, config, message, command="run")


HEADS = '''
import keras
from keras import layers


def make_model(input_shape, num_classes):
    """keras.io's image classification: its binary branch is num_classes == 2."""
    inputs = keras.Input(shape=input_shape)
    x = layers.Dense(32, activation="relu")(inputs)
    if num_classes == 2:
        units, activation = 1, "sigmoid"
    else:
        units, activation = num_classes, "softmax"
    return keras.Model(inputs, layers.Dense(units, activation=activation)(x))


def softmax_one(input_shape):
    inputs = keras.Input(shape=input_shape)
    return keras.Model(inputs, layers.Dense(1, activation="softmax")(inputs))


def sigmoid_one(input_shape):
    inputs = keras.Input(shape=input_shape)
    return keras.Model(inputs, layers.Dense(1, activation="sigmoid")(inputs))


def two_inputs(input_shape):
    a, b = keras.Input(shape=input_shape, name="a"), keras.Input(shape=input_shape, name="b")
    merged = layers.Concatenate()([a, b])
    return keras.Model({"a": a, "b": b}, layers.Dense(2, activation="softmax")(merged))
'''
TWO_CLASSES = ["data.num_classes=2", "data.noise=1.0"]


def test_keras_ios_make_model_learns_a_binary_task(tmp_path):
    """make_model is given num_classes 2 under binary_crossentropy, as keras.io calls it, so
    it builds its sigmoid unit; given 1, it built a softmax over one unit that never learns."""
    (tmp_path / "heads.py").write_text(HEADS)
    config = experiment(tmp_path, *TWO_CLASSES, "train.loss=binary_crossentropy",
                        "model={kind: python, builder: 'heads.py:make_model'}")
    summary = run_json(tmp_path, config)
    assert summary["test_accuracy"] >= 0.8, summary


@pytest.mark.parametrize("builder, loss, message", [
    ("softmax_one", "binary_crossentropy", "is a softmax over 1 unit, which outputs 1.0 for every input"),
    ("sigmoid_one", "sparse_categorical_crossentropy",
     "needs one output per class and the model has 1 (the data's labels read as 2 classes)"),
    ("two_inputs", "sparse_categorical_crossentropy", "it takes 2 inputs (a, b)"),
], ids=["softmax-one-unit", "one-unit-for-two-classes", "dict-inputs"])
def test_validate_deep_refuses_what_run_could_not_train(tmp_path, builder, loss, message):
    """What `run` failed on after set-up (or trained with exit 0 into a constant model) is
    refused by `validate --deep`, and by `run`, naming the file, the layer and the fix."""
    (tmp_path / "heads.py").write_text(HEADS)
    config = experiment(tmp_path, *TWO_CLASSES, f"train.loss={loss}",
                        f"model={{kind: python, builder: 'heads.py:{builder}'}}")
    done = mptrain("validate", str(config), "--deep", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert message in " ".join(done.stderr.split()) and str(config.name) in done.stderr
    refuses(tmp_path, config, message, command="run")


CONV1D = '''
import keras
from keras import layers


def build(input_shape, num_classes):
    """keras.io's timeseries classification, small: Conv1D over (length, 1) sequences."""
    inputs = keras.Input(shape=input_shape)
    x = layers.Conv1D(16, 3, padding="same", activation="relu")(inputs)
    x = layers.GlobalAveragePooling1D()(x)
    return keras.Model(inputs, layers.Dense(num_classes, activation="softmax")(x))
'''


def test_float_sequences_reach_a_conv1d_as_stored(tmp_path):
    """An .npz of (N, 40, 1) float sequences keeps its shape (no image channel added) and a
    Conv1D model learns on it; its FLOPs count the convolution."""
    rng = np.random.default_rng(0)

    def draw(n):
        y = rng.integers(0, 2, n)
        t = np.linspace(0, 4 * np.pi, 40)
        x = (0.5 + 2 * y[:, None]) * np.sin(t[None, :]) + 0.3 * rng.normal(size=(n, 40))
        return x[..., None].astype(np.float32), y
    (x_train, y_train), (x_test, y_test) = draw(256), draw(64)
    np.savez(tmp_path / "seq.npz", x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    (tmp_path / "conv1d.py").write_text(CONV1D)
    config = experiment(tmp_path, f"data={{dataset: npz, path: {tmp_path / 'seq.npz'}}}",
                        "model={kind: python, builder: 'conv1d.py:build'}", "train.epochs=8",
                        "train.batch_size=32")
    summary = run_json(tmp_path, config)
    assert summary["test_accuracy"] >= 0.8, summary
    # the Conv1D alone: 40 positions x 16 filters x (3 x 1) window, a multiply-add each, x3 to train
    assert summary["flops_per_example"] >= 3 * 2 * 40 * 16 * 3


def test_grey_uint8_images_in_an_npz_get_a_channel_axis_and_say_so(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (96, 12, 12), dtype=np.uint8)
    y = (x.reshape(96, -1).mean(axis=1) > 127.5).astype(np.int64)
    np.savez(tmp_path / "grey.npz", x_train=x[:64], y_train=y[:64], x_test=x[64:], y_test=y[64:])
    config = experiment(tmp_path, f"data={{dataset: npz, path: {tmp_path / 'grey.npz'}}}",
                        "model={kind: cnn, filters: [4], dense_units: [8]}", "train.epochs=1",
                        "train.batch_size=32")
    summary = run_json(tmp_path, config)
    assert any("given a channel axis: (12, 12, 1)" in note for note in summary["notes"]), summary["notes"]


# keras.io's "Imbalanced classification: credit card fraud detection", small: a table with
# a rare class 1 on features of very different scales, a Normalization adapted to the
# training rows alone (it writes how many rows it saw), a sigmoid output.
IMBALANCED = '''
from pathlib import Path

import keras
from keras import layers


def make_model(input_shape, train_inputs, dtype=None):
    normalizer = layers.Normalization(dtype=dtype)
    normalizer.adapt(train_inputs)
    rows = sum(int(batch.shape[0]) for batch in train_inputs)
    Path(__file__).with_name("adapted_rows.txt").write_text(str(rows))
    inputs = keras.Input(shape=input_shape)
    x = layers.Dense(32, activation="relu")(normalizer(inputs))
    return keras.Model(inputs, layers.Dense(1, activation="sigmoid")(x))
'''


def fraud_table(path: Path, rows: int = 1000, seed: int = 0) -> Path:
    """10% frauds, set apart by a faint shift of three features among large-scale ones."""
    rng = np.random.default_rng(seed)
    label = (rng.random(rows) < 0.1).astype(int)
    features = rng.normal(0, 1, (rows, 6)) * [1, 1, 1, 1000, 50, 0.01]
    features[:, :3] += 0.7 * label[:, None]
    lines = ["v1,v2,v3,amount,time,tiny,fraud"]
    lines += [",".join(f"{v:.5g}" for v in row) + f",{y}" for row, y in zip(features, label, strict=True)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_imbalanced_example_adapts_to_the_training_rows_and_class_weight_finds_the_frauds(tmp_path):
    """class_weight, recall and precision as config keys, alike in both loops: unweighted, the
    model misses most frauds while its accuracy reads well; weighted as keras.io weighs them,
    it finds them. The builder's Normalization was adapted to the training rows only."""
    table = fraud_table(tmp_path / "fraud.csv")
    (tmp_path / "fraud_model.py").write_text(IMBALANCED)
    base = ["data={dataset: csv, path: fraud.csv, label_column: fraud, validation_split: 0.2, "
            "test_split: 0.25}", "model={kind: python, builder: 'fraud_model.py:make_model'}",
            "train.loss=binary_crossentropy", "train.metrics=[accuracy, precision, recall]",
            "train.epochs=6", "train.batch_size=32"]
    assert table.is_file()
    plain = run_json(tmp_path, experiment(tmp_path, *base, name="plain.yaml"))
    weighted = [run_json(tmp_path, experiment(tmp_path, *base, f"train.loop={loop}",
                                              "train.class_weight={0: 1.0, 1: 9.0}", name=f"{loop}.yaml"))
                for loop in ("fit", "custom")]
    test_rows = plain["test_examples"]
    assert int((tmp_path / "adapted_rows.txt").read_text()) == round((1000 - test_rows) * 0.8)
    assert plain["test_accuracy"] >= 0.85 and plain["test_metrics"]["recall"] <= 0.5, plain["test_metrics"]
    for summary in weighted:
        recall = summary["test_metrics"]["recall"]
        assert recall >= plain["test_metrics"]["recall"] + 0.3, summary["test_metrics"]
    fit, custom = (s["test_metrics"] for s in weighted)
    assert custom["recall"] == pytest.approx(fit["recall"], abs=0.1)
    # the loss each loop reports is the weighted one it minimised, as Keras' fit reports it
    assert weighted[0]["first_step_loss"] > 1.1 * plain["first_step_loss"]
    assert weighted[0]["final_train_loss"] == pytest.approx(weighted[1]["final_train_loss"], rel=0.02)


def test_a_normalization_adapted_under_16_bits_is_said_with_keras_fix_and_trains_in_float32(tmp_path):
    """Keras 3's Normalization.adapt fails on a dataset under mixed_bfloat16; the error says
    what to change, and with that change the example trains under mixed_bfloat16."""
    fraud_table(tmp_path / "fraud.csv")
    (tmp_path / "fraud_model.py").write_text(IMBALANCED)
    base = ["data={dataset: csv, path: fraud.csv, label_column: fraud}", "policy=mixed_bfloat16",
            "train.loss=binary_crossentropy", "train.epochs=2", "train.batch_size=32"]
    as_written = experiment(tmp_path, *base, "model={kind: python, builder: 'fraud_model.py:make_model'}")
    refuses(tmp_path, as_written, "create the layer in float32, layers.Normalization(dtype='float32')",
            command="run")
    fixed = experiment(tmp_path, *base, "model={kind: python, builder: 'fraud_model.py:make_model', "
                       "kwargs: {dtype: float32}}", name="fixed.yaml")
    summary = run_json(tmp_path, fixed)
    assert summary["status"] == "finished" and summary["compute_dtype"] == "bfloat16"


@pytest.mark.parametrize("loop", ["fit", "custom"])
def test_early_stopping_lowers_the_rate_on_a_plateau_and_restores_the_best_epoch(tmp_path, loop):
    """Keras' three epoch callbacks as keys, in both loops: the learning rate halves when
    val_loss stalls, training stops `patience` epochs after the best epoch, whose weights are
    kept in best.weights.h5 and restored for the test set."""
    config = experiment(tmp_path, f"train.loop={loop}", "train.epochs=40", "data.noise=3.0",
                        "train.optimizer.kwargs.learning_rate=0.05",
                        "train.early_stopping={patience: 3, restore_best_weights: true}",
                        "train.reduce_lr_on_plateau={patience: 1, factor: 0.5}")
    done = mptrain("run", str(config), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    # what a rule did is a note, not a warning
    assert "note: learning rate 0.05 -> 0.025" in done.stderr and "warning" not in done.stderr
    run_dir = Path(summary["run_dir"])
    epochs = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    val = [e["metrics"]["val_loss"] for e in epochs]
    best = val.index(min(val))
    assert summary["stopped_by"] == "early_stopping" and summary["status"] == "finished"
    assert len(epochs) == best + 1 + 3 < 40, val
    rates = [e["learning_rate"] for e in epochs]
    assert rates[0] == pytest.approx(0.05) and rates[-1] < rates[0]
    assert all(later in (earlier, pytest.approx(earlier / 2))
               for earlier, later in zip(rates, rates[1:], strict=False))
    assert (run_dir / "best.weights.h5").is_file()
    assert f"weights restored from epoch {best + 1}" in " ".join(summary["notes"])
    # the restored weights are the best epoch's: the test loss is near its validation loss,
    # not the last epoch's (a fresh run's test set is drawn like its validation set)
    assert abs(summary["test_loss"] - val[best]) < abs(summary["test_loss"] - val[-1]) + 0.05


def test_one_hot_labels_train_with_categorical_crossentropy(tmp_path):
    """keras.io's MNIST convnet stores to_categorical labels and names categorical_crossentropy:
    the loss named is the loss trained, on the one-hot rows it takes, and it learns."""
    rng = np.random.default_rng(0)
    centres = rng.normal(0, 1, (3, 8))

    def draw(n):
        y = rng.integers(0, 3, n)
        return (centres[y] + 0.3 * rng.normal(size=(n, 8))).astype(np.float32), np.eye(3)[y]
    (x_train, y_train), (x_test, y_test) = draw(192), draw(48)
    np.savez(tmp_path / "onehot.npz", x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    config = experiment(tmp_path, f"data={{dataset: npz, path: {tmp_path / 'onehot.npz'}}}",
                        "model.num_classes=3", "train.loss=categorical_crossentropy")
    summary = run_json(tmp_path, config)
    assert summary["test_accuracy"] >= 0.9 and "loss categorical_crossentropy" in summary["objective"]
    assert not any("one-hot labels read as class ids" in note for note in summary["notes"])


# keras.io's "Structured data classification from scratch" (its Keras-preprocessing-layers
# version), as written but for its data: one keras.Input per column, integer categories
# through an IntegerLookup, a text column through a StringLookup, numbers normalised, each
# adapted to the training rows it is given.
STRUCTURED = '''
import keras
import tensorflow as tf
from keras import layers


def encode_numerical_feature(feature, name, dataset):
    normalizer = layers.Normalization()
    feature_ds = dataset.map(lambda x: x[name])
    normalizer.adapt(feature_ds)
    return normalizer(feature)


def encode_categorical_feature(feature, name, dataset, is_string):
    lookup_class = layers.StringLookup if is_string else layers.IntegerLookup
    lookup = lookup_class(output_mode="binary")
    feature_ds = dataset.map(lambda x: x[name])
    lookup.adapt(feature_ds)
    return lookup(feature)


def build(train_inputs):
    sex = keras.Input(shape=(1,), name="sex", dtype="int64")
    thal = keras.Input(shape=(1,), name="thal", dtype="string")
    age = keras.Input(shape=(1,), name="age")
    chol = keras.Input(shape=(1,), name="chol")
    all_inputs = [sex, thal, age, chol]
    all_features = layers.concatenate([
        encode_categorical_feature(sex, "sex", train_inputs, False),
        encode_categorical_feature(thal, "thal", train_inputs, True),
        encode_numerical_feature(age, "age", train_inputs),
        encode_numerical_feature(chol, "chol", train_inputs),
    ])
    x = layers.Dense(32, activation="relu")(all_features)
    x = layers.Dropout(0.5)(x)
    output = layers.Dense(1, activation="sigmoid")(x)
    return keras.Model(all_inputs, output)
'''


def heart_table(path: Path, rows: int = 400, seed: int = 0) -> Path:
    """The heart data's shape: an integer category, a text category, two numbers on their own
    scales; the target follows the text column and the age."""
    rng = np.random.default_rng(seed)
    thal = rng.choice(["fixed", "normal", "reversible"], rows)
    age = rng.normal(55, 9, rows).round(1)
    sex = rng.integers(0, 2, rows)
    chol = rng.normal(240, 50, rows).round()
    risk = (thal == "reversible") * 2.0 + (age - 55) / 9 + rng.normal(0, 0.7, rows)
    target = (risk > 0.8).astype(int)
    lines = ["age,sex,chol,thal,trestbps,target"]  # the model leaves trestbps out
    lines += [f"{a},{s},{int(c)},{t},{130 + i % 40},{y}"
              for i, (a, s, c, t, y) in enumerate(zip(age, sex, chol, thal, target, strict=True))]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("loop", ["fit", "custom"])
def test_keras_ios_structured_data_model_takes_a_csv_column_by_column(tmp_path, loop):
    """data.inputs: columns gives one named input per column (int64, float32, string as the
    cells are), which keras.io's per-column preprocessing adapts to the training rows; it
    learns in both loops, and the FLOPs are counted through its dict of inputs."""
    heart_table(tmp_path / "heart.csv")
    (tmp_path / "heart_model.py").write_text(STRUCTURED)
    config = experiment(tmp_path, "data={dataset: csv, path: heart.csv, label_column: target, "
                        "inputs: columns, feature_columns: [age, sex, chol, thal]}",
                        "model={kind: python, builder: 'heart_model.py:build'}",
                        "train.loss=binary_crossentropy", f"train.loop={loop}", "train.epochs=8",
                        "train.batch_size=32")
    summary = run_json(tmp_path, config)
    assert summary["test_accuracy"] >= 0.8, summary
    assert summary["flops_per_example"] > 0


def test_columns_that_do_not_match_the_models_inputs_are_refused_naming_both(tmp_path):
    heart_table(tmp_path / "heart.csv")
    (tmp_path / "heart_model.py").write_text(STRUCTURED)
    config = experiment(tmp_path, "data={dataset: csv, path: heart.csv, label_column: target, "
                        "inputs: columns}", "model={kind: python, builder: 'heart_model.py:build'}",
                        "train.loss=binary_crossentropy")
    refuses(tmp_path, config, "it takes inputs named sex, thal, age, chol and the data gives the "
                              "inputs age, sex, chol, thal, trestbps", command="run")
    vector = experiment(tmp_path, "data={dataset: csv, path: heart.csv, label_column: target}",
                        name="vector.yaml")
    refuses(tmp_path, vector, "column 4 (thal): 'reversible' is not a finite number; features must be "
                              "finite numbers (a text column: data.inputs: columns")


def test_a_saved_model_takes_a_csv_column_by_column(tmp_path):
    """A saved model with one named input per column trains on data.inputs: columns, as a
    builder's does (its first input was once checked against the columns' count, refusing
    every saved model of more than one column)."""
    import keras

    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(2, 300)).round(3)
    lines = ["a,b,target", *(f"{x:.3f},{y:.3f},{int(x + y > 0)}" for x, y in zip(a, b, strict=True))]
    (tmp_path / "two.csv").write_text("\n".join(lines) + "\n")
    inputs = {name: keras.Input(shape=(1,), name=name) for name in ("a", "b")}
    hidden = keras.layers.Dense(8, activation="relu")(keras.layers.Concatenate()(list(inputs.values())))
    keras.Model(inputs, keras.layers.Dense(1, activation="sigmoid")(hidden)).save(tmp_path / "two.keras")
    config = experiment(tmp_path, "data={dataset: csv, path: two.csv, label_column: target, "
                        "inputs: columns}", "model.kind=saved", f"model.path={tmp_path / 'two.keras'}",
                        "train.loss=binary_crossentropy", "train.epochs=1", "train.batch_size=32")
    assert run_json(tmp_path, config)["status"] == "finished"
