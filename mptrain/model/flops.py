"""The performance model: how many FLOPs a training step does, and how many this CPU could do.

Their ratio is model FLOPs utilisation (MFU), the number nanoGPT reports beside step time: it
says how close a run is to the hardware's limit, which seconds alone cannot.

FLOPs are counted from the model's own TensorFlow graph (every MatMul, batched MatMul, Einsum
and convolution, with their static shapes), so the count covers any model mptrain can build,
including attention and models from outside mptrain. A recurrent layer (LSTM, GRU, SimpleRNN,
and a Bidirectional pair) runs its step in a loop TensorFlow keeps in a function of its own,
which the outer graph shows as one op: it is counted from its weights instead, a step's
multiply-adds (input and recurrent kernels) times its timesteps. Training is counted as 3x
the forward pass, the rule nanoGPT and the scaling-law papers use. A model whose graph cannot
be traced here is not counted at all, and said: never a failed run, never silently low.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

from mptrain.hardware.machine import CpuInfo
from mptrain.model.walk import input_structure, layer_names, leaf_layers

# The CPU's matrix units, fastest first: (unit, the /proc/cpuinfo flag that says it is there,
# for bfloat16 only, dense-matmul FLOP per cycle per physical core). AMX-BF16 (TDPBF16PS): a
# 16x32 by 32x16 tile product (8192 multiply-adds) per 16 cycles. AVX512_BF16 (VDPBF16PS): 2
# ports x 16 lanes x 2 pairs x 2. AVX-512 FP32: 2 FMA ports x 16 lanes x 2 (multiply, add).
# AVX2 FP32: 2 x 8 x 2.
CPU_UNITS = (("AMX-BF16", "amx_bf16", True, 1024), ("AVX512_BF16", "avx512_bf16", True, 128),
             ("AVX-512 FP32", "avx512f", False, 64), ("AVX2 FP32", "avx2", False, 32))


@dataclass(frozen=True)
class Peak:
    """A CPU's peak FLOP/s for one compute dtype, and what sets it: the unit of CPU_UNITS at
    the base clock (nominal), or the fastest matrix product this machine's kernel check found
    (measured)."""

    flops_per_second: float
    unit: str  # "AVX-512 FP32", or the kernel measured: "matmul 1024² in bfloat16+onednn"
    measured: bool = False


def machine_peak(cpu: CpuInfo, compute_dtype: str, kernels=None) -> Peak | None:
    """The peak a run's MFU reads against: measured where this machine's kernels were
    (`hardware.kernels.KernelSpeeds.fastest_product`: the fastest matrix product in the
    compute dtype or float32, with either math library or XLA), else nominal (`cpu_peak`).
    The nominal one assumes the base clock and one unit: on an AVX2-only EPYC it was 0.157
    TFLOP/s, which an XLA step read as 84% and a oneDNN step would have read as 113%."""
    fastest = kernels.fastest_product((compute_dtype, "float32")) if kernels is not None else None
    if fastest is None:
        return cpu_peak(cpu, compute_dtype)
    return Peak(fastest.tflops * 1e12, f"{fastest.kernel} in {fastest.setting}", measured=True)


def cpu_peak(cpu: CpuInfo, compute_dtype: str) -> Peak | None:
    """Physical cores x clock x FLOP/cycle of the fastest unit for the dtype (None: unknown).

    The clock is /proc/cpuinfo's "cpu MHz" (the base clock on most VMs): with turbo the real
    peak is higher, so utilisation above 100% means the cores ran faster than that clock.
    float16 has no fast CPU matmul path in TensorFlow, so it is counted at the fp32 rate.
    """
    if not cpu.mhz:
        return None
    for unit, flag, bfloat16_only, per_cycle in CPU_UNITS:
        if flag in cpu.flags and (compute_dtype == "bfloat16" or not bfloat16_only):
            return Peak(cpu.physical_cores * cpu.mhz * 1e6 * per_cycle, unit)
    return None


@dataclass(frozen=True)
class ForwardProfile:
    """One example's forward pass, read from its TensorFlow graph, and the layers it ran
    through (walked once: lint's rules read them from here)."""

    flops: int  # matrix-unit FLOPs, 2 per multiply-add
    flops_by_layer: dict[str, int]  # by the innermost named layer that ran each op
    ops: int  # operations in the graph: each costs a kernel launch, whatever its size
    layers: tuple  # the model's leaf layers (`walk.leaf_layers`), in the model's order
    uncounted: tuple[str, ...] = ()  # layers whose matrix ops could not be counted: not in `flops`
    # a model of its own algorithm over sub-models (`own_step.sub_models`): the sub-models
    # counted, each once per example, which its own step may run more or less often
    sub_models: tuple[str, ...] = ()

    def notes(self) -> list[str]:
        """What the count leaves out or assumes, for the run's notes."""
        notes = ([f"FLOPs per example leave out {', '.join(self.uncounted)}: TensorFlow's graph "
                  "does not give their sizes, so the compute figures are a lower bound"]
                 if self.uncounted else [])
        if self.sub_models:
            notes.append(f"FLOPs per example are those of {', '.join(self.sub_models)}, each "
                         "counted as one forward and backward pass per example; how often the "
                         "model's own step runs each is its own (a teacher forward only, a GAN's "
                         "discriminator twice), so the compute figures and MFU are an estimate")
        return notes

    @property
    def training_flops(self) -> int:
        """FLOPs to train on one example: the backward pass (gradients of the inputs and of the
        weights) is twice the forward."""
        return 3 * self.flops


def one_example_graph(model, training: bool, example_shape: tuple[int, ...] | None = None):
    """The model's forward pass on one example, traced as a TensorFlow graph (`training`: as
    training runs it, dropout and all: the one the memory estimate reads). `example_shape`,
    the data's, fills the sizes a one-input model leaves open (keras.io's text models take
    `Input(shape=(None,))`): traced with them open, no convolution has a size to count."""
    import keras
    import tensorflow as tf

    def spec(t) -> tf.TensorSpec:
        declared = tuple(t.shape[1:])
        if example_shape is not None and len(model.inputs) == 1 and len(example_shape) == len(declared):
            declared = tuple(given if want is None else want
                             for want, given in zip(declared, example_shape, strict=True))
        return tf.TensorSpec((1, *declared), t.dtype)

    # the model's own input structure: one tensor, a list, or a dict of named columns
    specs = keras.tree.map_structure(spec, input_structure(model))
    return tf.function(lambda x: model(x, training=training),
                       autograph=False).get_concrete_function(specs).graph


def forward_profile(model, example_shape: tuple[int, ...] | None = None) -> ForwardProfile:
    """The forward pass's FLOPs, by layer, on one example of `example_shape` (the data's).
    A matrix op without static shapes, or one inside a function TensorFlow calls (Keras
    compiles grouped convolutions with XLA), is not counted: its layer is named in
    `uncounted`, never silently zero; recurrent layers are counted over their timesteps
    (`_recurrent_flops`). A model of its own training algorithm over sub-models, which has no
    graph of its own (a distiller's teacher and student, a GAN's generator and
    discriminator), is counted as its sub-models, each on its own inputs."""
    from mptrain.model.own_step import has_graph, sub_models

    if not has_graph(model) and (parts := sub_models(model)):
        profiles = [forward_profile(sub) for sub in parts.values()]
        return ForwardProfile(sum(p.flops for p in profiles),
                              dict(Counter(sum((Counter(p.flops_by_layer) for p in profiles), Counter()))),
                              sum(p.ops for p in profiles), sum((p.layers for p in profiles), ()),
                              sum((p.uncounted for p in profiles), ()), tuple(parts))
    layers = tuple(leaf_layers(model))
    try:
        graph = one_example_graph(model, False, example_shape)
    except Exception as exc:  # any model validate passed must train: say it, never crash on it
        why = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
        return ForwardProfile(0, {}, 0, layers, (f"the whole model (its graph could not be traced "
                                                 f"for one example: {why})",))
    names = set(layer_names(model))
    by_layer: Counter[str] = Counter()
    uncounted: dict[str, None] = {}
    ops = 0
    for op in graph.get_operations():
        ops += op.type not in ("Placeholder", "Const", "Identity", "NoOp", "ReadVariableOp")
        flops = _op_flops(op)
        if flops is None:
            uncounted[_layer_of(op.name, names)] = None
        elif flops:
            by_layer[_layer_of(op.name, names)] += flops
    for name, flops in _recurrent_flops(model, layers, example_shape).items():
        uncounted.pop(name, None)
        if flops is None:
            uncounted[f"{name} (recurrent, timesteps unknown)"] = None
        else:
            by_layer[name] += flops
    return ForwardProfile(by_layer.total(), dict(by_layer), ops, layers, tuple(uncounted))


def _recurrent_flops(model, layers, example_shape) -> dict[str, int | None]:
    """Each recurrent layer's forward FLOPs for one example: 2 x (its input and recurrent
    kernels' sizes: a step's multiply-adds, whatever the cell) x its timesteps, read from its
    input's shape, or, where the model leaves the length open (keras.io's
    `Input(shape=(None,))`), from the data's sequences; None when neither says. A layer
    unrolled (`unroll=True`) has its steps in the graph, counted there."""
    import keras

    from mptrain.model.keras_internals import first_call_inputs

    open_length = (example_shape[0] if example_shape and len(model.inputs) == 1
                   and len(model.inputs[0].shape) > 1 and model.inputs[0].shape[1] is None else None)
    counted: dict[str, int | None] = {}
    for layer in layers:
        if not isinstance(layer, keras.layers.RNN | keras.layers.Bidirectional):
            continue
        inner = [layer.forward_layer, layer.backward_layer] if isinstance(
            layer, keras.layers.Bidirectional) else [layer]
        if any(getattr(r, "unroll", False) for r in inner):
            continue
        per_step = sum(math.prod(w.shape) for w in layer.weights if "kernel" in w.path.split("/")[-1])
        inputs = first_call_inputs(layer)
        steps = inputs[0].shape[1] if inputs and len(inputs[0].shape) == 3 else None
        steps = steps if steps is not None else open_length
        counted[layer.name] = 2 * per_step * steps if steps else None
    return counted


def _layer_of(op_name: str, names: set[str]) -> str:
    """The innermost layer in an op's name scope. A traced call's scopes come suffixed (Keras
    3.15: the ops of layers `dense`, `dense_1` and `dense_2` are under `dense_1/`,
    `dense_1_2/` and `dense_2_1/`), so the name without its last suffix is tried first: the
    exact name first would credit `dense`'s ops to `dense_1`."""
    for part in reversed(op_name.split("/")[:-1]):
        stem = re.sub(r"_\d+$", "", part)
        if stem in names:
            return stem
        if part in names:
            return part
    return "?"


def static_shape(shape) -> list[int] | None:
    """A TensorFlow shape's dimensions; None when any is not known."""
    dims = shape.as_list() if shape.rank is not None else None
    return None if dims is None or any(d is None for d in dims) else dims


CALLS = ("PartitionedCall", "StatefulPartitionedCall")  # a function's ops are in its own graph
# each convolution op → where its kernel's dims that one element multiplies by end: window x
# input channels (per group); a depthwise kernel sees one input channel per output channel;
# a transposed kernel is (window..., output channels, input channels). Conv1D is a Conv2D of
# height 1.
CONVOLUTIONS = {"Conv2D": -1, "Conv3D": -1, "DepthwiseConv2dNative": -2,
                "Conv2DBackpropInput": -1, "Conv3DBackpropInputV2": -1}


def _op_flops(op) -> int | None:
    """2 x the multiply-adds of a matrix op; 0 for any other op; None: a matrix op (or a
    call that may hold some) whose size the graph does not say."""
    kind = op.type
    if kind in CALLS:
        return None
    if kind in ("MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3"):
        out = static_shape(op.outputs[0].shape)
        a = static_shape(op.inputs[0].shape)
        if out is None or a is None:
            return None
        transposed = op.get_attr("transpose_a" if kind == "MatMul" else "adj_x")
        inner = a[-2] if transposed else a[-1]
        return 2 * math.prod(out) * inner
    if kind == "Einsum":
        return _einsum_flops(op)
    if kind in CONVOLUTIONS:
        # a transposed convolution spreads each element of its input (the gradient it
        # propagates) over a window; the others compute each output element from one
        sized = static_shape((op.inputs[2] if "Backprop" in kind else op.outputs[0]).shape)
        kernel = static_shape(op.inputs[1].shape)
        if sized is None or kernel is None:
            return None
        return 2 * math.prod(sized) * math.prod(kernel[:CONVOLUTIONS[kind]])
    return 0


def _einsum_flops(op) -> int | None:
    """2 x the product of every index's size: each combination is one multiply-add."""
    equation = op.get_attr("equation").decode()
    inputs = equation.split("->")[0].split(",")
    sizes: dict[str, int] = {}
    for subscripts, tensor in zip(inputs, op.inputs, strict=False):
        dims = static_shape(tensor.shape)
        letters = re.sub(r"[^a-zA-Z]", "", subscripts)
        if dims is None or "." in subscripts or len(letters) != len(dims):
            return None
        sizes.update(zip(letters, dims, strict=True))
    return 2 * math.prod(sizes.values()) if len(inputs) == 2 else 0
