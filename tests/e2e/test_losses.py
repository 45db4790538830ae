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
    plain.compile(loss=getattr(keras.losses, kind.keras_class)(**kwargs))
    units = prepared.model.outputs[0].shape[-1]
    theirs = plain.evaluate(x, keras_labels(kind, y, units), verbose=0, return_dict=True)["loss"]
    assert ours == pytest.approx(theirs, rel=1e-5)
    said = ", ".join(f"{k}={v}" for k, v in kwargs.items())
    assert prepared.objective.loss_name == (f"{kind.keras_class} ({said})" if kwargs else kind.function)
