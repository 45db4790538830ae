"""The one walk over a model's layers, nested models (an application's backbone, a hub
backbone) included, in the model's order.

plan's per-layer timings, memory's estimate, lint's findings and the FLOP count all walk a
model through here, so what they name a user can paste into `model.float32_layers` or
`model.layer_policies` (`dtypes.rebuild_with_policies` finds a nested model's layers there).
"""

from __future__ import annotations


def leaf_layers(model, whole: tuple[str, ...] = ()):
    """Every layer that holds no layers of its own (inputs aside: an InputLayer computes
    nothing); a layer whose class is named in `whole` is one layer even if it holds others
    (an attention layer timed as one)."""
    for layer in model.layers:
        if getattr(layer, "layers", None) and type(layer).__name__ not in whole:
            yield from leaf_layers(layer, whole)
        elif type(layer).__name__ != "InputLayer":
            yield layer


def layer_names(model):
    """Every layer's name, the models that hold layers included (a backbone's own name comes
    before its layers')."""
    for layer in model.layers:
        yield layer.name
        if getattr(layer, "layers", None):
            yield from layer_names(layer)


def input_structure(model):
    """The model's inputs as it takes them: one tensor, a list, or a dict of named columns
    (a Sequential never called has only its list of inputs)."""
    try:
        return model.input
    except (AttributeError, ValueError):
        return model.inputs[0] if len(model.inputs) == 1 else list(model.inputs)


def named_outputs(model) -> dict:
    """The model's outputs by the names Keras matches a loss per output by: a dict output's
    keys (compile reads y_pred's keys), else its output layers' names, in the outputs' order.
    A builder's `{"value": Dense(1), "kind": Dense(3)}` has outputs "value" and "kind" whatever
    Keras named its layers (dense_1, dense_2), and in that order of keys wherever it is read."""
    try:
        structure = model.output
    except (AttributeError, ValueError):
        structure = None
    if isinstance(structure, dict):
        return dict(structure)
    return dict(zip(model.output_names, model.outputs, strict=True))
