"""How much memory training a model takes: estimated, and measured as a run trains.

Two estimates, for two moments:
- `training_bytes_lower_bound`, from the experiment alone, before anything is built: `validate`
  and `run` refuse an experiment that cannot fit before TensorFlow allocates it;
- `estimate`, from the model and optimizer as built, part by part (`MemoryPlan`): by it
  `memory` finds the largest batch, and compare and plan whether their variants fit side by side.
A run's own measurement is `MemoryMeter`'s (`MemoryStats` says what it can tell).
"""

from __future__ import annotations

import contextlib
import math
import resource
import sys

from mptrain.config.schema import ExperimentConfig
from mptrain.data.dataset import InputSpec
from mptrain.model.flops import one_example_graph, static_shape
from mptrain.model.walk import leaf_layers
from mptrain.record import FrozenRecord, Record


def training_bytes_lower_bound(config: ExperimentConfig, spec: InputSpec) -> int | None:
    """A lower bound on training memory, from the config alone (no model is built), for the
    kinds whose size the config fixes (`ModelKind.parameters_and_activations`: mlp, cnn,
    transformer): float32 weights, gradients and two optimizer slots per parameter, plus
    float32 activations of one batch kept for the backward pass. None for kinds whose size
    only the built model knows."""
    from mptrain.model.kinds import model_kind

    counted = model_kind(config.model).parameters_and_activations(config, spec)
    if counted is None:
        return None
    params, activations = counted
    return 4 * (4 * params + activations)


class MemoryPlan(Record):
    """Training memory under one policy: estimated from the built model (`estimate`), and
    measured (`measure.memory`)."""

    policy: str
    batch_size: int
    parameters: int
    weights_bytes: int  # the variables, in their dtype (float32 under mixed policies)
    weight_copies_bytes: int  # 16-bit casts of the trainable weights made during the step
    gradients_bytes: int
    optimizer_bytes: int  # slots, step counters, the loss scale
    activations_bytes: int  # kept for the backward pass, of the configured batch
    total_bytes: int
    measured_peak_bytes: int | None = None  # TensorFlow's allocator, a short real run
    largest_batch: int | None = None  # that fits in 80% of this machine's memory
    largest_batch_basis: str = ""  # "estimate" or "measured"
    note: str | None = None  # e.g. far beyond the data set


def estimate(model, optimizer, policy: str, compute_dtype: str, variable_dtype: str,
             batch: int) -> MemoryPlan:
    """For a model and its built optimizer under `policy`, training batches of `batch`:
    weights, 16-bit weight copies, gradients and optimizer state counted from the built
    variables; activations from the layers' outputs (and inside attention, its scores), or,
    for models whose inner layers were never called on symbolic inputs (subclassed models),
    from the operations of the model's forward graph."""
    trainable = sum(int(math.prod(v.shape)) for v in model.trainable_variables)
    outputs = [(layer, _output_bytes(layer)) for layer in leaf_layers(model)]
    by_layers = sum((size or 0) + _attention_bytes(layer) for layer, size in outputs)
    unread = any(layer.weights and size is None for layer, size in outputs)
    per_example = _graph_activation_bytes(model) if unread or not by_layers else by_layers
    copies = trainable * _itemsize(compute_dtype) if compute_dtype != variable_dtype else 0
    fixed = dict(weights_bytes=sum(_bytes(v) for v in model.weights), weight_copies_bytes=copies,
                 gradients_bytes=sum(_bytes(v) for v in model.trainable_variables),
                 optimizer_bytes=sum(_bytes(v) for v in optimizer.variables))
    return MemoryPlan(policy=policy, batch_size=batch, parameters=model.count_params(), **fixed,
                      activations_bytes=per_example * batch,
                      total_bytes=sum(fixed.values()) + per_example * batch)


def _graph_activation_bytes(model) -> int:
    """Per example: the float outputs of the forward graph's operations, less those that
    only read, copy or reshape (what backpropagation keeps is among the rest)."""
    total = 0
    for op in one_example_graph(model, training=True).get_operations():
        if op.type in VIEW_OPS or (op.type == "Cast" and op.inputs[0].op.type == "ReadVariableOp"):
            continue
        for out in op.outputs:
            dims = static_shape(out.shape)
            if out.dtype.is_floating and dims:
                total += math.prod(dims) * out.dtype.size
    return total


VIEW_OPS = ("Placeholder", "Const", "ReadVariableOp", "Identity", "Reshape", "Shape", "NoOp",
            "StridedSlice", "Squeeze", "ExpandDims", "StopGradient")


def _bytes(variable) -> int:
    return int(math.prod(variable.shape)) * _itemsize(variable.dtype)


def _itemsize(dtype) -> int:
    import keras

    return {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int32": 4, "int64": 8,
            "uint8": 1, "bool": 1}.get(keras.backend.standardize_dtype(dtype), 4)


def _attention_bytes(layer) -> int:
    """What a MultiHeadAttention keeps inside itself for the backward pass, per example: the
    query, key and value projections and the attended values, and the heads x query x key
    scores with their softmax (float32, as mptrain's attention computes it) and, under
    dropout, the dropped probabilities and their mask. The scores grow with the square of the
    sequence: on a 128-token transformer they outweigh every layer output together."""
    import keras

    if not isinstance(layer, keras.layers.MultiHeadAttention):
        return 0
    try:
        inputs = layer.input
    except (AttributeError, ValueError):
        return 0
    inputs = list(inputs) if isinstance(inputs, list | tuple) else [inputs]
    query, key = inputs[0], inputs[1] if len(inputs) > 1 else inputs[0]
    if any(d is None for d in (*query.shape[1:-1], *key.shape[1:-1])):
        return 0
    tq, tk = int(math.prod(query.shape[1:-1])), int(math.prod(key.shape[1:-1]))
    item, heads = _itemsize(layer.compute_dtype), layer.num_heads
    # queries and attended values (tq of each), keys and values (tk of each)
    projections = heads * item * (tq + tk) * (layer.key_dim + layer.value_dim)
    scores = heads * tq * tk * (item + 4 + ((item + 1) if layer.dropout else 0))
    return projections + scores


def _output_bytes(layer) -> int | None:
    """Bytes of one example's output of a layer (symbolic shapes of a functional model); None
    for a layer never called on symbolic inputs."""
    try:
        outputs = layer.output
    except (AttributeError, ValueError):
        return None
    outputs = outputs if isinstance(outputs, list | tuple) else [outputs]
    return sum(int(math.prod(out.shape[1:])) * _itemsize(out.dtype)
               for out in outputs if None not in out.shape[1:])


class MemoryStats(FrozenRecord):
    """Memory, as far as this machine can tell.

    The process peak (RSS) includes TensorFlow itself and the whole data set, so it barely
    moves between policies. TensorFlow's allocator (`device`) reports what it holds: the data
    set's tensors before the model is built (`data_bytes`) and the peak during training; their
    difference, `training_peak_bytes`, is the training state a policy changes: weights,
    gradients, optimizer state and activations.
    """

    process_peak_bytes: int
    device: str
    device_peak_bytes: int | None
    data_bytes: int | None
    training_peak_bytes: int | None


class MemoryMeter:
    """`start()` once the data is on the device and before the model is built; `stats()` after
    training. An allocator that keeps no statistics reports None (TensorFlow's default CPU
    allocator where oneDNN is off: `hardware.runtime.ALLOCATOR` asks for the one that does)."""

    def __init__(self, tf, device: str):
        self.tf, self.device = tf, device
        self.data_bytes: int | None = None

    def start(self) -> MemoryMeter:
        info = self._info()
        self.data_bytes = info["current"] if info else 0
        with contextlib.suppress(ValueError, RuntimeError):
            self.tf.config.experimental.reset_memory_stats(self.device)
        return self

    def stats(self) -> MemoryStats:
        info = self._info()
        peak = info["peak"] if info else None
        training = peak - self.data_bytes if peak is not None and self.data_bytes is not None else None
        return MemoryStats(process_peak_bytes=peak_rss_bytes(), device=self.device,
                           device_peak_bytes=peak, data_bytes=self.data_bytes,
                           training_peak_bytes=training)

    def _info(self) -> dict[str, int] | None:
        """{current, peak} in bytes; None when the allocator keeps no statistics, or has seen
        nothing (on CPUs small tensors bypass the allocator that counts)."""
        try:
            info = self.tf.config.experimental.get_memory_info(self.device)
        except (ValueError, RuntimeError):
            return None
        return {k: int(v) for k, v in info.items()} if info.get("peak") else None


def peak_rss_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024
