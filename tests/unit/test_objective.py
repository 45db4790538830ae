"""The objective on recorded labels (nothing trains): which one a loss and its labels make,
what each refuses, the head it asks for; the CSV's validation split by class, a time series'
windows split by time; recurrent layers' FLOPs and a model whose graph cannot be traced."""

import re

import numpy as np
import pytest

from mptrain.errors import ConfigError, DataError
from mptrain.objective import (
    Binary,
    Classes,
    Compiled,
    DenseClasses,
    MultiLabel,
    Several,
    Values,
    family_of,
    for_head,
    label_stats,
    lower_is_better,
    objective_for,
)
from tests.datafiles import regression_table, weather_table


def stats(y, train=None):
    y = np.asarray(y)
    return label_stats(y if train is None else np.asarray(train), y, "data.npz")


def test_every_loss_keras_exports_is_claimed_by_one_objective_or_refused_by_name():
    """The table a loss is read by holds every name `keras.losses` exports (functions,
    classes, Keras' short names), each the very loss Keras' own `get` gives; one no objective
    of mptrain's judges is refused by name, with what to do instead."""
    import keras

    from mptrain.objective.losses import BY_NAME, resolve

    exported = {name for name in dir(keras.losses) if not name.startswith("_")
                and name not in ("get", "serialize", "deserialize", "Loss", "LossFunctionWrapper",
                                 "Reduction")}
    exported |= {"bce", "BCE", "mse", "MSE", "mae", "MAE", "mape", "MAPE", "msle", "MSLE", "kld",
                 "KLD"}
    assert exported <= set(BY_NAME), exported - set(BY_NAME)
    for name in exported:
        try:  # a function, or an instance
            keras_own = keras.losses.get(name)
        except ValueError:  # exported, and not in get's table (categorical_generalized_...)
            keras_own = getattr(keras.losses, name)
        kind, own = BY_NAME[name], getattr(keras_own, "__name__", type(keras_own).__name__)
        assert own in (kind.keras_class, kind.function), name
    assert [family_of(n).name for n in ("sparse_categorical_crossentropy", "CategoricalCrossentropy",
                                   "binary_focal_crossentropy", "mse", "Huber", "squared_hinge")] == [
        "classes", "classes", "binary", "values", "values", "binary"]
    for refused, why in (("poisson", "predictions must be positive rates"), ("ctc", "sequences"),
                         ("kl_divergence", "distributions")):
        with pytest.raises(ConfigError, match=f"train.loss {refused}: mptrain has no objective .*{why}"):
            resolve(refused)
    with pytest.raises(ConfigError, match="'not_a_loss': not a loss Keras knows"):
        resolve("not_a_loss")
    with pytest.raises(ConfigError, match="from_logits is mptrain's to set"):
        resolve({"name": "binary_crossentropy", "kwargs": {"from_logits": True}})


def test_the_loss_and_the_labels_choose_the_objective():
    """By Keras' names and class names alike; each objective's head and quality."""
    ids = objective_for(None, stats([0, 1, 2, 2]))
    assert isinstance(ids, Classes)
    assert (ids.units, ids.activation, ids.quality.metric) == (3, "softmax", "accuracy")
    one_hot = objective_for("categorical_crossentropy", stats(np.eye(3)[[0, 1, 2, 1]]))
    assert isinstance(one_hot, Classes) and one_hot.units == 3 and one_hot.labels.one_hot
    masks = objective_for(None, stats(np.array([[[0, 1], [2, 1]]] * 4)[..., None]))
    assert isinstance(masks, DenseClasses) and masks.labels.dense == (2, 2)
    assert masks.quality.metric == "mean_iou"
    binary = objective_for("binary_crossentropy", stats([0, 1, 1, 0]))
    assert isinstance(binary, Binary) and binary.units == 1 and binary.builder_classes() == 2
    tags = objective_for("binary_crossentropy", stats([[0, 1, 1], [1, 0, 0]]))
    assert isinstance(tags, MultiLabel) and tags.units == 3 and tags.quality.metric == "auc"
    targets = objective_for("huber", stats([[1.5, 2.0], [0.5, -1.0]]))
    assert isinstance(targets, Values) and targets.units == 2 and not targets.quality.higher_is_better
    scaled = objective_for("mse", stats([1000.0, 3000.0]), target_scaling="standard")
    assert scaled.labels.scale.mean == [2000.0] and scaled.labels.scale.std == [1000.0]
    several = objective_for({"a": "mse", "b": "sparse_categorical_crossentropy"},
                            {"a": stats([0.5, 1.5]), "b": stats([0, 1])})
    assert isinstance(several, Several) and several.quality.metric == "a_mae"
    compiled = objective_for(None, stats([0.5, 1.5]), {"loss": "mse", "metrics": ["mae"]})
    assert isinstance(compiled, Compiled) and compiled.quality.metric == "mae"
    assert compiled.compile_arguments() == {"loss": "mse", "metrics": ["mae"]}
    # class ids as stored: as many classes as the highest id says (it read "1 classes")
    ids = objective_for(None, stats([0, 2, 1]), {"loss": "sparse_categorical_crossentropy"})
    assert ids.describe() == "the model's own compile (3 classes; loss sparse_categorical_crossentropy)"


def test_a_logits_heads_auc_and_accuracy_are_read_from_its_logits():
    """A binary head that returns logits (no sigmoid): the AUC, precision, recall and
    accuracy mptrain compiles are those of its probabilities, as Keras' own on sigmoid(z):
    read as if the logits were probabilities, the AUC once fell from 0.879 to 0.831."""
    import keras

    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, (400, 1)).astype("float32")
    logits = (rng.normal(0, 3, (400, 1)) + 2.5 * (y - 0.5)).astype("float32")
    binary = objective_for("binary_crossentropy", stats(y.ravel()))
    for name, theirs in (("auc", keras.metrics.AUC()), ("accuracy", keras.metrics.BinaryAccuracy()),
                         ("precision", keras.metrics.Precision()), ("recall", keras.metrics.Recall())):
        mine = binary.metric(name, "logits")
        mine.update_state(y, logits)
        theirs.update_state(y, keras.ops.sigmoid(logits))
        assert float(mine.result()) == pytest.approx(float(theirs.result()), abs=2e-3), name


def test_a_head_without_data_serves_the_objective_its_width_says():
    """A model built without its data (`for_head`): under binary_crossentropy, 3 outputs are
    3 labels (it raised a DataError: the labels went to 2); 1 output is one 0/1 label."""
    tags = for_head("binary_crossentropy", 3)
    assert isinstance(tags, MultiLabel) and tags.units == 3
    one = for_head("binary_crossentropy", 1)
    assert type(one) is Binary and one.units == 1 and one.builder_classes() == 2
    assert type(for_head(None, None)) is Classes and for_head(None, None).units == 2
    assert for_head("sparse_categorical_crossentropy", 7).units == 7
    targets = for_head("huber", 2)
    assert isinstance(targets, Values) and targets.units == 2 and for_head("mse", None).units == 1


def test_targets_are_read_as_keras_takes_them_soft_probabilities_and_any_rank():
    """A binary loss takes probabilities as targets (keras.io's collaborative filtering trains
    on ratings scaled to 0..1), judged by its loss, which an accuracy cannot read; a
    regression's targets of any rank are compared whole, the last axis a position's (a Conv1D
    autoencoder's (288, 1) windows were refused: "1 value(s) per example and 288 targets")."""
    soft = objective_for("binary_crossentropy", stats([0.1, 0.75, 1.0, 0.0]))
    assert isinstance(soft, Binary) and soft.labels.soft and soft.quality.metric == "loss"
    assert soft.default_metrics() == [] and "a probability of 1 per example" in soft.describe()
    # several probabilities per example: a sigmoid each (they were read as one, for 1 unit)
    several = objective_for("binary_crossentropy", stats([[0.1, 0.9, 0.5], [1.0, 0.0, 0.25]]))
    assert isinstance(several, MultiLabel) and several.units == 3 and several.quality.metric == "loss"
    assert "3 probabilities per example" in several.describe()
    windows = objective_for("mse", stats(np.zeros((4, 288, 1)) + np.arange(4)[:, None, None]))
    assert isinstance(windows, Values) and windows.units == 1 and windows.labels.dense == (288,)
    windows.check_positions((None, 288, 1))
    with pytest.raises(ConfigError, match="its output must be 288x1 per example"):
        windows.check_positions((None, 1))
    with pytest.raises(ConfigError, match="has 288x1 per example: leave it out"):
        objective_for("mse", stats(np.zeros((4, 288, 1)) + np.arange(4)[:, None, None]),
                      target_scaling="standard")


def test_labels_a_loss_cannot_take_are_refused_naming_the_data_and_the_fix():
    with pytest.raises(DataError, match="labels must be class ids .* not whole numbers; for values "
                                        "to predict use a regression loss"):
        objective_for(None, stats([0.5, 1.25]))
    with pytest.raises(DataError, match="binary_crossentropy takes labels 0 and 1, and these go up to 3"):
        objective_for("binary_crossentropy", stats([0, 1, 3]))
    with pytest.raises(DataError, match="every training example has the same class"):
        objective_for(None, stats([0, 1, 1], train=[1, 1]))
    with pytest.raises(ConfigError, match="give train.loss a loss for each"):
        objective_for(None, {"a": stats([0, 1])})
    with pytest.raises(ConfigError, match="names output 'c', and the data has labels for a"):
        objective_for({"c": "mse"}, {"a": stats([0, 1])})


def test_each_objective_refuses_a_head_that_cannot_learn_its_labels():
    from types import SimpleNamespace

    softmax = SimpleNamespace(kind="probabilities", softmax=True, evidence="its last layer is a softmax")
    linear = SimpleNamespace(kind="logits", softmax=False, evidence="a Dense")
    with pytest.raises(ConfigError, match="a softmax over 1 unit"):
        objective_for(None, stats([0, 1, 2])).check(1, softmax, None)
    with pytest.raises(ConfigError, match="takes one output, the probability of 1, and the model has 3"):
        objective_for("binary_crossentropy", stats([0, 1])).check(3, linear, None)
    with pytest.raises(ConfigError, match="a softmax makes the labels compete"):
        objective_for("binary_crossentropy", stats([[0, 1], [1, 1]])).check(2, softmax, None)
    with pytest.raises(ConfigError, match="end in a linear Dense"):
        objective_for("mse", stats([0.5, 2.5])).check(1, softmax, None)
    with pytest.raises(ConfigError, match="outputs 2 value.* and the data has 1 target"):
        objective_for("mse", stats([0.5, 2.5])).check(2, linear, None)
    with pytest.raises(ConfigError, match="class_weight weighs classes"):
        objective_for("mse", stats([0.5, 2.5])).check(1, linear, {0: 1.0})
    assert objective_for(None, stats([0, 1])).check(3, linear, None) == [
        "the model has 3 outputs and the data 2 classes: outputs 2..2 are never a label"]
    # 5 multi-hot labels under a sparse loss read as a class at each of 5 positions: the
    # fix named is the multi-label one, not "2 classes"
    with pytest.raises(ConfigError) as refused:
        objective_for("sparse_categorical_crossentropy",
                      stats([[1, 0, 1, 0, 0], [0, 1, 1, 0, 1]])).check(1, linear, None)
    assert ("labels read as 2 classes at each of 5 positions); if they are 5 yes/no labels per "
            "example (multi-hot), use train.loss: binary_crossentropy with 5 sigmoid outputs"
            in str(refused.value)), refused.value


def test_an_epoch_rule_knows_which_way_each_metric_improves():
    assert [lower_is_better(m) for m in ("val_loss", "mae", "val_root_mean_squared_error",
                                         "priority_mae", "accuracy", "val_auc", "mean_iou")] == [
        True, True, True, True, False, False, False]


def test_a_csv_sorted_by_class_gives_validation_every_class_and_says_its_rule(tmp_path):
    """Keras' validation_split takes the last rows: a file sorted by class gave a one-class
    validation set. The same share of each class instead, by a hash of the row number."""
    from mptrain.config.kinds import CsvData
    from mptrain.data.tabular import read_table

    rows = "".join(f"{i // 50},{i},{i % 7}\n" for i in range(100))  # class 0 then class 1
    (tmp_path / "sorted.csv").write_text("label,a,b\n" + rows)
    table = read_table(CsvData(dataset="csv", path=tmp_path / "sorted.csv", label_column="label",
                               validation_split=0.2))
    labels = np.array([i // 50 for i in range(100)])
    val = labels[table.val_rows]
    assert set(val) == {0, 1} and abs((val == 0).sum() - (val == 1).sum()) <= 1
    # spread through each class, not its last (or first) rows: a file sorted by time within
    # each class would validate on its newest only
    places = np.asarray(table.val_rows) % 50
    assert places.min() < 25 <= places.max(), sorted(places)
    assert not set(table.val_rows) & set(table.train_rows) & set(table.test_rows)
    prices = read_table(CsvData(dataset="csv", path=regression_table(tmp_path / "h.csv", sort=True),
                                label_column="price", validation_split=0.2))
    assert prices.classes is None and len(prices.val_rows) > 20
    assert prices.val_rows.max() > 150 and prices.val_rows.min() < 60  # from all over the file


def test_a_time_series_is_cut_into_windows_that_never_cross_its_parts(tmp_path):
    from mptrain.config.kinds import TimeseriesData
    from mptrain.data.series import cut

    cfg = TimeseriesData(dataset="timeseries", path=weather_table(tmp_path / "w.csv", rows=200),
                         time_column="Date Time", target_columns="T (degC)", sequence_length=5,
                         sampling_rate=2, target_offset=3, validation_split=0.25, test_split=0.2)
    windows = cut(cfg)
    assert windows.names == ["p (mbar)", "T (degC)", "rh (%)"] and windows.offset == 4 * 2 + 3
    train, val, test = windows.starts
    assert train[0] == 0 and test[-1] + windows.offset == 199
    assert train[-1] + windows.offset < val[0] and val[-1] + windows.offset < test[0]
    temperature = np.loadtxt(tmp_path / "w.csv", delimiter=",", skiprows=1, usecols=2, dtype=np.float32)
    assert windows.targets[train[3] + windows.offset] == temperature[3 + 11]


def test_recurrent_layers_are_counted_over_their_timesteps_and_a_model_never_crashes_the_count():
    import keras

    from mptrain.model.flops import forward_profile

    inputs = keras.Input((None,), dtype="int32")
    x = keras.layers.Embedding(1000, 16)(inputs)
    x = keras.layers.Bidirectional(keras.layers.LSTM(8, return_sequences=True))(x)
    x = keras.layers.GRU(4)(x)
    profile = forward_profile(keras.Model(inputs, keras.layers.Dense(1)(x)), (50,))
    # a step's multiply-adds are its input and recurrent kernels' sizes, times 50 steps
    assert profile.flops_by_layer["bidirectional"] >= 2 * 2 * (16 * 32 + 8 * 32) * 50
    assert profile.flops_by_layer["gru"] >= 2 * (16 * 12 + 4 * 12) * 50 and not profile.uncounted
    unknown = forward_profile(keras.Model(inputs, keras.layers.Dense(1)(keras.layers.LSTM(4)(
        keras.layers.Embedding(10, 4)(inputs)))))
    assert any("timesteps unknown" in u for u in unknown.uncounted)

    class NeedsTwo(keras.layers.Layer):
        def call(self, x):
            if x.shape[0] == 1:  # a batch of one cannot be traced
                raise ValueError("a batch of one")
            return x

    flat = keras.Input((4,))
    broken = forward_profile(keras.Model(flat, keras.layers.Dense(2)(NeedsTwo()(flat))))
    assert broken.flops == 0 and broken.uncounted[0].startswith("the whole model")


def test_losses_and_metrics_are_named_as_keras_names_them_and_checked_by_keras():
    from mptrain.config import validate
    from mptrain.training.compiled import check_names
    from tests.helpers import tiny_raw

    check_names(validate(tiny_raw("train.loss=huber", "train.metrics=[mae, TruePositives, "
                                  "root_mean_squared_error]"), "<test>"))
    for key, wrong, said in (("train.loss", "mean_square_error", "did you mean mean_squared_error?"),
                             ("train.metrics", "[mae, auc2]", "train.metrics 'auc2': not a name")):
        with pytest.raises(ConfigError, match=re.escape(said)):
            check_names(validate(tiny_raw("train.loss=mse", f"{key}={wrong}"), "<test>"))


@pytest.mark.parametrize("method", ["train_step", "test_step", "compute_loss", "compute_metrics"])
def test_a_model_with_any_training_method_of_its_own_keeps_it_and_outputs_float32(method):
    """Overriding any one of Keras' training methods makes the model's step its own: kept
    under every policy (the custom loop, which would never call it, is refused), its output
    cast to float32 in its own call: the values it returns, not a flag, are float32."""
    import keras

    from mptrain.config import validate
    from mptrain.model import ensure_float32_output
    from mptrain.model.own_step import check_own_step, own_methods
    from mptrain.precision.policy import apply_policy
    from tests.helpers import tiny_raw

    def overridden(self, *args, **kwargs):  # the user's own, doing what Keras' does
        return getattr(keras.Model, method)(self, *args, **kwargs)

    own = type("Own", (keras.Model,), {method: overridden})
    apply_policy("mixed_bfloat16")
    try:
        inputs = keras.Input((4,))
        model = own(inputs, keras.layers.Dense(3)(inputs))
        assert own_methods(model) == [f"Own.{method}"]
        kept, notes = ensure_float32_output(model)
        assert kept is model and "keeping Own and its training step" in notes[0]
        assert str(kept(np.ones((2, 4), np.float32)).dtype) in ("float32", "<dtype: 'float32'>")
        with pytest.raises(ConfigError, match=f"the model defines Own.{method}, which it would never call"):
            check_own_step(validate(tiny_raw("train.loop=custom"), "<test>"), model)
        assert check_own_step(validate(tiny_raw(), "<test>"), model) == [
            f"the model trains with its own Own.{method} (Model.fit calls it under every policy)"]
    finally:
        apply_policy("float32")


def test_features_on_scales_apart_are_named_unless_the_model_normalises_them():
    """Two orders of magnitude between the largest features as stored: named, with the key
    a CSV has (data.normalize) or the fix for arrays; not below that, not where the model
    adapts a Normalization of its own."""
    from types import SimpleNamespace

    from mptrain.data.dataset import largest
    from mptrain.precision.lint import feature_findings

    plain, csv, arrays = SimpleNamespace(layers=[]), SimpleNamespace(data=SimpleNamespace(
        normalize=False)), SimpleNamespace(data=SimpleNamespace())
    raw = largest(np.array([[2400.0, 1.5, 0.0], [-4100.0, 2.3, 0.0]]), ["size", "distance", "never"])
    assert raw == (("size", 4100.0), ("distance", 2.3), ("never", 0.0))
    [said] = feature_findings(raw, plain, csv)
    assert said.severity == "warning" and ("on scales 3 orders of magnitude apart: size reaches "
                                           "4,100 and distance 2.3") in said.message
    assert "data.normalize: true" in said.message
    assert "keras.layers.Normalization adapted" in feature_findings(raw, plain, arrays)[0].message
    assert feature_findings((("a", 50.0), ("b", 1.0)), plain, csv) == []
    import keras

    adapted = SimpleNamespace(layers=[keras.layers.Normalization()])
    assert feature_findings(raw, adapted, csv) == []


def test_each_losss_arguments_are_the_installed_keras_own_and_a_typo_is_refused_at_validate():
    """`validate` checks a loss's kwargs without importing Keras, from the table; the table
    holds each class's own arguments as the installed Keras declares them (a Keras release
    that adds or renames one fails here, not in a user's run), and a typo is refused naming
    the argument meant (`gama` ran to "unexpected keyword argument" after the data loaded)."""
    import inspect

    import keras

    from mptrain.objective.losses import LOSS_COMMON, LOSSES, MPTRAIN_ARGUMENTS, resolve

    for kind in LOSSES:
        declared = inspect.signature(getattr(keras.losses, kind.keras_class)).parameters
        own = tuple(p for p in declared if p not in ("self", *LOSS_COMMON, *MPTRAIN_ARGUMENTS))
        assert kind.arguments == own or kind.family is None, kind.keras_class
    with pytest.raises(ConfigError, match=r"kwargs 'gama' is not an argument of BinaryFocalCrossentropy "
                                          r"\(did you mean gamma\?\)"):
        resolve({"name": "binary_focal_crossentropy", "kwargs": {"gama": 3.0}})
    assert resolve({"name": "huber", "kwargs": {"delta": 0.5, "reduction": "sum"}}).kwargs["delta"] == 0.5
