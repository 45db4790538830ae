"""The model a run saves, as it is used: raw inputs in, predictions in the targets' own units.

mptrain feeds a model what its training needs: pixels divided by 255 for a model without a
Rescaling of its own, features standardised with the training split's mean and deviation
(`data.normalize`), targets standardised (`train.target_scaling`). A model.keras without those
steps takes what only mptrain's pipeline gives: loaded in plain Keras and given raw rows, it
predicts wrong numbers, silently. So the saved model carries them, as Keras' own layers do
it: a Rescaling and a Normalization before the trained model, an inverted Normalization
after it (`exported`). Each is named, so mptrain, loading such a model to train it again
(`model.kind: saved`), takes the trained model back out of them (`trained_part`): its own
pipeline does those steps.
"""

from __future__ import annotations

PIXELS, FEATURES, TARGETS = "raw_pixels", "raw_features", "target_units"


def exported(model, pixels: bool, features, targets) -> tuple[object, str | None]:
    """`model` with the steps mptrain's pipeline did around it, and a note saying what it
    takes and returns (None: it needed none, and is returned as it is). `pixels`: mptrain
    divided them by 255; `features`: (mean, std) per feature (`Dataset.feature_scale`);
    `targets`: the objective's `TargetScale` (a regression's). A model with several inputs or
    outputs is returned as it is: the steps are per input and per output."""
    import keras
    import numpy as np

    from mptrain.model.own_step import has_graph

    if not (pixels or features or targets) or not has_graph(model) \
            or len(model.inputs) != 1 or len(model.outputs) != 1:
        return model, None
    raw = keras.Input(shape=model.inputs[0].shape[1:], name="raw")
    x, said = raw, []
    if pixels:
        x = keras.layers.Rescaling(1 / 255, dtype="float32", name=PIXELS)(x)
        said.append("pixels (0-255)")
    if features:
        mean, std = (np.asarray(v, "float32") for v in features)
        x = keras.layers.Normalization(mean=mean, variance=std**2, dtype="float32", name=FEATURES)(x)
        said.append("features")
    y = model(x)
    if targets:
        mean, std = (np.asarray(v, "float32") for v in (targets.mean, targets.std))
        y = keras.layers.Normalization(mean=mean, variance=std**2, invert=True, dtype="float32",
                                       name=TARGETS)(y)
    takes = [f"takes the {' and '.join(said)} as the data stores them"] if said else []
    returns = ["returns the targets in their own units"] if targets else []
    return keras.Model(raw, y, name=model.name), (
        f"model.keras {' and '.join(takes + returns)}: the steps mptrain's pipeline took are its "
        "first and last layers (keras.models.load_model, then predict on raw rows)")


def trained_part(model):
    """The trained model inside one `exported` wrapped (or `model` itself)."""
    import keras

    if not any(layer.name in (PIXELS, FEATURES, TARGETS) for layer in model.layers):
        return model
    return next(layer for layer in model.layers if isinstance(layer, keras.Model))
