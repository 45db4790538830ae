"""What a model's output is: probabilities or logits. Read from the model, not assumed.

A model the user wrote (`python`, `saved`) may end in a softmax or sigmoid (probabilities) or
in a plain Dense layer (logits), and logits treated as probabilities train with a wrong loss
and no error. So the final layer is read, walking back past layers that only cast or reshape:
a softmax or sigmoid (a layer, or a layer's activation) says probabilities; a Dense, EinsumDense
or convolution without activation, logits. A model whose last layer says nothing (a subclassed
model, a custom layer) is called on a few inputs, and on them scaled up (logits grow with their
inputs, probabilities stay in [0, 1]). "Sum to 1" is judged in the precision the model computes
in: a bfloat16 softmax keeps about 3 significant digits, so its rows sum to 1 only within a few
of bfloat16's steps (2^-7), and a float32 tolerance would call mptrain's own recommended
policy's softmax "cannot tell". Anything else cannot be told, and `model.output_activation`
must say.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mptrain.model.keras_internals import inputs_of, output_index, producer

OutputKind = Literal["probabilities", "logits"]
PROBABILITY_ACTIVATIONS = ("softmax", "sigmoid")
VALUE_KEEPING = ("Reshape", "Flatten", "Identity", "Dropout", "Permute")
MAX_DEPTH = 20
# the spacing of numbers near 1 in each compute dtype
EPSILON = {"float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}
SUM_STEPS = 4  # measured: Keras' softmax rows in bfloat16 and float16 miss 1 by under 2 steps
MIN_SUM_TOLERANCE = 1e-3
INPUT_SCALE = 100.0  # the second probe's inputs: large enough that logits leave [0, 1]


@dataclass(frozen=True)
class OutputReading:
    kind: OutputKind | None  # None: cannot tell
    evidence: str
    softmax: bool = False  # read from a softmax layer or activation
    layer: object = None  # the layer whose activation made probabilities (read from the layers)


def read_output(model, sample=None, index: int = 0) -> OutputReading:
    """Probabilities or logits, from the final layers of the model's output `index`, else
    from its values on `sample` (a batch of inputs), else None."""
    structural = _read_layers(model, index)
    if structural.kind is not None or sample is None:
        return structural
    return _read_values(model, sample)


def _activation_name(layer) -> str | None:
    activation = getattr(layer, "activation", None)
    return getattr(activation, "__name__", None) or (activation if isinstance(activation, str) else None)


def _read_layers(model, index: int = 0) -> OutputReading:
    import keras

    try:
        tensor = model.outputs[index]
    except (AttributeError, IndexError, TypeError, ValueError):
        return OutputReading(None, "a subclassed model: its layers are not a graph to read")
    for _ in range(MAX_DEPTH):
        layer = producer(tensor)
        if layer is None:
            break
        kind = type(layer).__name__
        activation = _activation_name(layer)
        if kind == "Softmax" or activation in PROBABILITY_ACTIVATIONS:
            what = activation or "softmax"
            return OutputReading("probabilities", f"its last layer {layer.name!r} is a {what}",
                                 what == "softmax", layer)
        if kind == "Activation" and activation == "linear" or kind in VALUE_KEEPING:
            # no input (None) has no producer: the walk ends there
            tensor = inputs_of(tensor)[0] if inputs_of(tensor) else None
            continue
        if activation == "linear" and kind in ("Dense", "EinsumDense", "Conv1D", "Conv2D", "Conv3D"):
            return OutputReading("logits", f"its last layer {layer.name!r} is a {kind} without "
                                           "activation")
        if isinstance(layer, keras.Model):  # a nested model: read the last layers of this output
            inner = _read_layers(layer, output_index(tensor))
            if inner.kind is not None:
                return inner
        return OutputReading(None, f"its last layer {layer.name!r} ({kind}"
                                   + (f", activation {activation}" if activation else "") + ") does not say")
    return OutputReading(None, "its last layers do not say")


def sum_tolerance(compute_dtypes) -> float:
    """How far from 1 a row of probabilities may sum, computed in the least precise of
    `compute_dtypes`."""
    steps = [EPSILON.get(str(dtype), EPSILON["float32"]) for dtype in compute_dtypes]
    return max(MIN_SUM_TOLERANCE, SUM_STEPS * max(steps, default=EPSILON["float32"]))


def _values(model, inputs):
    import numpy as np

    values = np.asarray(model(inputs, training=False), dtype=np.float64)
    return values.reshape(len(values), -1)


def _read_values(model, sample) -> OutputReading:
    import keras
    import numpy as np

    values = _values(model, sample)
    if not np.isfinite(values).all():
        return OutputReading(None, "its output on a few inputs is not finite")
    if np.issubdtype(np.asarray(sample).dtype, np.floating):
        scaled = _values(model, np.asarray(sample) * INPUT_SCALE)
        if np.isfinite(scaled).all():  # 16 bits may overflow on large inputs: then unread
            values = np.concatenate([values, scaled])
    low, high = values.min(), values.max()
    if low < 0 or high > 1:
        return OutputReading("logits", f"its outputs on a few inputs range from {low:.3g} "
                                       f"to {high:.3g}, outside [0, 1]")
    if values.shape[1] == 1:
        if np.issubdtype(np.asarray(sample).dtype, np.floating):
            return OutputReading("probabilities", "its single output stays in [0, 1] on inputs of "
                                                  f"every scale up to {INPUT_SCALE:g}x (a sigmoid)")
        return OutputReading(None, "its single output lies in [0, 1] on a few inputs")
    # in the least precise of the model's own policy and the global one it was built under
    # (the layers of a subclassed model follow the global policy, not the wrapper's)
    tolerance = sum_tolerance({keras.config.dtype_policy().compute_dtype,
                               getattr(model, "compute_dtype", "float32")})
    if np.allclose(values.sum(axis=1), 1.0, rtol=0, atol=tolerance):
        return OutputReading("probabilities", "its outputs on a few inputs are non-negative rows "
                                              f"that sum to 1 (within {tolerance:.2g})")
    return OutputReading(None, "its outputs on a few inputs lie in [0, 1] without summing to 1 "
                               f"(within {tolerance:.2g})")


def sixteen_bit_probabilities(model) -> list[str]:
    """The layers (of the model itself, not a nested one) whose softmax or sigmoid makes an
    output, and that compute in 16 bits: their probabilities round to 0 and 1 a few steps
    from either (keras.io's U-Net ends in Conv2D(activation="softmax"): under bfloat16 its
    loss stalled at 1.16 where float32's fell to 0.25), and a cast after them is too late."""
    top = {id(layer) for layer in model.layers}
    last = [_read_layers(model, index).layer for index in range(len(model.outputs))]
    return [layer.name for layer in last
            if layer is not None and id(layer) in top and layer.compute_dtype != "float32"]
