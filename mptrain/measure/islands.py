"""Float32 islands: the layers of a model that are slower in 16 bits (or overflow float16),
found by timing each weight-bearing layer's forward and backward on its own, in 16 bits and
in float32, interleaved. plan keeps them in float32 (`model.float32_layers`) in one more
trial, kept only if it is measured faster."""

from __future__ import annotations

from mptrain.config import ExperimentConfig
from mptrain.model.own_step import has_own_step
from mptrain.model.walk import leaf_layers
from mptrain.precision.candidates import Candidate
from mptrain.record import Record

TIMED_LAYER_KINDS = ("Dense", "EinsumDense", "Conv1D", "Conv2D", "Conv3D", "DepthwiseConv2D",
                     "SeparableConv2D", "Conv2DTranspose", "MultiHeadAttention", "Float32SoftmaxAttention")
LAYER_BUDGET_S = 0.3  # each layer's interleaved timing of its two precisions


class LayerTiming(Record):
    """One layer's forward and backward, in 16 bits and in float32 (ms, medians)."""

    layer: str
    ms_16bit: float
    ms_float32: float
    spread_16bit: tuple[float, float]
    spread_float32: tuple[float, float]

    @property
    def slower_in_16bit(self) -> bool:
        """Slower beyond the noise: the 16-bit spread lies wholly above float32's."""
        return self.spread_16bit[0] > self.spread_float32[1]


def layer_timings(config: ExperimentConfig, candidate: Candidate, seconds: float,
                  verbose: bool = False) -> list[LayerTiming]:
    """Forward and backward of each weight-bearing layer on its own, at the experiment's
    batch size, in the candidate's 16-bit policy and in float32, interleaved; the heaviest
    layers first (weights times output positions: their share of the step), for at most
    `seconds` (each layer traces two functions: a ResNet50's 54 took 5 minutes)."""
    import time

    import keras
    import numpy as np

    from mptrain.hardware.kernels import interleaved
    from mptrain.precision.policy import DTYPES, apply_policy
    from mptrain.runs.experiment import prepare

    prepared = prepare(config, policy="float32", verbose=verbose)
    if has_own_step(prepared.model):
        return []  # a model of its own step keeps its layers as built (`own_step.check_own_step`)
    tf = prepared.tf
    policy16 = candidate.policy if candidate.policy != "float32" else "mixed_bfloat16"
    compute16 = DTYPES[policy16][0]
    batch = config.train.batch_size // max(prepared.place.replicas, 1)
    timings = []
    until = time.monotonic() + seconds
    layers = [layer for layer in leaf_layers(prepared.model, whole=TIMED_LAYER_KINDS)
              if type(layer).__name__ in TIMED_LAYER_KINDS and layer.weights]
    try:
        for layer in sorted(layers, key=_weight, reverse=True):
            if time.monotonic() > until:
                break
            if (shapes := _input_shapes(layer)) is None:
                continue
            calls = {}
            for label, policy, dtype in (("16", policy16, compute16), ("32", "float32", "float32")):
                apply_policy(policy)
                copy = type(layer).from_config({**layer.get_config(), "dtype": policy})
                inputs = [tf.cast(tf.random.normal((batch, *s)), dtype) for s in shapes]
                copy(*inputs) if len(inputs) > 1 else copy(inputs[0])
                calls[label] = (_fwd_bwd(tf, copy, candidate.jit_compile is True), tuple(inputs))
            timed = interleaved(calls, LAYER_BUDGET_S)
            # each setting's 10th, 50th and 90th percentile, in ms
            ms = {k: np.percentile([1e3 * s for s in v], (10, 50, 90)).tolist()
                  for k, v in timed.items()}
            timings.append(LayerTiming(
                layer=layer.name, ms_16bit=ms["16"][1], ms_float32=ms["32"][1],
                spread_16bit=(ms["16"][0], ms["16"][2]), spread_float32=(ms["32"][0], ms["32"][2])))
    finally:
        apply_policy("float32")
        keras.backend.clear_session()
    return timings


def _weight(layer) -> int:
    """A layer's share of a step, roughly: its weights times the positions it computes them
    at (a convolution's output pixels, a sequence's tokens)."""
    import math

    try:
        positions = math.prod(d or 1 for d in layer.output.shape[1:-1])
    except (AttributeError, ValueError):
        positions = 1
    return layer.count_params() * positions


def _input_shapes(layer) -> list[tuple[int, ...]] | None:
    """The shapes (without the batch) a layer was called with, from its first call."""
    from mptrain.model.keras_internals import first_call_inputs

    shapes = [tuple(t.shape[1:]) for t in first_call_inputs(layer) or []]
    return shapes if shapes and all(d is not None for s in shapes for d in s) else None


def _fwd_bwd(tf, layer, jit: bool):
    def step(*inputs):
        with tf.GradientTape() as tape:
            for x in inputs:
                tape.watch(x)
            out = layer(*inputs) if len(inputs) > 1 else layer(inputs[0])
            total = tf.reduce_sum(tf.cast(out, tf.float32))
        grads = tape.gradient(total, [*inputs, *layer.trainable_variables])
        return tf.add_n([tf.reduce_sum(tf.cast(g, tf.float32)) for g in grads if g is not None])

    return tf.function(step, jit_compile=jit, autograph=False)


def islands(timings: list[LayerTiming], overflowing: list[str]) -> list[str]:
    """Layers to keep in float32: slower in 16 bits beyond the noise, or overflowing."""
    return [t.layer for t in timings if t.slower_in_16bit] + [n for n in overflowing
                                                              if n not in {t.layer for t in timings}]
