"""The loss an experiment names is the loss trained: for each of Keras' losses that an
objective of mptrain's claims, with and without the arguments Keras' docs list, mptrain's
compiled model computes on its first batch the loss Keras' own compile computes from the same
name and arguments, on the same weights and the same batch, as a Keras user would give it its
labels. (A focal loss once trained as plain cross-entropy: 0.765 where focal gives a quarter.)
The names no objective claims are refused before anything runs (`test_objective.py`)."""

import numpy as np
import pytest

from mptrain.objective.losses import LOSSES

# the data each family's labels come from (the synthetic classes: ids; 0/1; ids as values)
FAMILY_DATA = {"classes": ["data.num_classes=4"],
               "binary": ["data.num_classes=2", "model.num_classes=1"],
               "values": ["data.num_classes=4", "model.num_classes=1"]}
ARGUMENTS = {  # arguments Keras' docs list, each changing what the loss computes
    "BinaryFocalCrossentropy": {"gamma": 3.0, "alpha": 0.4, "apply_class_balancing": True},
    "CategoricalFocalCrossentropy": {"gamma": 3.0, "alpha": 0.4},
    "BinaryCrossentropy": {"label_smoothing": 0.2},
    "CategoricalCrossentropy": {"label_smoothing": 0.2},
    "Huber": {"delta": 0.3},
    "CategoricalGeneralizedCrossEntropy": {"q": 0.8},
}
CASES = [(kind, {}) for kind in LOSSES if kind.family is not None] + \
    [(kind, ARGUMENTS[kind.keras_class]) for kind in LOSSES if kind.keras_class in ARGUMENTS]


def keras_labels(kind, y, units: int):
    """The labels as a Keras user gives them to this loss, from the class ids (or values)
    of the batch: one-hot rows to a categorical loss, ids to a sparse one, 0/1 and values as
    they are."""
    y = np.asarray(y)
    if kind.family != "classes":
        return y
    ids = y.argmax(axis=-1) if y.ndim == 2 else y
    return np.eye(units, dtype=np.float32)[ids] if kind.one_hot else ids


def keras_own(kind, kwargs: dict):
    """Keras' own reading of what the experiment wrote, the name or the class with its
    arguments, never mptrain's table (a name the table mapped to another loss is caught):
    `keras.losses.get`, or, for the names it cannot read (its generalized cross-entropy),
    the class Keras exports under the name written (a function name in CamelCase: that
    function alone needs an argument)."""
    import keras

    written = {"class_name": kind.keras_class, "config": kwargs} if kwargs else kind.function
    try:
        return keras.losses.get(written)
    except ValueError:
        name = kind.keras_class if kwargs else "".join(w.capitalize() for w in kind.function.split("_"))
        return getattr(keras.losses, name)(**kwargs)


@pytest.mark.parametrize(("kind", "kwargs"), CASES, ids=[
    f"{kind.function}{'-' + '-'.join(kwargs) if kwargs else ''}" for kind, kwargs in CASES])
def test_the_first_step_loss_is_keras_own_for_the_name_and_arguments_given(tiny_config, kind, kwargs):
    import keras

    from mptrain.runs.experiment import prepare

    loss = f"{{name: {kind.keras_class}, kwargs: {kwargs}}}" if kwargs else kind.function
    prepared = prepare(tiny_config(*FAMILY_DATA[kind.family], f"train.loss={loss}",
                                   "train.xla_optimizer_update=false"))
    x, y = next(iter(prepared.batches.train))
    ours = prepared.model.evaluate(x, y, verbose=0, return_dict=True)["loss"]
    plain = keras.models.clone_model(prepared.model)
    plain.set_weights(prepared.model.get_weights())
    plain.compile(loss=keras_own(kind, kwargs))
    units = prepared.model.outputs[0].shape[-1]
    theirs = plain.evaluate(x, keras_labels(kind, y, units), verbose=0, return_dict=True)["loss"]
    assert ours == pytest.approx(theirs, rel=1e-5)
    said = ", ".join(f"{k}={v}" for k, v in kwargs.items())
    assert prepared.objective.loss_name == (f"{kind.keras_class} ({said})" if kwargs else kind.function)


TWO_HEADS = '''
import keras
from keras import layers


def build(input_shape, compiled=False):
    inputs = keras.Input(shape=input_shape)
    x = layers.Dense(16, activation="relu")(inputs)
    model = keras.Model(inputs, {"value": layers.Dense(1)(x),
                                 "kind": layers.Dense(3, activation="softmax")(x)})
    if compiled:  # the builder's own compile, its loss weights kept by mptrain's recompile
        model.compile(loss={"value": "mean_squared_error", "kind": "sparse_categorical_crossentropy"},
                      loss_weights={"value": 0.25, "kind": 3.0})
    return model
'''
WEIGHTS = {"value": 0.25, "kind": 3.0}


@pytest.mark.parametrize("where", ["train.loss_weights", "builder's compile"])
def test_each_outputs_loss_is_weighed_as_keras_weighs_it(tmp_path, tiny_config, where):
    """A dict-output model's first-batch loss is Keras' own compile's with the same loss
    weights: given in `train.loss_weights`, or in the builder's compile (a weight dropped on
    either path changes the loss several-fold: 0.25 and 3.0 against 1 and 1)."""
    import keras

    from mptrain.runs.experiment import prepare

    rng = np.random.default_rng(0)
    x = rng.normal(size=(96, 8)).astype(np.float32)
    kind = (x[:, 1] > 0).astype(np.int64) + (x[:, 2] > 0)
    np.savez(tmp_path / "two.npz", x_train=x, y_train_value=3 * x[:, :1] + 1, y_train_kind=kind,
             x_test=x[:32], y_test_value=3 * x[:32, :1] + 1, y_test_kind=kind[:32])
    (tmp_path / "two.py").write_text(TWO_HEADS)
    own = where != "train.loss_weights"
    overrides = (["model.kwargs={compiled: true}"] if own else
                 ["train.loss={value: mean_squared_error, kind: sparse_categorical_crossentropy}",
                  "train.loss_weights={value: 0.25, kind: 3.0}"])
    prepared = prepare(tiny_config(f"data={{dataset: npz, path: {tmp_path / 'two.npz'}}}",
                                   f"model={{kind: python, builder: '{tmp_path / 'two.py'}:build'}}",
                                   *overrides, "train.xla_optimizer_update=false"))
    x_batch, y_batch = next(iter(prepared.batches.train))
    ours = prepared.model.evaluate(x_batch, y_batch, verbose=0, return_dict=True)["loss"]
    plain = keras.models.clone_model(prepared.model)
    plain.set_weights(prepared.model.get_weights())
    plain.compile(loss={"value": "mean_squared_error", "kind": "sparse_categorical_crossentropy"},
                  loss_weights=WEIGHTS)
    theirs = plain.evaluate(x_batch, y_batch, verbose=0, return_dict=True)["loss"]
    plain.compile(loss={"value": "mean_squared_error", "kind": "sparse_categorical_crossentropy"})
    unweighted = plain.evaluate(x_batch, y_batch, verbose=0, return_dict=True)["loss"]
    assert ours == pytest.approx(theirs, rel=1e-5) and abs(theirs - unweighted) > 0.1 * theirs
