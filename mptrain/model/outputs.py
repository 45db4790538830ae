"""What a model's output is: probabilities or logits. Read from the model, not assumed.

mptrain's own heads end in a known activation. A model the user wrote (`python`, `saved`) may
end in a softmax or sigmoid (probabilities) or in a plain Dense layer (logits), and the loss
must know which: logits treated as probabilities train with a wrong loss and no error. So the
model's final layer is read, walking back past layers that only cast or reshape:
- a Softmax layer, or an activation softmax/sigmoid (an `Activation` layer, or a Dense or
  convolution's own `activation`): probabilities;
- a Dense, EinsumDense or convolution without activation (linear): logits.
A model whose last layer says nothing (a subclassed model, a custom layer) is called on a few
inputs: negative values or values above 1 are logits, rows of non-negative values that sum to
1 are probabilities. Anything else cannot be told, and `model.output_activation` must say.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

OutputKind = Literal["probabilities", "logits"]
PROBABILITY_ACTIVATIONS = ("softmax", "sigmoid")
PASS_THROUGH = ("Reshape", "Flatten", "Identity", "Dropout", "Permute")
MAX_DEPTH = 20


@dataclass(frozen=True)
class OutputReading:
    kind: OutputKind | None  # None: cannot tell
    evidence: str


def kind_of_activation(activation: str) -> OutputKind:
    """What `model.output_activation` declares."""
    return "probabilities" if activation in PROBABILITY_ACTIVATIONS else "logits"


def read_output(model, sample=None) -> OutputReading:
    """Probabilities or logits, from the model's final layers, else from its values on
    `sample` (a batch of inputs), else None."""
    structural = _read_layers(model)
    if structural.kind is not None or sample is None:
        return structural
    return _read_values(model, sample)


def _activation_name(layer) -> str | None:
    activation = getattr(layer, "activation", None)
    name = getattr(activation, "__name__", None) or (activation if isinstance(activation, str) else None)
    return name


def _producer(tensor):
    """The layer (operation) that produced a symbolic tensor, or None."""
    history = getattr(tensor, "_keras_history", None)
    return history.operation if history is not None else None


def _inputs_of(tensor) -> list:
    history = getattr(tensor, "_keras_history", None)
    if history is None:
        return []
    node = history.operation._inbound_nodes[history.node_index]
    return list(node.input_tensors)


def _read_layers(model) -> OutputReading:
    import keras

    try:
        tensor = model.outputs[0]
    except (AttributeError, IndexError, TypeError, ValueError):
        return OutputReading(None, "a subclassed model: its layers are not a graph to read")
    for _ in range(MAX_DEPTH):
        layer = _producer(tensor)
        if layer is None:
            break
        kind = type(layer).__name__
        activation = _activation_name(layer)
        if kind == "Softmax" or activation in PROBABILITY_ACTIVATIONS:
            what = activation or "softmax"
            return OutputReading("probabilities", f"its last layer {layer.name!r} is a {what}")
        if kind == "Activation" and activation == "linear" or kind in PASS_THROUGH:
            tensor = _inputs_of(tensor)[0] if _inputs_of(tensor) else None
            if tensor is None:
                break
            continue
        if activation == "linear" and kind in ("Dense", "EinsumDense", "Conv1D", "Conv2D", "Conv3D"):
            return OutputReading("logits", f"its last layer {layer.name!r} is a {kind} without "
                                           "activation")
        if isinstance(layer, keras.Model):
            inner = _read_layers(layer)  # a nested model: read its own last layers
            if inner.kind is not None:
                return inner
        return OutputReading(None, f"its last layer {layer.name!r} ({kind}"
                                   + (f", activation {activation}" if activation else "") + ") does not say")
    return OutputReading(None, "its last layers do not say")


def _read_values(model, sample) -> OutputReading:
    import numpy as np

    values = np.asarray(model(sample, training=False), dtype=np.float64)
    values = values.reshape(len(values), -1)
    if not np.isfinite(values).all():
        return OutputReading(None, "its output on a few inputs is not finite")
    if values.min() < 0 or values.max() > 1:
        return OutputReading("logits", f"its outputs on a few inputs range from {values.min():.3g} "
                                       f"to {values.max():.3g}, outside [0, 1]")
    if values.shape[1] > 1 and np.allclose(values.sum(axis=1), 1.0, atol=1e-3):
        return OutputReading("probabilities", "its outputs on a few inputs are non-negative rows "
                                              "that sum to 1")
    return OutputReading(None, "its outputs on a few inputs lie in [0, 1] without summing to 1")
